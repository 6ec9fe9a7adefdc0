package coordinator

import (
	"context"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
)

// Launchers: where a sweep's (or an evaluation's) workers run (see
// launch.Kinds).
const (
	LauncherLocal = launch.LocalName // processes on this machine
	LauncherSlurm = launch.SlurmName // tasks of a Slurm job array, on the cluster's nodes
)

// SlurmConfig says how workers are submitted to Slurm (see
// launch.SlurmConfig).
type SlurmConfig = launch.SlurmConfig

// DefaultSlurmPoll is how often the coordinator asks Slurm where its
// tasks are.
const DefaultSlurmPoll = launch.DefaultSlurmPoll

// launcherKind is the launcher an activity uses (see launch.Resolve).
func launcherKind(kind launch.Kind, name string) (launch.Kind, error) {
	return launch.Resolve(kind, name)
}

// releaseAll gives up the workers that will not start (see
// launch.ReleaseAll).
func releaseAll(ctx context.Context, l launch.Launcher, workers []launch.Worker) {
	launch.ReleaseAll(ctx, l, workers)
}

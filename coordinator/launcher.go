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

// launcherKind is the launcher an activity uses: kind when it has a New
// (a test's), else the one name names.
func launcherKind(kind launch.Kind, name string) (launch.Kind, error) {
	if kind.New != nil {
		return kind, nil
	}
	return launch.Find(name)
}

// releaseAll tells the launcher none of the workers will start again:
// planned workers no attempt asked for are given up.
func releaseAll(ctx context.Context, l launch.Launcher, workers []launch.Worker) {
	for _, w := range workers {
		l.Release(ctx, w)
	}
}

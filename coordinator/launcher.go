package coordinator

import (
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

// Package coordinator is what the tolaria command calls to carry out its
// work: sampling, signals and the GPU list here, and the rooms, packages of
// their own whose names it re-exports for its callers: a training run
// (train), sweeps (sweep), the run directory (rundir), the launchers and
// device slots (launch), the budget broker (budget), sharded evaluation
// (eval) and reinforcement learning (rl). It never initialises CUDA: GPU
// work happens in a tolaria-worker process.
package coordinator

import "github.com/tolaria-ml/tolaria/coordinator/refusal"

// The two ways a job is refused before it runs. A command maps them to
// its exit codes; the errors that carry them name the setting at fault
// with a field.Error where there is one.
var (
	// ErrConfig is wrapped by refusals of the job as configured: a
	// setting, the data files, the run directory or its checkpoint.
	ErrConfig = refusal.ErrConfig
	// ErrSetup is wrapped by refusals that come from this machine rather
	// than from the configuration: no worker, no GPU, a busy port.
	ErrSetup = refusal.ErrSetup
)

func configErr(err error) error { return refusal.Config(err) }
func setupErr(err error) error  { return refusal.Setup(err) }

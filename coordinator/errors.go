// Package coordinator carries out training jobs and sweeps for the
// tolaria command: it chooses the device, finds, probes and starts worker
// processes (or runs a CPU job in this process), and keeps the /metrics
// server up for as long as a run needs it. Its rooms are packages of
// their own, whose names it re-exports for its callers: the run directory
// (rundir), the launchers and device slots (launch), the budget broker
// (budget), sharded evaluation (eval) and reinforcement learning (rl). It
// never initialises CUDA: GPU work happens in a tolaria-worker process.
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

// Package coordinator holds what the tolaria command shares across its
// activities: the choice of device and GPUs (placement), the GPU list a
// worker reports, signals, and sampling from a run. The activities are
// packages of their own that import the launcher (launch) and the run
// directory (rundir), never each other: a training run (train), sweeps
// (sweep), the budget broker (budget), sharded evaluation (eval) and
// reinforcement learning (rl); a refusal of the user's input is
// refusal.ErrConfig, one of this machine's refusal.ErrSetup. It never
// initialises CUDA: GPU work happens in a tolaria-worker process.
package coordinator

import "github.com/tolaria-ml/tolaria/coordinator/refusal"

func configErr(err error) error { return refusal.Config(err) }
func setupErr(err error) error  { return refusal.Setup(err) }

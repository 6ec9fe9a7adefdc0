package dqn

import (
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// learnerSlots and learnerBuffers are the learner stager's pinned slots
// and device input buffers.
const learnerSlots, learnerBuffers = 4, 2

// LearnerBill is what NewLearner will hold on dev for cfg (see
// trainer.Bill): the online network's parameters and optimizer state,
// the target network's parameters (billed with the parameters), the
// pooled workspace of the training step (StepSizes: its activations and
// gradients, Double DQN's scratch), the stager's input buffers and
// pinned slots, the pinned weights and statistics it publishes through,
// and two streams' scratch (its compute stream and the stager's). What a
// learner's worker asks the budget broker for before it allocates; dev
// decides only how allocations are rounded.
func LearnerBill(cfg Config, dev device.Device) (trainer.Bill, error) {
	spec, err := cfg.Spec()
	if err != nil {
		return trainer.Bill{}, err
	}
	bytes := func(n int) int64 { return device.AllocBytes(dev, n) }
	p := spec.ParamCount()
	b := trainer.Bill{Parameters: 2 * bytes(p), OptimizerState: int64(cfg.Optimizer.StateBuffers()) * bytes(p)}
	sizes := StepSizes(spec, cfg.BatchSize)
	nw := len(nn.WorkspaceSizes(spec, cfg.BatchSize))
	b.Gradients = bytes(sizes[0])
	for _, n := range sizes[1:nw] {
		b.Activations += bytes(n)
	}
	for _, n := range sizes[nw:] {
		b.Workspace += bytes(n)
	}
	batch := NewLayout(spec, cfg.BatchSize).Len
	b.StagingInputs = learnerBuffers * bytes(batch)
	b.PinnedHost = int64(p+device.StatsLen+learnerSlots*batch) * 4
	b.StreamScratch = streamScratch(dev, 2)
	return b, nil
}

// ActorBill is what NewActor will hold on dev for one agent's actor of
// cfg: its policy's weights and pooled workspace over num_envs
// observations, the evaluator's over eval_episodes when evaluations are
// on (it reads the policy's weights), their pinned observations and
// actions, the pinned weights it syncs through, and one stream's scratch
// for each.
func ActorBill(cfg Config, dev device.Device) (trainer.Bill, error) {
	spec, err := cfg.Spec()
	if err != nil {
		return trainer.Bill{}, err
	}
	p := spec.ParamCount()
	b := trainer.Bill{Parameters: device.AllocBytes(dev, p), PinnedHost: int64(p) * 4}
	policy := func(n int) {
		for _, size := range greedySizes(spec, n, false) {
			b.Workspace += device.AllocBytes(dev, size)
		}
		b.PinnedHost += int64(n*spec.Inputs+n) * 4
		b.StreamScratch += streamScratch(dev, 1)
	}
	policy(cfg.NumEnvs)
	if cfg.EvalInterval > 0 {
		policy(cfg.EvalEpisodes)
	}
	return b, nil
}

func streamScratch(dev device.Device, streams int) int64 {
	if sc, ok := dev.(device.StreamScratch); ok {
		return int64(streams) * sc.StreamScratchBytes()
	}
	return 0
}

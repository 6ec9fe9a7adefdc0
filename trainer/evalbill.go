package trainer

import (
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// evalSlots and evalBuffers are the evaluation stager's pinned slots and
// device input buffers (see Evaluate).
const evalSlots, evalBuffers = 4, 2

// evalOptimizer is the optimizer of an evaluation's model: never used;
// SGD without momentum holds the least state.
func evalOptimizer() nn.Optimizer {
	opt := nn.DefaultOptimizer()
	opt.Kind, opt.Momentum = nn.SGD, 0
	return opt
}

// EvalBill is what Evaluate will hold on dev for cfg once set up: the
// model's parameters (and a net's running state, and the state of the
// unused optimizer, evalOptimizer), one batch's workspace (every buffer
// nn.WorkspaceSizes or nn.NetWorkspaceSizes lists: the gradients' buffers
// are allocated although an evaluation never fills them), the stager's
// input buffers and pinned slots, and each stream's scratch. What an
// evaluation shard's worker asks the budget broker for before it
// allocates; dev decides only how allocations are rounded.
func EvalBill(cfg EvalConfig, dev device.Device) Bill {
	bytes := func(n int) int64 { return device.AllocBytes(dev, n) }
	params := cfg.Spec.ParamCount()
	sizes, head := nn.WorkspaceSizes(cfg.Spec, cfg.BatchSize), 4
	var b Bill
	if arch, ok := netArch(cfg.Net); ok {
		params, head = arch.Params, nn.NetWorkspaceHead
		var err error
		if sizes, err = nn.NetWorkspaceSizes(arch, cfg.BatchSize); err != nil {
			return Bill{} // refused by Validate
		}
		if n := arch.RunningLen(); n > 0 {
			b.RunningState = bytes(n)
		}
	}
	b.Parameters = bytes(params)
	b.OptimizerState = int64(evalOptimizer().StateBuffers()) * bytes(params)
	if len(sizes) > 0 {
		b.Gradients = bytes(sizes[0])
	}
	for i, n := range sizes[min(1, len(sizes)):] {
		if i+1 < head {
			b.Workspace += bytes(n)
		} else {
			b.Activations += bytes(n)
		}
	}
	batch := nn.NewLayout(cfg.Spec, cfg.BatchSize).Len
	b.StagingInputs = evalBuffers * bytes(batch)
	b.PinnedHost = int64(evalSlots*batch) * 4
	if sc, ok := dev.(device.StreamScratch); ok {
		// The compute stream and the stager's.
		b.StreamScratch = 2 * sc.StreamScratchBytes()
	}
	return b
}

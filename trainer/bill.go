package trainer

import (
	"fmt"
	"strings"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// Bill is the memory a run will hold once it is set up, in bytes, by
// kind: what a worker asks the coordinator's budget broker for before it
// allocates anything. The device kinds add up to DeviceBytes; PinnedHost
// is page-locked host memory, which the device's budget does not cover.
type Bill struct {
	Parameters     int64 `json:"parameters"`      // the model's weights and biases
	Gradients      int64 `json:"gradients"`       // one per parameter, in the graph pool's workspace
	OptimizerState int64 `json:"optimizer_state"` // momentum, Adam's moments: each as large as the parameters
	// RunningState is a net's state that is not trained: batchnorm's
	// running statistics and the dropout generator (0 for an MLP).
	RunningState int64 `json:"running_state,omitempty"`
	// Activations are the captured steps' per-layer buffers in the graph
	// pool's workspace: pre-activations, activations and their gradients,
	// and a net's per-layer scratch (a conv's im2col columns, a maxpool's
	// arg-max, a batchnorm's normalised input and batch statistics, a
	// dropout's mask).
	Activations int64 `json:"activations"`
	// Workspace is the captured steps' scratch: the gradient norm, the
	// training and evaluation accumulators, a net's zero bias (graph
	// pool) and the accumulators' snapshot for the log-interval reads.
	Workspace int64 `json:"workspace"`
	// StagingInputs are the static device input buffers the staging
	// stream copies batches into (two for training, two for evaluation).
	StagingInputs int64 `json:"staging_inputs"`
	// StreamScratch is what the device allocates with each of the run's
	// streams (device.StreamScratch: the CUDA device's scratch for
	// reductions split over blocks); 0 on a device without it.
	StreamScratch int64 `json:"stream_scratch,omitempty"`
	// Context is what the worker process's CUDA context and loaded
	// modules take on the device, as the worker measured it once they
	// existed (see jobserver's contextBytes); 0 on the CPU device. BillFor
	// leaves it 0: it is the process's, not the run's.
	Context int64 `json:"context,omitempty"`
	// PinnedHost is the staging rings' pinned slots and the pinned
	// buffer the accumulators are read through.
	PinnedHost int64 `json:"pinned_host"`
}

// DeviceBytes is the device memory the bill covers: every kind but
// PinnedHost.
func (b Bill) DeviceBytes() int64 {
	return b.Parameters + b.Gradients + b.OptimizerState + b.RunningState + b.Activations + b.Workspace + b.StagingInputs +
		b.StreamScratch + b.Context
}

// GraphPoolBytes is the part of the bill the graph pool holds as the
// captured steps' workspace: gradients, activations and the pooled
// scratch (everything in Workspace but the snapshot buffer).
func (b Bill) GraphPoolBytes() int64 { return b.Gradients + b.Activations + b.Workspace }

// Kinds lists the bill's device kinds in a fixed order with their bytes,
// for messages and events; running_state, stream_scratch and context
// only when there is one.
func (b Bill) Kinds() []BillKind {
	kinds := []BillKind{{"parameters", b.Parameters}, {"gradients", b.Gradients}, {"optimizer_state", b.OptimizerState}}
	if b.RunningState > 0 {
		kinds = append(kinds, BillKind{"running_state", b.RunningState})
	}
	kinds = append(kinds, BillKind{"activations", b.Activations}, BillKind{"workspace", b.Workspace}, BillKind{"staging_inputs", b.StagingInputs})
	if b.StreamScratch > 0 {
		kinds = append(kinds, BillKind{"stream_scratch", b.StreamScratch})
	}
	if b.Context > 0 {
		kinds = append(kinds, BillKind{"context", b.Context})
	}
	return kinds
}

// BillKind is one line of a bill.
type BillKind struct {
	Kind  string
	Bytes int64
}

// String names every kind with its size, then the total and the pinned
// host memory, e.g. "parameters 0.9 MiB, gradients 0.9 MiB, ... = 4.1 MiB
// of device memory (+ 1.6 MiB pinned host)".
func (b Bill) String() string {
	var parts []string
	for _, k := range b.Kinds() {
		parts = append(parts, k.Kind+" "+FormatBytes(k.Bytes))
	}
	return fmt.Sprintf("%s = %s of device memory (+ %s pinned host)", strings.Join(parts, ", "), FormatBytes(b.DeviceBytes()), FormatBytes(b.PinnedHost))
}

// FormatBytes writes a size in the largest binary unit that keeps it at
// least 1, with one decimal (bytes are exact).
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for (v >= unit || v <= -unit) && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}

// Bill is what the planned run will hold on dev once set up (see
// BillFor); dev decides only how allocations are rounded, nothing is
// allocated.
func (p *Plan) Bill(dev device.Device) Bill { return BillFor(p.cfg, dev) }

// BillFor computes cfg's bill from the shapes the run allocates, each
// allocation rounded as dev rounds it (device.AllocBytes): the model
// (nn.NewModel, nn.NewNetModel), the pooled workspace (nn.WorkspaceSizes,
// nn.NetWorkspaceSizes), the stagers' input buffers and pinned slots, and
// the trainer's own buffers. A change to what set-up allocates must change
// this too; the test that compares it with the device's count after
// set-up fails otherwise.
func BillFor(cfg Config, dev device.Device) Bill {
	bytes := func(n int) int64 { return device.AllocBytes(dev, n) }
	params := cfg.Spec.ParamCount()
	// The order of nn.WorkspaceSizes: gradients, norm, the two
	// accumulators, then the per-layer buffers.
	sizes, head := nn.WorkspaceSizes(cfg.Spec, cfg.BatchSize), 4
	var b Bill
	if arch, ok := cfg.netArch(); ok {
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
	b.OptimizerState = int64(cfg.Optimizer.StateBuffers()) * bytes(params)
	b.Gradients = bytes(sizes[0])
	for _, n := range sizes[1:head] {
		b.Workspace += bytes(n)
	}
	for _, n := range sizes[head:] {
		b.Activations += bytes(n)
	}
	b.Workspace += bytes(2 * device.StatsLen) // the accumulators' snapshot
	batch := nn.NewLayout(cfg.Spec, cfg.BatchSize).Len
	const stagers, inputs = 2, 2 // training and evaluation, two input buffers each
	b.StagingInputs = stagers * inputs * bytes(batch)
	b.PinnedHost = int64(stagers*cfg.Slots*batch)*4 + 2*device.StatsLen*4
	if sc, ok := dev.(device.StreamScratch); ok {
		// The compute and side streams, and each stager's.
		const streams = 2 + stagers
		b.StreamScratch = streams * sc.StreamScratchBytes()
	}
	return b
}

// MemoryBill reports a run's bill (Estimate) next to what the device
// reported after set-up: the device memory set-up took (ActualDevice, the
// difference of device.UsedMemory before and after, from Source:
// "allocations" or "driver") and the pinned host memory it took
// (ActualPinned).
type MemoryBill struct {
	Estimate     Bill   `json:"estimate"`
	ActualDevice int64  `json:"actual_device"`
	ActualPinned int64  `json:"actual_pinned"`
	Source       string `json:"source"`
}

// Event is the bill as a line of the events log.
func (m MemoryBill) Event() map[string]any {
	est := map[string]any{"device": m.Estimate.DeviceBytes(), "pinned_host": m.Estimate.PinnedHost}
	for _, k := range m.Estimate.Kinds() {
		est[k.Kind] = k.Bytes
	}
	return map[string]any{"estimate": est, "actual_device": m.ActualDevice, "actual_pinned": m.ActualPinned, "source": m.Source}
}

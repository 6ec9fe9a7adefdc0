package trainer_test

import (
	"context"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestEvalBillIsWhatEvaluateAllocates: for every built-in model the bill
// an evaluation shard's worker sends before allocating is exactly the
// device memory and pinned host memory Evaluate holds once set up (the
// CPU device's count of its live allocations at the first batch), and
// the CPU device bills no stream scratch and no context.
func TestEvalBillIsWhatEvaluateAllocates(t *testing.T) {
	for name, cfg := range billModels() {
		t.Run(name, func(t *testing.T) {
			ds, err := data.Synthetic(data.SyntheticConfig{N: 3*cfg.BatchSize + 5, Features: cfg.Spec.Inputs, Classes: cfg.Spec.Outputs, Seed: 1, Noise: 1})
			if err != nil {
				t.Fatal(err)
			}
			ec := trainer.EvalConfig{Spec: cfg.Spec, Net: cfg.Net, BatchSize: cfg.BatchSize, Data: ds, Shard: 0, Shards: 2}
			ec.Params = make([]float32, cfg.Spec.ParamCount())
			if arch, err := cfg.Net.Resolve(); err == nil && cfg.Net.Layers != nil {
				ec.Params, ec.Running = arch.InitParams(1), arch.InitRunning(1)
			}
			dev, err := cpu.Open(cpu.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			bill := trainer.EvalBill(ec, dev)
			var device, pinned int64
			ec.AfterBatch = func(n int) {
				if n == 1 {
					m := dev.MemoryStats()
					device, pinned = m.DeviceInUse, m.HostPinned
				}
			}
			if _, err := trainer.Evaluate(context.Background(), dev, newShared(t), ec); err != nil {
				t.Fatal(err)
			}
			t.Logf("bill %v; at the first batch %d bytes of device memory, %d pinned", bill, device, pinned)
			if bill.DeviceBytes() != device || bill.PinnedHost != pinned {
				t.Errorf("bill %d device bytes and %d pinned; Evaluate held %d and %d", bill.DeviceBytes(), bill.PinnedHost, device, pinned)
			}
			if bill.StreamScratch != 0 || bill.Context != 0 {
				t.Errorf("bill %+v: the CPU device has no stream scratch or context", bill)
			}
		})
	}
}

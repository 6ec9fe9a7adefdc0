package trainer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// billModels are the built-in models (the job's default MLP, the bench's
// mlp and tiny presets) and the variations that change what set-up
// allocates: each optimizer's state, mean squared error's one-hot labels,
// clipping, a deep narrow net, a wide batch, more staging slots; a small
// CNN (a conv block and a residual block) and a net with every kind of
// layer.
func billModels() map[string]trainer.Config {
	mlp := nn.Spec{Inputs: 784, Hidden: []int{256, 128}, Outputs: 10, Act: device.ActGELU, Loss: nn.LossCrossEntropy}
	tiny := nn.Spec{Inputs: 16, Outputs: 2, Act: device.ActNone, Loss: nn.LossCrossEntropy}
	adamw, sgd, momentum := nn.DefaultOptimizer(), nn.DefaultOptimizer(), nn.DefaultOptimizer()
	sgd.Kind, sgd.Momentum = nn.SGD, 0
	momentum.Kind, momentum.Momentum = nn.SGD, 0.9
	clipped := adamw
	clipped.ClipNorm = 1
	mse := mlp
	mse.Loss = nn.LossMSE
	deep := nn.Spec{Inputs: 32, Hidden: []int{8, 8, 8, 8, 8}, Outputs: 3, Act: device.ActReLU, Loss: nn.LossCrossEntropy}
	cfg := func(s nn.Spec, o nn.Optimizer, batch, slots int) trainer.Config {
		return trainer.Config{Spec: s, Optimizer: o, Epochs: 1, BatchSize: batch, Seed: 3, Ragged: data.RaggedPad,
			EnableGraphs: true, WarmupBatches: 1, Slots: slots, Loaders: 1, LogEvery: 1, World: 1, MaxSteps: 3}
	}
	withNet := func(c trainer.Config, n nn.Net) trainer.Config {
		a, err := n.Resolve()
		if err != nil {
			panic(err)
		}
		c.Net, c.Spec = n, a.Outline()
		return c
	}
	cnn := nn.Net{Input: nn.Shape{1, 28, 28}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU(), nn.MaxPool(2),
		nn.Residual(nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU()),
		nn.Flatten(), nn.Linear(10)}}
	every := nn.Net{Input: nn.Shape{3, 8, 8}, Loss: nn.LossMSE, Layers: []nn.LayerSpec{
		nn.Conv(4, 3).WithStride(2), nn.GELU(), nn.AvgPool(2).WithPadding(1), nn.BatchNorm(), nn.Tanh(),
		nn.Dropout(0.3), nn.GlobalAvgPool(), nn.Flatten(), nn.Residual(nn.Flatten()),
		nn.Residual(nn.Linear(4), nn.ReLU()), nn.Linear(5)}}
	return map[string]trainer.Config{
		"example cnn":             withNet(cfg(mlp, adamw, 64, 4), cnn),
		"every layer sgd":         withNet(cfg(mlp, momentum, 16, 2), every),
		"default mlp adamw":       cfg(mlp, adamw, 64, 4),
		"bench mlp preset":        cfg(mlp, adamw, 64, 4),
		"bench tiny preset":       cfg(tiny, adamw, 8, 4),
		"mlp sgd":                 cfg(mlp, sgd, 64, 4),
		"mlp sgd momentum":        cfg(mlp, momentum, 64, 4),
		"mlp clipped":             cfg(mlp, clipped, 64, 4),
		"mlp mse":                 cfg(mse, adamw, 32, 4),
		"deep narrow":             cfg(deep, adamw, 16, 2),
		"tiny wide batch 8 slots": cfg(tiny, momentum, 512, 8),
	}
}

// TestBillCoversWhatSetUpAllocates: for every built-in model the bill a
// worker sends before allocating is within 10% above the device memory
// set-up actually took (the CPU device's count of its live allocations),
// the pinned host memory likewise, and both are reported as a
// memory_bill measurement and event.
func TestBillCoversWhatSetUpAllocates(t *testing.T) {
	for name, cfg := range billModels() {
		t.Run(name, func(t *testing.T) {
			ds, err := data.Synthetic(data.SyntheticConfig{N: 4*cfg.BatchSize + 40, Features: cfg.Spec.Inputs, Classes: cfg.Spec.Outputs, Seed: 1, Noise: 1})
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Train, cfg.Test, err = ds.Split(4 * cfg.BatchSize); err != nil {
				t.Fatal(err)
			}
			steps, err := trainer.StepsPerEpoch(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Optimizer.TotalSteps = steps
			var bills []trainer.MemoryBill
			var events []trainer.Event
			cfg.Observer = trainer.ObserverFunc(func(m trainer.Measurement) {
				switch m := m.(type) {
				case trainer.MemoryBill:
					bills = append(bills, m)
				case trainer.Event:
					if m.Kind == trainer.EventMemoryBill {
						events = append(events, m)
					}
				}
			})
			plan, err := trainer.NewPlan(cfg)
			if err != nil {
				t.Fatal(err)
			}
			dev, err := cpu.Open(cpu.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			ahead := plan.Bill(dev)
			if _, err := plan.Run(context.Background(), dev, newShared(t)); err != nil {
				t.Fatal(err)
			}
			if len(bills) != 1 || len(events) != 1 {
				t.Fatalf("%d memory_bill measurements and %d events, want one of each", len(bills), len(events))
			}
			b := bills[0]
			if b.Estimate != ahead {
				t.Errorf("the bill reported (%v) is not the one computed before the run (%v)", b.Estimate, ahead)
			}
			if b.Source != "allocations" {
				t.Errorf("source %q, want allocations (the CPU device's count)", b.Source)
			}
			t.Logf("bill %v; set-up took %d bytes of device memory, %d pinned", b.Estimate, b.ActualDevice, b.ActualPinned)
			within(t, "device", b.Estimate.DeviceBytes(), b.ActualDevice)
			within(t, "pinned host", b.Estimate.PinnedHost, b.ActualPinned)
			if est, ok := events[0].Fields["estimate"].(map[string]any); !ok || est["device"] != b.Estimate.DeviceBytes() || events[0].Fields["actual_device"] != b.ActualDevice {
				t.Errorf("the memory_bill event %v does not carry the estimate and the actual figure", events[0].Fields)
			}
		})
	}
}

// within fails unless estimate is in [actual, 1.1*actual].
func within(t *testing.T, what string, estimate, actual int64) {
	t.Helper()
	if actual <= 0 || estimate < actual || float64(estimate) > 1.1*float64(actual) {
		t.Errorf("%s: estimate %d bytes, actual %d: want the estimate within 10%% above the actual", what, estimate, actual)
	}
}

// TestBillNamesEveryKind: the bill's text, which a refusal quotes, names
// each kind with its size and the total.
func TestBillNamesEveryKind(t *testing.T) {
	b := trainer.Bill{Parameters: 3 << 20, Gradients: 3 << 20, OptimizerState: 6 << 20, Activations: 1536, Workspace: 100,
		StagingInputs: 2 << 10, PinnedHost: 5 << 30}
	got := b.String()
	for _, want := range []string{"parameters 3.0 MiB", "gradients 3.0 MiB", "optimizer_state 6.0 MiB", "activations 1.5 KiB",
		"workspace 100 B", "staging_inputs 2.0 KiB", "= 12.0 MiB of device memory", "5.0 GiB pinned host"} {
		if !strings.Contains(got, want) {
			t.Errorf("bill %q does not say %q", got, want)
		}
	}
	if b.DeviceBytes() != 12<<20+1536+100+2<<10 || b.GraphPoolBytes() != 3<<20+1536+100 {
		t.Errorf("DeviceBytes %d, GraphPoolBytes %d", b.DeviceBytes(), b.GraphPoolBytes())
	}
}

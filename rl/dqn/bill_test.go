package dqn

import (
	"testing"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// TestBillsAreWhatTheHalvesAllocate: the bills an actor's and a learner's
// workers send before allocating are exactly the device memory and the
// pinned host memory NewActor and NewLearner hold (the CPU device's count
// of its live allocations), with evaluations on and off and for each
// optimizer's state.
func TestBillsAreWhatTheHalvesAllocate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Config)
	}{
		{"default", func(*Config) {}},
		{"no evaluations, sgd", func(c *Config) { c.EvalInterval, c.Optimizer.Kind, c.Optimizer.Momentum = 0, nn.SGD, 0 }},
		{"wide", func(c *Config) {
			c.Hidden, c.NumEnvs, c.BatchSize, c.EvalInterval, c.EvalEpisodes = []int{64, 32}, 16, 128, 1000, 7
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Hidden, cfg.BatchSize = []int{16}, 32
			c.edit(&cfg)
			must(t, cfg.Validate())
			spec, err := cfg.Spec()
			must(t, err)
			mem, err := shm.CreateShared("tolaria-test-bill", cfg.Layout(spec))
			must(t, err)
			defer mem.Close()
			shared := NewShared()
			defer shared.Pool.Close()
			for _, role := range []string{"actor", "learner"} {
				dev, err := cpu.Open(cpu.Config{})
				must(t, err)
				bill, err := ActorBill(cfg, dev)
				var half interface{ Close() error }
				if role == "learner" {
					bill, err = LearnerBill(cfg, dev)
					must(t, err)
					half, err = NewLearner(dev, shared, mem, cfg, 0, LearnerOptions{})
				} else {
					must(t, err)
					half, err = NewActor(dev, shared, mem, cfg, 0, ActorOptions{})
				}
				must(t, err)
				m := dev.MemoryStats()
				t.Logf("%s: bill %v; it holds %d bytes of device memory, %d pinned", role, bill, m.DeviceInUse, m.HostPinned)
				if bill.DeviceBytes() != m.DeviceInUse || bill.PinnedHost != m.HostPinned {
					t.Errorf("%s: bill %d device bytes and %d pinned; it holds %d and %d", role, bill.DeviceBytes(), bill.PinnedHost, m.DeviceInUse, m.HostPinned)
				}
				must(t, half.Close())
				must(t, shared.Pool.Drop(dev))
				must(t, dev.Close())
			}
		})
	}
}

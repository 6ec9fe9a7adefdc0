package jobserver

import (
	"fmt"
	"testing"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// TestSharedActorBillIsWhatItAllocates: the bill a shared actor's worker
// sends before it allocates is exactly the device memory and the pinned
// host memory NewSharedActor holds (the CPU device's count of its live
// allocations), for two and three agents, with evaluations on and off.
func TestSharedActorBillIsWhatItAllocates(t *testing.T) {
	for _, c := range []struct {
		agents, evalInterval int
	}{{2, 2000}, {3, 0}} {
		t.Run(fmt.Sprintf("%d agents, eval_interval %d", c.agents, c.evalInterval), func(t *testing.T) {
			cfg := dqn.DefaultConfig()
			cfg.Env = env.Spec{Name: env.ForageName, Params: map[string]any{"width": 8, "height": 8, "food": 4, "max_steps": 40}}
			cfg.NumAgents, cfg.Hidden, cfg.NumEnvs, cfg.EvalInterval, cfg.EvalEpisodes = c.agents, []int{16}, 3, c.evalInterval, 5
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			spec, err := cfg.Spec()
			if err != nil {
				t.Fatal(err)
			}
			mems := make([]*shm.Memory, c.agents)
			for i := range mems {
				if mems[i], err = shm.CreateShared(fmt.Sprintf("tolaria-test-shared-bill-%d", i), cfg.Layout(spec)); err != nil {
					t.Fatal(err)
				}
				defer mems[i].Close()
			}
			dev, err := cpu.Open(cpu.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			bill, err := SharedActorBill(cfg, dev)
			if err != nil {
				t.Fatal(err)
			}
			shared := dqn.NewShared()
			defer shared.Pool.Close()
			actor, err := dqn.NewSharedActor(dev, shared, mems, cfg, dqn.SharedActorOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m := dev.MemoryStats()
			t.Logf("bill %v; it holds %d bytes of device memory, %d pinned", bill, m.DeviceInUse, m.HostPinned)
			if bill.DeviceBytes() != m.DeviceInUse || bill.PinnedHost != m.HostPinned {
				t.Errorf("bill %d device bytes and %d pinned; the shared actor holds %d and %d", bill.DeviceBytes(), bill.PinnedHost, m.DeviceInUse, m.HostPinned)
			}
			if err := actor.Close(); err != nil {
				t.Fatal(err)
			}
			if err := shared.Pool.Drop(dev); err != nil {
				t.Fatal(err)
			}
		})
	}
}

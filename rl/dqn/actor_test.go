package dqn

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// killActor leaves a's buffer as an actor killed part-way through a
// vector step leaves it: the environments stepped, the transitions of the
// first appended of them appended, the others' not, and the step not
// counted. (Every action is 0: what matters here is the buffer's count.)
func killActor(t *testing.T, a *Actor, appended int) {
	t.Helper()
	n, o := a.vec.Len(), a.spec.Inputs
	obs := slices.Clone(a.vec.Obs())
	next, out := make([]float32, n*o), make([]env.Transition, n)
	if _, err := a.vec.Step(make([]int, n), next, out, nil); err != nil {
		t.Fatal(err)
	}
	for i, tr := range out[:appended] {
		must(t, a.mem.Append(shm.Transition{Obs: obs[i*o : (i+1)*o], Reward: tr.Reward,
			Terminated: tr.Terminated, Truncated: tr.Truncated, NextObs: next[i*o : (i+1)*o]}))
	}
}

// TestActorEndsAtTotalSteps: an agent's actor ends at exactly total_steps
// environment steps, however its count stands against its vector of
// num_envs environments: started again over a buffer that an actor
// killed between two environments' appends left mid-way through a vector
// step, and with total_steps no multiple of num_envs. The episodes it
// tells (and counts in the agent's epoch) are those whose last
// transition it appended.
func TestActorEndsAtTotalSteps(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	t.Cleanup(func() { _ = dev.Close() }) // after the actors' cleanups
	for _, c := range []struct {
		name         string
		envs, total  int
		before, kill int    // the killed actor's vector steps, then the transitions of its last appended; 0, 0: none ran
		from         uint64 // the transitions as the actor starts
	}{
		{"killed between two environments", 2, 200, 20, 1, 41},
		{"killed after two of three environments", 3, 201, 20, 2, 62},
		{"total_steps no multiple of num_envs", 2, 201, 0, 0, 0},
		{"total_steps no multiple of num_envs, killed", 4, 203, 10, 2, 42},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.NumEnvs, cfg.Hidden, cfg.BufferCapacity = c.envs, []int{16}, 1000
			cfg.TotalSteps, cfg.LearningStarts, cfg.EvalInterval = c.total, 100, 0
			mem := sharedMemories(t, withAgents(cfg, 1))[0]
			if c.before > 0 {
				killed := newTestActor(t, dev, cfg, mem, ActorOptions{})
				for range c.before {
					must(t, killed.Step())
				}
				killActor(t, killed, c.kill)
			}
			if got := mem.Appended(); got != c.from {
				t.Fatalf("the buffer holds %d transitions as the actor starts, want %d", got, c.from)
			}
			epoch0 := mem.Epoch()
			var told []int // each told episode's step count
			a := newTestActor(t, dev, cfg, mem, ActorOptions{OnEpisode: func(e env.Episode, steps int) { told = append(told, steps) }})
			if a.Steps() != int(c.from) {
				t.Fatalf("the actor starts at %d steps, want the buffer's %d", a.Steps(), c.from)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			must(t, a.Run(ctx))
			if mem.Appended() != uint64(c.total) || a.Steps() != c.total {
				t.Errorf("the agent ended at %d transitions (%d steps counted), want total_steps %d", mem.Appended(), a.Steps(), c.total)
			}
			ends := 0 // the transitions that end an episode, from the actor's first
			for _, tr := range transitions(t, []*shm.Memory{mem}, c.from, mem.Appended())[0] {
				if tr.Terminated || tr.Truncated {
					ends++
				}
			}
			if len(told) == 0 || len(told) != ends || uint64(len(told)) != mem.Epoch()-epoch0 || slices.Max(told) > c.total {
				t.Errorf("%d episodes told (at steps %v), %d ended in the buffer, the epoch counted %d; want the same, at most total_steps %d",
					len(told), told, ends, mem.Epoch()-epoch0, c.total)
			}
		})
	}
}

// withAgents is cfg with n agents.
func withAgents(cfg Config, n int) Config {
	cfg.NumAgents = n
	return cfg
}

// newTestActor makes agent 0's actor over mem, closed with the test.
func newTestActor(t *testing.T, dev *cpu.Device, cfg Config, mem *shm.Memory, opts ActorOptions) *Actor {
	t.Helper()
	shared := NewShared()
	t.Cleanup(func() { shared.Pool.Close() })
	a, err := NewActor(dev, shared, mem, cfg, 0, opts)
	must(t, err)
	t.Cleanup(func() { _ = a.Close() })
	must(t, a.Sync(context.Background()))
	return a
}

package dqn

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// TestShortRunBeatsRandom trains one agent for 15,000 environment steps
// (a 64-64 network for 10,000 under the race detector) with a fixed seed:
// the mean return of its last 20 episodes must clearly beat a random
// policy's (about 22 on CartPole-v1).
func TestShortRunBeatsRandom(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := DefaultConfig()
	cfg.TotalSteps, cfg.EpsilonDecaySteps = 15000, 8000
	if raceEnabled {
		cfg.Hidden, cfg.TotalSteps, cfg.EpsilonDecaySteps = []int{64, 64}, 10000, 5000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := RunInProcess(ctx, dev, cfg, RunOptions{Graphs: true, MaxLead: 50})
	must(t, err)
	r := res[0]
	t.Logf("%d env steps, %d learner steps, %d episodes, last-20 mean %.1f, loss %.4f, %d fallbacks, %s",
		r.EnvSteps, r.LearnerSteps, len(r.Episodes), r.MeanReturn(20), r.Loss, r.Fallbacks, r.Elapsed)
	for i, e := range r.EvalResults {
		t.Logf("evaluation at step %d (weights version %d): mean return %.1f over %d greedy episodes, %s",
			e.EnvSteps, e.Version, e.MeanReturn, e.Episodes, e.Elapsed)
		if e.EnvSteps != (i+1)*cfg.EvalInterval || e.Episodes != cfg.EvalEpisodes || len(e.Returns) != e.Episodes || e.Version == 0 {
			t.Errorf("evaluation %d: at step %d of version %d with %d episodes (%d returns), want step %d and %d episodes of published weights",
				i, e.EnvSteps, e.Version, e.Episodes, len(e.Returns), (i+1)*cfg.EvalInterval, cfg.EvalEpisodes)
		}
	}
	if len(r.EvalResults) != cfg.TotalSteps/cfg.EvalInterval {
		t.Errorf("%d evaluations, want one every %d of %d steps", len(r.EvalResults), cfg.EvalInterval, cfg.TotalSteps)
	}
	if r.Fallbacks != 0 {
		t.Errorf("%d learner steps ran eagerly", r.Fallbacks)
	}
	if m := r.MeanReturn(20); m < 66 {
		t.Fatalf("mean return of the last 20 episodes %.1f, want at least 66, three times a random policy's 22", m)
	}
}

// TestCancelledLearnerCloses: a learner cancelled while it waits for
// transitions that will not come (its actor stopped with the same
// interrupt, without setting the stop flag) returns from Run and closes
// at once: its staging loader does not wait on.
func TestCancelledLearnerCloses(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := DefaultConfig()
	cfg.Hidden = []int{16}
	spec, err := cfg.Spec()
	must(t, err)
	mem, err := shm.Create(filepath.Join(t.TempDir(), "agent0"), cfg.Layout(spec))
	must(t, err)
	defer mem.Close()
	shared := NewShared()
	defer shared.Pool.Close()
	l, err := NewLearner(dev, shared, mem, cfg, 0, LearnerOptions{Graphs: true})
	must(t, err)
	must(t, l.Capture())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := l.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want the context's error", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case err := <-closed:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close has not returned 10s after Run: the staging loader still waits for transitions")
	}
}

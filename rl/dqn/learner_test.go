package dqn

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/trainer"
)

// learnerOver makes a small learner over a new memory holding n
// transitions whose observations are obs(j).
func learnerOver(t *testing.T, n int, obs func(j int) float32) (*Learner, *shm.Memory, Config) {
	t.Helper()
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	t.Cleanup(func() { dev.Close() })
	cfg := DefaultConfig()
	cfg.Hidden, cfg.BatchSize, cfg.LearningStarts = []int{16}, 32, 64
	spec, err := cfg.Spec()
	must(t, err)
	mem, err := shm.CreateShared("tolaria-test-agent0", cfg.Layout(spec))
	must(t, err)
	t.Cleanup(func() { mem.Close() })
	o := cfg.Layout(spec).ObsSize
	for j := range n {
		tr := shm.Transition{Obs: make([]float32, o), NextObs: make([]float32, o), Action: j % 2, Reward: 1}
		for i := range o {
			tr.Obs[i], tr.NextObs[i] = obs(j), obs(j+1)
		}
		must(t, mem.Append(tr))
	}
	shared := NewShared()
	t.Cleanup(func() { shared.Pool.Close() })
	l, err := NewLearner(dev, shared, mem, cfg, 0, LearnerOptions{Graphs: true})
	must(t, err)
	t.Cleanup(func() { l.Close() })
	must(t, l.Capture())
	return l, mem, cfg
}

// trainUntilWaiting runs l until it has trained on every transition
// there and waits for more (then the stop flag ends it) or until Run
// returns by itself; it returns Run's error.
func trainUntilWaiting(t *testing.T, l *Learner, mem *shm.Memory) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			t.Fatal("the learner neither failed nor waited for transitions within a minute")
		case <-time.After(time.Millisecond):
			if l.Waiting() {
				mem.Stop()
				return <-done
			}
		}
	}
}

// TestNonFiniteLearnerStops: a learner whose buffer holds NaN
// observations stops with ErrNotFinite at its first publish (at most
// publish_interval steps in), publishes nothing, and its Save refuses to
// put the NaN weights in place of the good checkpoint.
func TestNonFiniteLearnerStops(t *testing.T) {
	// 88 transitions: 25 training steps' worth (64, then one a step).
	l, mem, cfg := learnerOver(t, 88, func(int) float32 { return float32(math.NaN()) })
	dir := t.TempDir()
	must(t, l.Save(dir, 0)) // step 0: the initial, finite weights
	path := filepath.Join(dir, trainer.CheckpointFile)
	good, err := os.ReadFile(path)
	must(t, err)
	err = trainUntilWaiting(t, l, mem)
	if !errors.Is(err, ErrNotFinite) || !strings.Contains(err.Error(), "not finite") || !strings.Contains(err.Error(), "step") {
		t.Fatalf("Run after %d steps on NaN observations: %v; want it stopped as not finite, naming the step", l.Steps(), err)
	}
	if l.Steps() > cfg.PublishInterval || mem.Version() != 1 {
		t.Errorf("stopped at step %d with weights version %d; want by step %d with only the initial weights published",
			l.Steps(), mem.Version(), cfg.PublishInterval)
	}
	if err := l.Save(dir, 0); !errors.Is(err, ErrNotFinite) {
		t.Errorf("Save of NaN weights: %v, want a refusal", err)
	}
	if now, err := os.ReadFile(path); err != nil || !bytes.Equal(now, good) {
		t.Errorf("the good checkpoint changed (%v)", err)
	}
}

// TestSaveKeepsALaterCheckpoint: a learner never replaces a checkpoint of
// a later step than its own, nor one it cannot read.
func TestSaveKeepsALaterCheckpoint(t *testing.T) {
	l, mem, _ := learnerOver(t, 88, func(j int) float32 { return float32(j%7) / 10 })
	must(t, trainUntilWaiting(t, l, mem))
	dir := t.TempDir()
	must(t, l.Save(dir, 0))
	path := filepath.Join(dir, trainer.CheckpointFile)
	later, err := os.ReadFile(path)
	must(t, err)
	fresh, _, _ := learnerOver(t, 0, func(int) float32 { return 0 })
	if err := fresh.Save(dir, 0); err == nil || !strings.Contains(err.Error(), "later than") {
		t.Errorf("a step-0 learner's Save over a step-%d checkpoint: %v, want a refusal", l.Steps(), err)
	}
	if now, err := os.ReadFile(path); err != nil || !bytes.Equal(now, later) {
		t.Errorf("the later checkpoint changed (%v)", err)
	}
	damaged := append([]byte(nil), later...)
	damaged[len(damaged)/2] ^= 1
	must(t, os.WriteFile(path, damaged, 0o600))
	if err := l.Save(dir, 0); err == nil || !strings.Contains(err.Error(), "cannot be read") {
		t.Errorf("Save over a damaged checkpoint: %v, want a refusal", err)
	}
}

// TestActorRefillsAnEmptiedBuffer: an actor over a buffer started again
// empty at transition 5000, with a learner at step 100 (so 1,150
// transitions would be its usual lead), is not held back until it has
// refilled the learning_starts transitions its learner waits for.
func TestActorRefillsAnEmptiedBuffer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Hidden = []int{16}
	spec, err := cfg.Spec()
	must(t, err)
	mem, err := shm.CreateShared("tolaria-test-agent0", cfg.Layout(spec))
	must(t, err)
	defer mem.Close()
	must(t, mem.StartAt(5000))
	mem.SetLearnerSteps(100)
	mem.Stop() // a held-back actor returns at once rather than wait
	a := &Actor{cfg: cfg, opts: ActorOptions{MaxLead: 50}, mem: mem}
	if err := a.waitForLearner(context.Background()); err != nil {
		t.Fatalf("the actor is held back at transition %d of a buffer refilled from 5000: %v", mem.Appended(), err)
	}
}

package trainer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/trainer"
)

// loopClock times the training loop from outside: from the start of its
// first step (the end of that step, as Stepped sees it, less the step's
// reported time) to the last epoch's end report. Both lie inside the loop,
// so the span is a lower bound on the loop's wall time. It also counts
// the samples the steps report.
type loopClock struct {
	mu        sync.Mutex
	first     time.Time // the first step's start
	last      time.Time // the last epoch's end report
	steps     int
	samples   int
	lastEpoch int
}

func (c *loopClock) Observe(m trainer.Measurement) {
	s, ok := m.(trainer.Stepped)
	if !ok {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.steps == 0 {
		c.first = now.Add(-time.Duration(s.Seconds * float64(time.Second)))
	}
	c.steps++
	c.samples += s.Samples
}

func (c *loopClock) progress(p trainer.Progress) {
	if p.EpochDone && p.Epoch == c.lastEpoch {
		c.mu.Lock()
		c.last = time.Now()
		c.mu.Unlock()
	}
}

// TestSamplesPerSecond checks the summary's samples_per_second against
// the samples the run trained on (the training set, every epoch) and the
// time its loop took, measured from outside: the time between the first
// step's start and the last epoch's end is at most the loop's, and the
// whole Run at least the loop's. An inflated figure exceeds the first
// bound, a deflated one falls under the second.
func TestSamplesPerSecond(t *testing.T) {
	cfg := smallConfig(t)
	clock := &loopClock{lastEpoch: cfg.Epochs}
	cfg.Observer, cfg.Progress = clock, clock.progress
	dev := openCPU(t)
	start := time.Now()
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	whole := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	clock.mu.Lock()
	defer clock.mu.Unlock()

	// The ragged last batch of each epoch is padded: its padding rows are
	// not samples.
	samples := cfg.Epochs * cfg.Train.Len()
	if clock.samples != samples || sum.Steps != clock.steps {
		t.Fatalf("steps report %d samples over %d steps (summary: %d steps), want %d samples: %d epochs of %d",
			clock.samples, clock.steps, sum.Steps, samples, cfg.Epochs, cfg.Train.Len())
	}
	if clock.last.IsZero() || !clock.last.After(clock.first) {
		t.Fatalf("the loop's span was not observed: first step at %v, last epoch's end at %v", clock.first, clock.last)
	}
	inside := clock.last.Sub(clock.first).Seconds()
	most := float64(samples) / inside
	least := float64(samples) / whole.Seconds()
	// 1e-6 relative covers the nanosecond rounding of the step time.
	if got := sum.SamplesPerSecond; got > most*(1+1e-6) || got < least {
		t.Errorf("samples_per_second %.1f, want %d samples over the loop's time: between %.1f (over the whole Run, %v) and %.1f (over the loop's span, %.4fs)",
			got, samples, least, whole, most, inside)
	}
}

package trainer_test

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// recorder keeps every measurement, for checking them against the
// run's summary.
type recorder struct {
	mu             sync.Mutex
	captures       int
	pooled         int
	captureSeconds float64
	replays        int
	stageCopies    int
	fallbacks      map[string]int
	execUpdates    int
	poolReserved   []int64
	prefetchOff    []bool
	steps, samples int
	losses         int
	accuracies     []float64
	epochs         []int
	memory         map[string]int64
	graphEnabled   []bool
	events         []string
	batches        int
}

func (r *recorder) Observe(m trainer.Measurement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch m := m.(type) {
	case trainer.GraphEnabled:
		r.graphEnabled = append(r.graphEnabled, m.On)
	case trainer.Captured:
		r.captures++
		r.captureSeconds += m.Seconds
		if m.Pooled {
			r.pooled++
		}
	case trainer.Replayed:
		r.replays++
	case trainer.StageCopied:
		r.stageCopies++
	case trainer.Fallback:
		r.fallbacks[m.Reason]++
	case trainer.ExecUpdated:
		r.execUpdates++
	case trainer.PoolReserved:
		r.poolReserved = append(r.poolReserved, m.Bytes)
	case trainer.PrefetchDisabled:
		r.prefetchOff = append(r.prefetchOff, m.Disabled)
	case trainer.Stepped:
		r.steps++
		r.samples += m.Samples
	case trainer.TrainLoss:
		r.losses++
	case trainer.EvalAccuracy:
		r.accuracies = append(r.accuracies, m.Accuracy)
	case trainer.Epoch:
		r.epochs = append(r.epochs, m.Epoch)
	case trainer.DeviceMemory:
		r.memory[m.What] = m.Bytes
	case trainer.Event:
		r.events = append(r.events, m.Kind)
	case trainer.TrainBatch:
		r.batches++
	}
}

// TestObserverSeesWhatTheRunDid: every measurement the metrics and the
// coordinator are built from reaches the Observer, and agrees with the
// summary of the same run.
func TestObserverSeesWhatTheRunDid(t *testing.T) {
	cfg := smallConfig(t)
	rec := &recorder{fallbacks: map[string]int{}, memory: map[string]int64{}}
	cfg.Observer = rec
	sum, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()

	if rec.captures == 0 || rec.captures != sum.Captures || rec.pooled != sum.CapturePooled {
		t.Errorf("observed %d captures (%d pooled), the run made %d (%d pooled)", rec.captures, rec.pooled, sum.Captures, sum.CapturePooled)
	}
	if math.Abs(rec.captureSeconds-sum.CaptureSeconds) > 1e-9 {
		t.Errorf("observed %gs of capture, the summary says %gs", rec.captureSeconds, sum.CaptureSeconds)
	}
	if countOf(rec.events, trainer.EventCapture) != sum.Captures {
		t.Errorf("%d capture events for %d captures", countOf(rec.events, trainer.EventCapture), sum.Captures)
	}
	if rec.replays == 0 || rec.replays != sum.GraphReplays {
		t.Errorf("observed %d replays, the run made %d", rec.replays, sum.GraphReplays)
	}
	if rec.steps != sum.Steps {
		t.Errorf("observed %d steps, the run made %d", rec.steps, sum.Steps)
	}
	if want := cfg.Epochs * cfg.Train.Len(); rec.samples != want {
		t.Errorf("observed %d samples, want %d (%d epochs of %d)", rec.samples, want, cfg.Epochs, cfg.Train.Len())
	}
	if rec.stageCopies == 0 || uint64(rec.stageCopies) > sum.StageCopies {
		t.Errorf("observed %d timed stage copies of %d issued", rec.stageCopies, sum.StageCopies)
	}
	for reason, n := range sum.Fallbacks {
		if rec.fallbacks[reason] != n {
			t.Errorf("observed %d %s fallbacks, the run had %d", rec.fallbacks[reason], reason, n)
		}
	}
	if len(rec.fallbacks) > len(sum.Fallbacks) {
		t.Errorf("observed fallbacks %v, the run had %v", rec.fallbacks, sum.Fallbacks)
	}
	if !slices.Equal(rec.epochs, []int{1, 2, 3}) {
		t.Errorf("observed epochs %v, want 1 2 3", rec.epochs)
	}
	if len(rec.accuracies) != cfg.Epochs || rec.accuracies[len(rec.accuracies)-1] != sum.TestAccuracy {
		t.Errorf("observed accuracies %v, the run ended with %v", rec.accuracies, sum.TestAccuracy)
	}
	if rec.losses == 0 {
		t.Error("no training loss observed")
	}
	if len(rec.graphEnabled) == 0 || !rec.graphEnabled[len(rec.graphEnabled)-1] {
		t.Errorf("graph-enabled reports %v, want the last to be true", rec.graphEnabled)
	}
	if sum.PrefetchDisabled != slices.Contains(rec.prefetchOff, true) {
		t.Errorf("prefetch-disabled reports %v, the summary says %v", rec.prefetchOff, sum.PrefetchDisabled)
	}
	if len(rec.poolReserved) == 0 || slices.Max(rec.poolReserved) <= 0 {
		t.Errorf("pool reserved reports %v, want a positive one", rec.poolReserved)
	}
	for _, kind := range []string{"in_use", "peak", "limit", "pinned"} {
		if _, ok := rec.memory[kind]; !ok {
			t.Errorf("no %s device memory observed: %v", kind, rec.memory)
		}
	}
	if countOf(rec.events, trainer.EventEpoch) != cfg.Epochs {
		t.Errorf("events %v, want one %s event per epoch", rec.events, trainer.EventEpoch)
	}
	if rec.batches != 0 {
		t.Errorf("%d training batches observed without ObserveBatches", rec.batches)
	}
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// TestPrefetchToDeviceIsOffAroundCapture: with prefetch to device on, the
// stagers run unguarded until the capture, which switches it off (logged,
// counted, reported) and back on once it is done; captures succeed and
// the run ends as an eager one does.
func TestPrefetchToDeviceIsOffAroundCapture(t *testing.T) {
	cfg := smallConfig(t)
	eager := cfg
	eager.EnableGraphs = false
	want := run(t, eager).ParamsSHA256

	cfg.PrefetchToDevice = true
	rec := &recorder{fallbacks: map[string]int{}, memory: map[string]int64{}}
	cfg.Observer = rec
	sum, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !sum.PrefetchDisabled || !slices.Equal(rec.prefetchOff, []bool{true, false}) {
		t.Errorf("summary prefetch_to_device_disabled %v, reports %v; want off around the one capture", sum.PrefetchDisabled, rec.prefetchOff)
	}
	if countOf(rec.events, trainer.EventPrefetchOff) != 1 {
		t.Errorf("events %v, want one %s", rec.events, trainer.EventPrefetchOff)
	}
	if !sum.GraphEnabled || len(rec.fallbacks) > 0 || sum.ParamsSHA256 != want {
		t.Errorf("graphs %v, fallbacks %v, same params as eager %v", sum.GraphEnabled, rec.fallbacks, sum.ParamsSHA256 == want)
	}
}

// TestEveryEpochReportsItsLastInterval: the interval ending with an
// epoch's last step is reported although the epoch's end reads the
// accumulators right after it.
func TestEveryEpochReportsItsLastInterval(t *testing.T) {
	cfg := smallConfig(t)
	cfg.LogEvery = 4 // 16 steps per epoch: the last interval ends the epoch
	var mu sync.Mutex
	last := map[int]bool{}
	cfg.Progress = func(p trainer.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if !p.EpochDone && p.Step == p.StepsPerEpoch {
			last[p.Epoch] = true
		}
	}
	run(t, cfg)
	mu.Lock()
	defer mu.Unlock()
	for e := 1; e <= cfg.Epochs; e++ {
		if !last[e] {
			t.Errorf("epoch %d: no progress report for its last interval (reported: %v)", e, last)
		}
	}
}

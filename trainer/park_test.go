package trainer_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/trainer"
)

// stepParker parks the run before each of the given steps (counted by
// Stepped measurements) and, while parked, notes the device memory still
// in use.
type stepParker struct {
	dev      device.Device
	at       map[int]bool
	mu       sync.Mutex
	steps    int
	inUse    []int64 // device memory in use while parked
	released []int64
	unparked int
}

func (p *stepParker) Observe(m trainer.Measurement) {
	if _, ok := m.(trainer.Stepped); ok {
		p.mu.Lock()
		p.steps++
		p.mu.Unlock()
	}
}

func (p *stepParker) ParkRequested() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at[p.steps] {
		delete(p.at, p.steps)
		return true
	}
	return false
}

func (p *stepParker) Parked(_ context.Context, released int64) error {
	p.inUse = append(p.inUse, p.dev.MemoryStats().DeviceInUse)
	p.released = append(p.released, released)
	return nil
}

func (p *stepParker) Unparked() { p.unparked++ }

// TestParkedRunEndsWithTheSameParameters: a run parked twice mid-epoch
// (after warm-up and capture, and again later) holds no device memory
// while parked, reports what it released, captures again after unparking,
// and ends with exactly the parameters of the same run never parked.
func TestParkedRunEndsWithTheSameParameters(t *testing.T) {
	twin := run(t, smallConfig(t))
	cfg := smallConfig(t)
	dev := openCPU(t)
	p := &stepParker{dev: dev, at: map[int]bool{5: true, 23: true}}
	var events []string
	cfg.Observer = trainer.Tee(p, trainer.ObserverFunc(func(m trainer.Measurement) {
		if e, ok := m.(trainer.Event); ok && (e.Kind == trainer.EventPark || e.Kind == trainer.EventUnpark) {
			events = append(events, e.Kind)
		}
	}))
	cfg.Parker = p
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.inUse) != 2 || p.unparked != 2 || len(events) != 4 {
		t.Fatalf("parked %d times, unparked %d, events %v; want two of each", len(p.inUse), p.unparked, events)
	}
	for i, n := range p.inUse {
		if n != 0 {
			t.Errorf("park %d: %d bytes of device memory still in use while parked", i+1, n)
		}
		if p.released[i] <= 0 {
			t.Errorf("park %d: released %d bytes", i+1, p.released[i])
		}
	}
	if sum.ParamsSHA256 != twin.ParamsSHA256 {
		t.Fatalf("parked twice: params %s, never parked %s", sum.ParamsSHA256, twin.ParamsSHA256)
	}
	if sum.StageCopies < twin.StageCopies {
		t.Errorf("stage copies %d, never parked %d: the copies before a park must stay counted", sum.StageCopies, twin.StageCopies)
	}
	if sum.Captures <= twin.Captures || sum.Steps != twin.Steps {
		t.Errorf("captures %d (never parked %d), steps %d (%d): want captures again after each unpark", sum.Captures, twin.Captures, sum.Steps, twin.Steps)
	}
}

// stopParker parks the run before the given step and, while parked, stops
// it (as SIGINT does to a parked worker): Parked returns when the run's
// context ends.
type stopParker struct {
	at, steps int
	stop      context.CancelFunc
	parked    bool
	mu        sync.Mutex
}

func (p *stopParker) Observe(m trainer.Measurement) {
	if _, ok := m.(trainer.Stepped); ok {
		p.mu.Lock()
		p.steps++
		p.mu.Unlock()
	}
}

func (p *stopParker) ParkRequested() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.steps == p.at && !p.parked
}

func (p *stopParker) Parked(ctx context.Context, _ int64) error {
	p.parked = true
	p.stop()
	<-ctx.Done()
	return ctx.Err()
}

func (p *stopParker) Unparked() {}

// TestStoppedWhileParked: a run stopped while parked (mid-epoch, and at an
// epoch's end) does not set up on the device again, which its budget no
// longer covers: it checkpoints from pinned host memory, and the run
// resumed from that checkpoint ends with exactly the parameters of one
// never parked nor stopped.
func TestStoppedWhileParked(t *testing.T) {
	twin := run(t, smallConfig(t))
	steps, err := trainer.StepsPerEpoch(smallConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{steps + 5, 2 * steps} {
		cfg := smallConfig(t)
		cfg.RunDir = t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := &stopParker{at: at, stop: cancel}
		var mu sync.Mutex
		setups, unparks := 0, 0
		cfg.Advance = func(stage string) {
			mu.Lock()
			setups += boolInt(stage == trainer.StageSetup)
			mu.Unlock()
		}
		cfg.Observer = trainer.Tee(p, trainer.ObserverFunc(func(m trainer.Measurement) {
			if e, ok := m.(trainer.Event); ok && e.Kind == trainer.EventUnpark {
				unparks++
			}
		}))
		cfg.Parker = p
		sum, err := trainer.Run(ctx, openCPU(t), newShared(t), cfg)
		if err != nil {
			t.Fatalf("stopped while parked before step %d: %v", at, err)
		}
		if !p.parked || !sum.Interrupted || setups != 1 || unparks != 0 {
			t.Fatalf("before step %d: parked %v, interrupted %v, set up %d times, unparked %d; want one set-up and no unpark",
				at, p.parked, sum.Interrupted, setups, unparks)
		}
		ck, err := trainer.LoadCheckpoint(filepath.Join(cfg.RunDir, trainer.CheckpointFile))
		if err != nil {
			t.Fatal(err)
		}
		if ck.Step != at {
			t.Fatalf("checkpoint at step %d, want %d (the step the run parked before)", ck.Step, at)
		}
		dir := cfg.RunDir
		cfg = smallConfig(t)
		cfg.RunDir, cfg.Resume = dir, true
		if sum := run(t, cfg); sum.ParamsSHA256 != twin.ParamsSHA256 || sum.Steps != twin.Steps {
			t.Fatalf("stopped while parked before step %d and resumed: params %s after %d steps; never parked %s after %d",
				at, sum.ParamsSHA256, sum.Steps, twin.ParamsSHA256, twin.Steps)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestParkLosesNoReplayTimes: every replay's device time reaches the
// observer, those timed just before a park included (the park tears down
// the timer's ring of events).
func TestParkLosesNoReplayTimes(t *testing.T) {
	cfg := smallConfig(t)
	dev := openCPU(t)
	p := &stepParker{dev: dev, at: map[int]bool{23: true}}
	var mu sync.Mutex
	timed := 0
	cfg.Observer = trainer.Tee(p, trainer.ObserverFunc(func(m trainer.Measurement) {
		if _, ok := m.(trainer.Replayed); ok {
			mu.Lock()
			timed++
			mu.Unlock()
		}
	}))
	cfg.Parker = p
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.unparked != 1 {
		t.Fatalf("unparked %d times; want 1", p.unparked)
	}
	if timed != sum.GraphReplays || timed == 0 {
		t.Fatalf("%d replays timed, %d replayed; want every replay timed", timed, sum.GraphReplays)
	}
}

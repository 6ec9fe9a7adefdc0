package trainer_test

import (
	"context"
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
	if sum.Captures <= twin.Captures || sum.Steps != twin.Steps {
		t.Errorf("captures %d (never parked %d), steps %d (%d): want captures again after each unpark", sum.Captures, twin.Captures, sum.Steps, twin.Steps)
	}
}

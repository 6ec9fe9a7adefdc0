package cuda

import (
	"errors"
	"strings"
	"testing"
)

// askedFence counts how often the pool asks it; it has passed once done
// is set, and fails with err when set.
type askedFence struct {
	done          bool
	err           error
	asked, waited int
}

func (f *askedFence) passed() (bool, error) {
	f.asked++
	if f.err != nil {
		return false, f.err
	}
	return f.done, nil
}

func (f *askedFence) wait() error {
	f.waited++
	if f.err != nil {
		return f.err
	}
	f.done = true
	return nil
}

func (f *askedFence) drop() {}

// TestPoolAsksNoFenceDuringACapture: while a capture is in progress, a
// block given back waits with its fence neither armed nor asked (on a GPU,
// recording on the capturing stream or querying any event would break the
// capture), a get takes other memory rather than ask, trim leaves it, and
// a call put off with outsideCapture is not made. Once no capture runs,
// the next pool call makes the put-off call, asks the fence and, once it
// has passed, hands the block out again.
func TestPoolAsksNoFenceDuringACapture(t *testing.T) {
	drv := newFakeDriver(0)
	p := newPool(0, drv.alloc, drv.release)
	capturing := false
	p.capturing = func() bool { return capturing }
	a, err := p.get(1024)
	if err != nil {
		t.Fatal(err)
	}
	p.gate(func() { capturing = true }) // a capture begins
	f := &askedFence{}
	if err := p.put(a, 1024, f); err != nil {
		t.Fatal(err)
	}
	destroyed := 0
	if err := p.outsideCapture("Exec.Destroy", func() error { destroyed++; return nil }); err != nil {
		t.Fatal(err)
	}
	b, err := p.get(1024)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.trim(); err != nil {
		t.Fatal(err)
	}
	if f.asked+f.waited != 0 || destroyed != 0 {
		t.Fatalf("during the capture the pool asked the fence %d times, waited %d, made %d put-off calls; want none", f.asked, f.waited, destroyed)
	}
	if b == a || drv.allocs != 2 {
		t.Fatalf("during the capture get handed out the block given back (%#x, %d driver allocations)", b, drv.allocs)
	}
	if _, ok := drv.live[a]; !ok {
		t.Fatal("trim gave the pending block back to the driver during the capture")
	}

	capturing = false // the capture ended
	f.done = true
	c, err := p.get(1024)
	if err != nil {
		t.Fatal(err)
	}
	if f.asked == 0 || destroyed != 1 {
		t.Fatalf("after the capture: fence asked %d times, put-off calls made %d; want it asked and 1", f.asked, destroyed)
	}
	if c != a || drv.allocs != 2 {
		t.Fatalf("after the capture the block whose fence passed was not reused (%#x, want %#x; %d driver allocations)", c, a, drv.allocs)
	}
	if err := p.outsideCapture("Exec.Destroy", func() error { destroyed++; return nil }); err != nil || destroyed != 2 {
		t.Fatalf("outsideCapture with no capture: %v, %d calls; want it made at once", err, destroyed)
	}
}

// TestPoolNeverTakesAFenceErrorForPassed: a fence that cannot be asked
// (the device is broken) keeps its block out of use, and its error
// reaches the caller of put, get and trim.
func TestPoolNeverTakesAFenceErrorForPassed(t *testing.T) {
	drv := newFakeDriver(0)
	p := newPool(0, drv.alloc, drv.release)
	broken := errors.New("CUDA_ERROR_ILLEGAL_ADDRESS (700)")
	a, _ := p.get(2048)
	f := &askedFence{err: broken}
	if err := p.put(a, 2048, f); !errors.Is(err, broken) {
		t.Fatalf("put with a failing fence = %v, want its error", err)
	}
	b, err := p.get(2048)
	if !errors.Is(err, broken) {
		t.Fatalf("get with a failing fence pending = %#x, %v; want its error", b, err)
	}
	if err := p.trim(); !errors.Is(err, broken) {
		t.Fatalf("trim with a failing fence pending = %v, want its error", err)
	}
	if _, ok := drv.live[a]; !ok || p.stats().cached != 2048 {
		t.Fatalf("the block of the failing fence left the pending list (driver holds it: %v, stats %+v)", ok, p.stats())
	}
	// Once the fence can be asked again and has passed, the block is reused.
	f.err, f.done = nil, true
	if c, err := p.get(2048); err != nil || c != a {
		t.Fatalf("get after the fence passed = %#x, %v; want %#x", c, err, a)
	}
}

// TestPoolReportsAPutOffCallsError: a call put off during a capture that
// fails when made reports its error, naming it, to the pool call that
// made it; releaseAll makes the ones still put off.
func TestPoolReportsAPutOffCallsError(t *testing.T) {
	drv := newFakeDriver(0)
	p := newPool(0, drv.alloc, drv.release)
	capturing := true
	p.capturing = func() bool { return capturing }
	boom := errors.New("CUDA_ERROR_INVALID_HANDLE (400)")
	_ = p.outsideCapture("Exec.Destroy", func() error { return boom })
	capturing = false
	_, err := p.get(100)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "Exec.Destroy, put off until no stream captured") {
		t.Fatalf("get after the put-off call failed = %v; want its error, naming it", err)
	}
	capturing = true
	made := false
	_ = p.outsideCapture("Exec.Destroy", func() error { made = true; return nil })
	if err := p.releaseAll(); err != nil || !made {
		t.Fatalf("releaseAll = %v, put-off call made %v; want it made", err, made)
	}
}

// TestPoolGateHoldsThePool: a capture begins with the pool locked, so no
// fence is armed or asked as it begins.
func TestPoolGateHoldsThePool(t *testing.T) {
	p := newPool(0, newFakeDriver(0).alloc, func(uintptr) error { return nil })
	p.gate(func() {
		if p.mu.TryLock() {
			p.mu.Unlock()
			t.Fatal("the pool was not locked while a capture began")
		}
	})
}

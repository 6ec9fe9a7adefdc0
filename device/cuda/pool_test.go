package cuda

import (
	"errors"
	"testing"
)

// fakeDriver hands out addresses and counts driver calls.
type fakeDriver struct {
	next     uintptr
	live     map[uintptr]int64
	capacity int64 // bytes the fake device holds; 0: unlimited
	used     int64
	allocs   int
	releases int
}

var errFakeOOM = errors.New("fake out of memory")

func newFakeDriver(capacity int64) *fakeDriver {
	return &fakeDriver{next: 0x1000, live: map[uintptr]int64{}, capacity: capacity}
}

func (f *fakeDriver) alloc(bytes int64) (uintptr, error) {
	if f.capacity > 0 && f.used+bytes > f.capacity {
		return 0, errFakeOOM
	}
	f.allocs++
	addr := f.next
	f.next += uintptr(bytes)
	f.live[addr] = bytes
	f.used += bytes
	return addr, nil
}

func (f *fakeDriver) release(addr uintptr) error {
	f.releases++
	f.used -= f.live[addr]
	delete(f.live, addr)
	return nil
}

func TestPoolReusesFreedBlocks(t *testing.T) {
	f := newFakeDriver(0)
	p := newPool(0, f.alloc, f.release)
	a, err := p.get(1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.put(a, 1000, nil); err != nil {
		t.Fatal(err)
	}
	// 1000 and 1020 bytes round to the same 1024-byte block.
	b, err := p.get(1020)
	if err != nil {
		t.Fatal(err)
	}
	if b != a || f.allocs != 1 {
		t.Errorf("second get: addr %#x (first %#x), %d driver allocations; want the cached block and 1", b, a, f.allocs)
	}
	st := p.stats()
	if st.inUse != 1020 || st.peak != 1020 || st.reserved != 1024 || st.allocs != 2 {
		t.Errorf("stats = %+v", st)
	}
}

func TestPoolLimit(t *testing.T) {
	f := newFakeDriver(0)
	p := newPool(4096, f.alloc, f.release)
	if _, err := p.get(4000); err != nil {
		t.Fatal(err)
	}
	_, err := p.get(200)
	if !errors.Is(err, errPoolLimit) || !isPoolLimit(err) {
		t.Errorf("get beyond the limit = %v, want errPoolLimit", err)
	}
	if f.allocs != 1 {
		t.Errorf("%d driver allocations, want 1", f.allocs)
	}
}

func TestPoolTrimsCacheToStayUnderLimit(t *testing.T) {
	f := newFakeDriver(0)
	p := newPool(2048, f.alloc, f.release)
	a, _ := p.get(1024)
	p.put(a, 1024, nil)
	// A 2048-byte block does not fit next to the cached 1024-byte one.
	if _, err := p.get(2048); err != nil {
		t.Fatal(err)
	}
	if f.releases != 1 || p.stats().reserved != 2048 {
		t.Errorf("releases %d, reserved %d; want the cached block released", f.releases, p.stats().reserved)
	}
}

func TestPoolRetriesAfterDriverOOM(t *testing.T) {
	f := newFakeDriver(2048)
	p := newPool(0, f.alloc, f.release)
	a, _ := p.get(1024)
	b, _ := p.get(1024)
	p.put(a, 1024, nil)
	p.put(b, 1024, nil)
	if _, err := p.get(2048); err != nil {
		t.Fatalf("get after trimming = %v", err)
	}
	if _, err := p.get(512); !errors.Is(err, errFakeOOM) {
		t.Errorf("get on a full device = %v, want the driver's error", err)
	}
}

func TestPoolPutUnknownBlock(t *testing.T) {
	p := newPool(0, newFakeDriver(0).alloc, func(uintptr) error { return nil })
	if err := p.put(0xdead, 4, nil); err == nil {
		t.Error("put of a block never handed out: no error")
	}
}

func TestPoolReleaseAll(t *testing.T) {
	f := newFakeDriver(0)
	p := newPool(0, f.alloc, f.release)
	a, _ := p.get(100)
	p.get(5000)
	p.put(a, 100, nil)
	if err := p.releaseAll(); err != nil {
		t.Fatal(err)
	}
	st := p.stats()
	if len(f.live) != 0 || st.reserved != 0 || st.inUse != 0 || st.cached != 0 {
		t.Errorf("after releaseAll: %d live driver blocks, stats %+v", len(f.live), st)
	}
	if st.peak != 5100 {
		t.Errorf("peak = %d, want 5100", st.peak)
	}
}

// TestPoolTrimGivesCachedBlocksBack: trim returns the cached blocks to the
// driver (a parked worker's memory, for the other processes) and keeps
// the blocks in use.
func TestPoolTrimGivesCachedBlocksBack(t *testing.T) {
	f := newFakeDriver(0)
	p := newPool(0, f.alloc, f.release)
	a, _ := p.get(1000)
	b, _ := p.get(5000)
	if err := p.put(a, 1000, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.trim(); err != nil {
		t.Fatal(err)
	}
	st := p.stats()
	if f.used != 5120 || f.releases != 1 || st.reserved != 5120 || st.cached != 0 || st.inUse != 5000 {
		t.Fatalf("after trim: driver holds %d bytes (%d releases), pool %+v; want only the block in use", f.used, f.releases, st)
	}
	if err := p.put(b, 5000, nil); err != nil {
		t.Fatal(err)
	}
}

// testFence is a fence the test passes by hand; wait passes it.
type testFence struct{ done, waited bool }

func (f *testFence) passed() (bool, error) { return f.done, nil }
func (f *testFence) wait() error           { f.waited, f.done = true, true; return nil }
func (f *testFence) drop()                 {}

// TestPoolHoldsFencedBlocks: a block freed with a fence that has not
// passed (work queued before the free may still use it) is not handed out
// again: the next get of its size takes another block from the driver,
// and once the fence passes the block is reused. A driver out of room
// waits for the fence rather than fail.
func TestPoolHoldsFencedBlocks(t *testing.T) {
	var allocs int
	next := uintptr(0x1000)
	p := newPool(0, func(b int64) (uintptr, error) { allocs++; next += 0x1000; return next, nil }, func(uintptr) error { return nil })
	a, _ := p.get(1024)
	f := &testFence{}
	if err := p.put(a, 1024, f); err != nil {
		t.Fatal(err)
	}
	b, _ := p.get(1024)
	if b == a || allocs != 2 {
		t.Fatalf("a block whose fence has not passed was handed out again (%#x, %d allocations)", b, allocs)
	}
	if st := p.stats(); st.cached != 1024 || st.inUse != 1024 {
		t.Fatalf("stats %+v: the pending block counts as cached, not in use", st)
	}
	f.done = true
	if c, _ := p.get(1024); c != a || allocs != 2 {
		t.Fatalf("the block was not reused once its fence passed: %#x, %d allocations", c, allocs)
	}

	// Out of room: the pending block's fence is waited for, then its
	// memory goes back to the driver and the request is served.
	room := 2
	held := map[uintptr]bool{}
	q := newPool(0, func(b int64) (uintptr, error) {
		if len(held) == room {
			return 0, errors.New("out of memory")
		}
		next += 0x1000
		held[next] = true
		return next, nil
	}, func(addr uintptr) error { delete(held, addr); return nil })
	x, _ := q.get(512)
	_, _ = q.get(512)
	g := &testFence{}
	_ = q.put(x, 512, g)
	if _, err := q.get(4096); err != nil || !g.waited {
		t.Fatalf("out of room with a pending block: %v, fence waited %v", err, g.waited)
	}
}

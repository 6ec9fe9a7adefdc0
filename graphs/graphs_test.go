package graphs_test

import (
	"errors"
	"math"
	"testing"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T) *cpu.Device {
	t.Helper()
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func upload(t *testing.T, d device.Device, v []float32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(len(v))
	must(t, err)
	must(t, d.Upload(b, v))
	return b
}

// model is a tiny two-layer step over parameters p that lives outside the
// pool, with its scratch in the pool's workspace.
type model struct {
	x, w1, w2 device.Buffer
}

func newModel(t *testing.T, d device.Device, seed float32) model {
	x := make([]float32, 8*6)
	w1 := make([]float32, 6*5)
	w2 := make([]float32, 5*3)
	for i := range x {
		x[i] = float32(math.Sin(float64(i) + float64(seed)))
	}
	for i := range w1 {
		w1[i] = float32(math.Cos(float64(i)*0.7 + float64(seed)))
	}
	for i := range w2 {
		w2[i] = float32(math.Sin(float64(i)*1.3 - float64(seed)))
	}
	return model{upload(t, d, x), upload(t, d, w1), upload(t, d, w2)}
}

var sizes = []int{8 * 5, 8 * 3, 3}

// step reads m and the workspace: it has several kernels and an update of
// w2, so replay and eager diverge if anything is dropped or reordered.
func (m model) step(ws []device.Buffer) graphs.StepFunc {
	h, o, cs := ws[0], ws[1], ws[2]
	return func(s device.Stream) error {
		return errors.Join(
			s.Gemm(false, false, 8, 5, 6, 1, m.x, m.w1, 0, h),
			s.BiasAct(device.ActNone, 8, 5, h, m.w1.Slice(0, 5), h),
			s.Gemm(false, false, 8, 3, 5, 1, h, m.w2, 0, o),
			s.ColSum(8, 3, o, 0, cs),
			s.Gemm(true, false, 5, 3, 8, -0.01, h, o, 1, m.w2),
		)
	}
}

func read(t *testing.T, d device.Device, b device.Buffer) []float32 {
	t.Helper()
	v := make([]float32, b.Len())
	must(t, d.Download(v, b))
	return v
}

func sameBits(t *testing.T, what string, a, b []float32) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s differs at %d: %v vs %v", what, i, a[i], b[i])
		}
	}
}

func TestReplayEqualsEagerBitForBit(t *testing.T) {
	d := open(t)
	s, err := d.NewStream()
	must(t, err)
	defer s.Destroy()
	pool := graphs.NewPool()
	defer pool.Close()

	const steps, warm = 12, 2
	eager, replay := newModel(t, d, 1), newModel(t, d, 1)
	ws := make([]device.Buffer, len(sizes))
	for i, n := range sizes {
		ws[i] = upload(t, d, make([]float32, n))
	}
	for range steps {
		must(t, eager.step(ws)(s))
	}

	lease, err := pool.Acquire(d, "tiny", sizes)
	must(t, err)
	defer lease.Release()
	must(t, graphs.WarmUp(s, warm, replay.step(lease.Workspace())))
	res, err := lease.Capture(s, 0, replay.step(lease.Workspace()))
	must(t, err)
	if res.Pooled || res.Nodes != 5 {
		t.Fatalf("first capture: %+v, want cold with 5 nodes", res)
	}
	for range steps - warm {
		must(t, lease.Replay(s, 0))
	}
	must(t, s.Synchronize())
	sameBits(t, "w2 after replay vs eager", read(t, d, eager.w2), read(t, d, replay.w2))
	sameBits(t, "column sums", read(t, d, ws[2]), read(t, d, lease.Workspace()[2]))
	if st := pool.Stats(); st.Replays != steps-warm || st.Captures != 1 || st.Instantiations != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPooledCaptureAllocatesNothing: a second trainer with the same step
// signature captures through the pool without instantiating and without
// any device allocation; it only updates the pooled executable.
func TestPooledCaptureAllocatesNothing(t *testing.T) {
	d := open(t)
	s, err := d.NewStream()
	must(t, err)
	defer s.Destroy()
	pool := graphs.NewPool()
	defer pool.Close()
	must(t, pool.Prewarm(d, "tiny", sizes, 1))

	first := newModel(t, d, 1)
	lease, err := pool.Acquire(d, "tiny", sizes)
	must(t, err)
	_, err = lease.Capture(s, 0, first.step(lease.Workspace()))
	must(t, err)
	must(t, lease.Replay(s, 0))
	must(t, s.Synchronize())
	must(t, lease.Release())

	second := newModel(t, d, 2) // its own parameters, allocated before capture
	before, statsBefore := d.MemoryStats(), pool.Stats()
	lease2, err := pool.Acquire(d, "tiny", sizes)
	must(t, err)
	res, err := lease2.Capture(s, 0, second.step(lease2.Workspace()))
	must(t, err)
	after, statsAfter := d.MemoryStats(), pool.Stats()
	if !res.Pooled {
		t.Fatal("second capture was not served by the pool")
	}
	if n := statsAfter.Instantiations - statsBefore.Instantiations; n != 0 {
		t.Fatalf("second capture instantiated %d executables, want 0", n)
	}
	if statsAfter.Updates-statsBefore.Updates != 1 {
		t.Fatalf("second capture updates = %d, want 1", statsAfter.Updates-statsBefore.Updates)
	}
	if n := after.Allocs - before.Allocs; n != 0 {
		t.Fatalf("second capture made %d device allocations, want 0", n)
	}
	if statsAfter.WorkspaceAllocs != uint64(len(sizes)) {
		t.Fatalf("pool allocated workspace %d times, want once (%d buffers) at prewarm", statsAfter.WorkspaceAllocs, len(sizes))
	}
	// The updated executable works on the second model's parameters.
	ref := newModel(t, d, 2)
	ws := make([]device.Buffer, len(sizes))
	for i, n := range sizes {
		ws[i] = upload(t, d, make([]float32, n))
	}
	must(t, ref.step(ws)(s))
	must(t, lease2.Replay(s, 0))
	must(t, s.Synchronize())
	sameBits(t, "second model after pooled replay", read(t, d, ref.w2), read(t, d, second.w2))
	must(t, lease2.Release())
}

func TestTopologyChangeReinstantiates(t *testing.T) {
	d := open(t)
	s, err := d.NewStream()
	must(t, err)
	defer s.Destroy()
	pool := graphs.NewPool()
	defer pool.Close()
	lease, err := pool.Acquire(d, "x", []int{4})
	must(t, err)
	defer lease.Release()
	b := lease.Workspace()[0]
	_, err = lease.Capture(s, 0, func(s device.Stream) error { return s.Fill(b, 1) })
	must(t, err)
	res, err := lease.Capture(s, 0, func(s device.Stream) error { return errors.Join(s.Fill(b, 2), s.Scale(b, 2)) })
	must(t, err)
	if res.Pooled {
		t.Fatal("a capture with another topology was reported as pooled")
	}
	st := pool.Stats()
	if st.UpdatesRefused != 1 || st.Instantiations != 2 {
		t.Fatalf("stats %+v: want one refused update and two instantiations", st)
	}
	must(t, lease.Replay(s, 0))
	must(t, s.Synchronize())
	if got := read(t, d, b); got[0] != 4 {
		t.Fatalf("replay after re-instantiation = %v, want 4", got[0])
	}
}

func TestCaptureFailureLeavesStreamUsable(t *testing.T) {
	d := open(t)
	s, err := d.NewStream()
	must(t, err)
	defer s.Destroy()
	_, err = graphs.Capture(s, func(s device.Stream) error {
		_, err := d.AllocHost(4) // unsafe inside a capture
		return err
	})
	if !errors.Is(err, device.ErrCaptureViolation) || !errors.Is(err, device.ErrCaptureInvalidated) {
		t.Fatalf("capture with an allocation inside: %v", err)
	}
	if c, _ := s.IsCapturing(); c {
		t.Fatal("stream still capturing after a failed capture")
	}
	must(t, s.Synchronize())
}

func TestClosedPoolRefuses(t *testing.T) {
	d := open(t)
	pool := graphs.NewPool()
	must(t, pool.Close())
	if _, err := pool.Acquire(d, "x", []int{4}); err == nil {
		t.Fatal("Acquire on a closed pool succeeded")
	}
	before := d.MemoryStats().DeviceInUse
	if err := pool.Prewarm(d, "x", []int{4}, 1); err == nil {
		t.Fatal("Prewarm on a closed pool succeeded")
	}
	if d.MemoryStats().DeviceInUse != before {
		t.Fatal("a refused Prewarm kept device memory")
	}
}

// TestDropFreesADevicesEntries: Drop gives back the workspace and
// executables the pool holds for one device, and leaves another device's
// entries pooled.
func TestDropFreesADevicesEntries(t *testing.T) {
	d, other := open(t), open(t)
	pool := graphs.NewPool()
	defer pool.Close()
	s, err := d.NewStream()
	must(t, err)
	defer s.Destroy()
	m := newModel(t, d, 1)
	modelOnly := d.MemoryStats().DeviceInUse
	lease, err := pool.Acquire(d, "tiny", sizes)
	must(t, err)
	_, err = lease.Capture(s, 0, m.step(lease.Workspace()))
	must(t, err)
	must(t, s.Synchronize())
	must(t, lease.Release())
	must(t, pool.Prewarm(other, "tiny", sizes, 1))
	if d.MemoryStats().DeviceInUse == modelOnly {
		t.Fatal("the pool holds no workspace on the device before Drop")
	}

	must(t, pool.Drop(d))
	if got := d.MemoryStats().DeviceInUse; got != modelOnly {
		t.Fatalf("after Drop the device holds %d bytes, want the model's %d", got, modelOnly)
	}
	st := pool.Stats()
	if st.FreeEntries != 1 {
		t.Fatalf("after Drop the pool holds %d free entries, want the other device's 1", st.FreeEntries)
	}
	lease2, err := pool.Acquire(other, "tiny", sizes)
	must(t, err)
	if pool.Stats().WorkspaceAllocs != st.WorkspaceAllocs {
		t.Fatal("the other device's entry was not kept")
	}
	must(t, lease2.Release())
}

// TestRetainKeepsOnlyOneSignature: Retain frees a device's free entries
// of every other signature and keeps the one named, executables included
// (its next capture is still pooled), another device's entries and the
// entries leased now.
func TestRetainKeepsOnlyOneSignature(t *testing.T) {
	d, other := open(t), open(t)
	pool := graphs.NewPool()
	defer pool.Close()
	s, err := d.NewStream()
	must(t, err)
	defer s.Destroy()
	m := newModel(t, d, 1)
	modelOnly := d.MemoryStats().DeviceInUse
	kept, err := pool.Acquire(d, "kept", sizes)
	must(t, err)
	_, err = kept.Capture(s, 0, m.step(kept.Workspace()))
	must(t, err)
	must(t, s.Synchronize())
	must(t, kept.Release())
	keptBytes := d.MemoryStats().DeviceInUse - modelOnly
	must(t, pool.Prewarm(d, "dropped", sizes, 2))
	must(t, pool.Prewarm(other, "dropped", sizes, 1))
	leased, err := pool.Acquire(d, "leased", sizes)
	must(t, err)
	leasedBytes := d.MemoryStats().DeviceInUse - modelOnly - keptBytes - 2*keptBytes
	if !pool.Holds(d, "dropped") || !pool.Holds(d, "kept") {
		t.Fatal("Holds does not see the entries made")
	}

	must(t, pool.Retain(d, "kept"))
	if pool.Holds(d, "dropped") {
		t.Fatal("after Retain the pool still holds another signature's entry on the device")
	}
	if !pool.Holds(d, "kept") || !pool.Holds(other, "dropped") {
		t.Fatal("Retain freed the kept signature's entry or another device's")
	}
	if got, want := d.MemoryStats().DeviceInUse, modelOnly+keptBytes+leasedBytes; got != want {
		t.Fatalf("after Retain the device holds %d bytes, want %d (the model, the kept entry, the leased one)", got, want)
	}
	must(t, leased.Release())
	if !pool.Holds(d, "leased") {
		t.Fatal("an entry leased during Retain was not pooled on release")
	}
	again, err := pool.Acquire(d, "kept", sizes)
	must(t, err)
	res, err := again.Capture(s, 0, m.step(again.Workspace()))
	must(t, err)
	if !res.Pooled {
		t.Fatal("the capture into the retained entry was cold; want its executable updated")
	}
	must(t, s.Synchronize())
	must(t, again.Release())
}

// TestPoolStats: the counters behind the pool's metrics follow its events
// exactly (two signatures prewarmed, cold and pooled captures on two slots,
// a release, Close), so a counter that stopped adding up would show here.
func TestPoolStats(t *testing.T) {
	d := open(t)
	s, err := d.NewStream()
	must(t, err)
	defer s.Destroy()
	pool := graphs.NewPool()
	ws := []int{4, 6} // 40 bytes an entry
	must(t, pool.Prewarm(d, "a", ws, 2))
	must(t, pool.Prewarm(d, "b", []int{2}, 1))
	check := func(when string, got, want graphs.Stats) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: Stats() = %+v\nwant %+v", when, got, want)
		}
	}
	want := graphs.Stats{WorkspaceAllocs: 5, ReservedBytes: 2*40 + 8, FreeEntries: 3}
	check("after prewarm", pool.Stats(), want)

	lease, err := pool.Acquire(d, "a", ws)
	must(t, err)
	want.FreeEntries, want.LeasedEntries = 2, 1
	check("with a lease", pool.Stats(), want)

	b := lease.Workspace()[0]
	fill := func(v float32) graphs.StepFunc { return func(s device.Stream) error { return s.Fill(b, v) } }
	var results []graphs.CaptureResult
	for _, c := range []struct {
		slot int
		v    float32
	}{{0, 1}, {1, 2}, {0, 3}, {1, 4}} {
		res, err := lease.Capture(s, c.slot, fill(c.v))
		must(t, err)
		results = append(results, res)
	}
	for i, res := range results {
		if res.Pooled != (i >= 2) || res.Nodes != 1 || res.Seconds <= 0 {
			t.Fatalf("capture %d: %+v; want pooled %v, 1 node, a positive time", i, res, i >= 2)
		}
	}
	want.Captures, want.Instantiations, want.Updates = 4, 2, 2
	want.ColdCaptures, want.PooledCaptures, want.LastCaptureNodes = 2, 2, 1
	want.ColdSeconds = results[0].Seconds + results[1].Seconds
	want.PooledSeconds = results[2].Seconds + results[3].Seconds
	check("after two cold and two pooled captures", pool.Stats(), want)

	must(t, lease.Release())
	want.FreeEntries, want.LeasedEntries = 3, 0
	check("after the release", pool.Stats(), want)
	must(t, pool.Close())
	want.ReservedBytes, want.FreeEntries = 0, 0
	check("after Close", pool.Stats(), want)
}

package devicetest

import (
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// env bundles a device and helpers that fail the test on error.
type env struct {
	t   *testing.T
	dev device.Device

	// Used by the violation table.
	spare, spare2 device.Buffer
	spareHost     device.HostBuffer
	spareEvent    device.Event
}

func newEnv(t *testing.T, open Opener) *env {
	t.Helper()
	return &env{t: t, dev: open(t)}
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) buf(vals []float32) device.Buffer {
	e.t.Helper()
	b, err := e.dev.Alloc(len(vals))
	e.must(err)
	e.must(e.dev.Upload(b, vals))
	return b
}

func (e *env) zeros(n int) device.Buffer { return e.buf(make([]float32, n)) }

// host allocates pinned host memory and frees it when the test ends,
// before the device's Close (which refuses while any is allocated). A
// buffer the test freed itself makes that FreeHost fail, which is ignored.
func (e *env) host(n int) device.HostBuffer {
	e.t.Helper()
	h, err := e.dev.AllocHost(n)
	e.must(err)
	e.t.Cleanup(func() { _ = e.dev.FreeHost(h) })
	return h
}

func (e *env) read(b device.Buffer) []float32 {
	e.t.Helper()
	out := make([]float32, b.Len())
	e.must(e.dev.Download(out, b))
	return out
}

func (e *env) stream() device.Stream {
	e.t.Helper()
	s, err := e.dev.NewStream()
	e.must(err)
	e.t.Cleanup(func() { _ = s.Destroy() })
	return s
}

func (e *env) event() device.Event {
	e.t.Helper()
	ev, err := e.dev.NewEvent()
	e.must(err)
	return ev
}

// timingEvent is an event Elapsed can measure.
func (e *env) timingEvent() device.Event {
	e.t.Helper()
	ev, err := e.dev.NewTimingEvent()
	e.must(err)
	e.t.Cleanup(func() { _ = ev.Destroy() })
	return ev
}

func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %q", what, err, target)
	}
}

func fillSeq(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * float32((i*7)%13-6)
	}
	return v
}

func constant(n int, c float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = c
	}
	return v
}

func testMemory(t *testing.T, open Opener) {
	e := newEnv(t, open)
	before := e.dev.MemoryStats()
	b := e.buf(fillSeq(1000, 1))
	if got := e.read(b); !slices.Equal(got, fillSeq(1000, 1)) {
		t.Fatal("Upload then Download changed the data")
	}
	st := e.dev.MemoryStats()
	// Allocs must grow by exactly one: a counter that went down instead
	// wraps around, which a mere "grew" check would take for growth.
	if st.DeviceInUse-before.DeviceInUse < 4000 || st.Allocs != before.Allocs+1 {
		t.Fatalf("MemoryStats did not count a 4000-byte allocation: before %+v after %+v", before, st)
	}
	view := b.Slice(10, 5)
	if got := e.read(view); !slices.Equal(got, fillSeq(1000, 1)[10:15]) {
		t.Fatalf("Download of a slice = %v", got)
	}
	e.must(e.dev.Free(b))
	if st2 := e.dev.MemoryStats(); st2.DeviceInUse != before.DeviceInUse {
		t.Fatalf("Free did not return memory: in use %d, was %d", st2.DeviceInUse, before.DeviceInUse)
	}

	// Pinned memory round trip through asynchronous copies.
	h, err := e.dev.AllocHost(64)
	e.must(err)
	copy(h.Data(), fillSeq(64, 0.5))
	d := e.zeros(64)
	out, err := e.dev.AllocHost(64)
	e.must(err)
	s := e.stream()
	e.must(s.CopyHtoD(d, h))
	e.must(s.CopyDtoH(out, d))
	e.must(s.Synchronize())
	if !slices.Equal(out.Data(), fillSeq(64, 0.5)) {
		t.Fatalf("pinned round trip = %v", out.Data())
	}
	// A copy to pageable memory is synchronous: the data is there when it
	// returns, even behind queued work, with no Synchronize.
	e.slowWork(s)
	pd := make([]float32, 64)
	e.must(s.CopyDtoH(device.Pageable(pd), d))
	if !slices.Equal(pd, fillSeq(64, 0.5)) {
		t.Fatal("CopyDtoH to pageable memory returned before the data arrived")
	}
	if st := e.dev.MemoryStats(); st.HostPinned != before.HostPinned+2*64*4 || st.HostAllocs != before.HostAllocs+2 {
		t.Fatalf("MemoryStats did not count two 256-byte pinned allocations: before %+v after %+v", before, st)
	}
	e.must(e.dev.FreeHost(h))
	e.must(e.dev.FreeHost(out))
	if st := e.dev.MemoryStats(); st.HostPinned != before.HostPinned || st.HostAllocs != before.HostAllocs+2 {
		t.Fatalf("FreeHost did not return pinned memory: before %+v after %+v", before, st)
	}
	wantErr(t, e.dev.FreeHost(h), device.ErrClosed, "FreeHost of a freed host buffer")
	_, err = e.dev.AllocHost(0)
	wantErr(t, err, device.ErrMisuse, "AllocHost(0)")
}

// slowWork enqueues enough arithmetic to take a noticeable time, so that a
// missing dependency would let another stream overtake it.
func (e *env) slowWork(s device.Stream) {
	const n = 256
	a := e.buf(fillSeq(n*n, 0.01))
	c := e.zeros(n * n)
	for range 8 {
		e.must(s.Gemm(false, false, n, n, n, 1, a, a, 0, c))
	}
}

func testOrdering(t *testing.T, open Opener) {
	e := newEnv(t, open)
	producer, consumer := e.stream(), e.stream()
	x, y := e.zeros(1024), e.zeros(1024)
	done := e.event()
	e.must(producer.Fill(x, 1))
	e.slowWork(producer)
	e.must(producer.Fill(x, 2))
	e.must(producer.Record(done))
	e.must(consumer.Wait(done))
	e.must(consumer.CopyDtoD(y, x))
	e.must(consumer.Synchronize())
	if got := e.read(y); !slices.Equal(got, constant(1024, 2)) {
		t.Fatalf("consumer ran before the event it waited on: y[0] = %v, want 2", got[0])
	}

	// A wait binds to the record current when it is issued: a later record
	// of the same event on a faster stream does not release it.
	slow, fast, waiter := e.stream(), e.stream(), e.stream()
	ev := e.event()
	v, w := e.zeros(1), e.zeros(1)
	e.slowWork(slow)
	e.must(slow.Fill(v, 1))
	e.must(slow.Record(ev))
	e.must(waiter.Wait(ev))
	e.must(fast.Record(ev))
	e.must(waiter.CopyDtoD(w, v))
	e.must(e.dev.Synchronize())
	if got := e.read(w); got[0] != 1 {
		t.Fatalf("a wait was released by a later record on another stream: read %v, want 1", got[0])
	}

	// Work on one stream runs in issue order.
	s := e.stream()
	z := e.zeros(16)
	e.must(s.Fill(z, 3))
	e.must(s.Scale(z, 2))
	e.must(s.Axpy(1, z, z))
	e.must(s.Synchronize())
	if got := e.read(z); got[0] != 12 {
		t.Fatalf("in-stream order broken: got %v, want 12", got[0])
	}
}

func testEvents(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	never := e.event()
	if ok, err := never.Query(); err != nil || !ok {
		t.Fatalf("Query of a never-recorded event = %v, %v; want true, nil", ok, err)
	}
	e.must(never.Synchronize())
	neverTimed := e.timingEvent()
	if _, err := e.dev.Elapsed(neverTimed, neverTimed); !errors.Is(err, device.ErrNotReady) {
		t.Fatalf("Elapsed of unrecorded events: got %v, want ErrNotReady", err)
	}
	// A Record that fails leaves the event as it was: never recorded.
	gone, err := e.dev.NewStream()
	e.must(err)
	e.must(gone.Destroy())
	wantErr(t, gone.Record(never), device.ErrClosed, "Record on a destroyed stream")
	if ok, err := never.Query(); err != nil || !ok {
		t.Fatalf("Query of an event whose only Record failed = %v, %v; want true, nil", ok, err)
	}
	start, end := e.timingEvent(), e.timingEvent()
	e.must(s.Record(start))
	e.slowWork(s)
	e.must(s.Record(end))
	e.must(end.Synchronize())
	if ok, err := end.Query(); err != nil || !ok {
		t.Fatalf("Query after Synchronize = %v, %v", ok, err)
	}
	d, err := e.dev.Elapsed(start, end)
	e.must(err)
	if d <= 0 {
		t.Fatalf("Elapsed over 8 GEMMs = %v, want > 0", d)
	}
	// One complete event is not enough.
	if _, err := e.dev.Elapsed(start, neverTimed); !errors.Is(err, device.ErrNotReady) {
		t.Fatalf("Elapsed to a never-recorded event: got %v, want ErrNotReady", err)
	}
	if _, err := e.dev.Elapsed(neverTimed, end); !errors.Is(err, device.ErrNotReady) {
		t.Fatalf("Elapsed from a never-recorded event: got %v, want ErrNotReady", err)
	}
	// An event made by NewEvent records no time: recorded and complete,
	// it is still refused, on CUDA by the driver (the event was created
	// with CU_EVENT_DISABLE_TIMING), so the flag is seen to reach it.
	plain, plainEnd := e.event(), e.event()
	e.must(s.Record(plain))
	e.must(s.Record(plainEnd))
	e.must(plainEnd.Synchronize())
	for _, pair := range [][2]device.Event{{plain, plainEnd}, {start, plainEnd}, {plain, end}} {
		if _, err := e.dev.Elapsed(pair[0], pair[1]); !errors.Is(err, device.ErrMisuse) || !strings.Contains(err.Error(), "NewTimingEvent") {
			t.Fatalf("Elapsed with an event made by NewEvent: got %v, want ErrMisuse naming NewTimingEvent", err)
		}
	}
	// A wait on a re-recorded event concerns the record current at the time of the wait.
	x := e.zeros(8)
	other := e.stream()
	e.must(s.Fill(x, 5))
	e.must(s.Record(end))
	e.must(other.Wait(end))
	e.must(other.Scale(x, 2))
	e.must(other.Synchronize())
	if got := e.read(x); got[0] != 10 {
		t.Fatalf("wait on re-recorded event: got %v, want 10", got[0])
	}
}

// step enqueues a multi-kernel computation that reads in and writes out;
// it is used to compare capture+replay with eager execution.
func step(s device.Stream, in, w, hidden, out, bias, stats device.Buffer) error {
	for _, f := range []func() error{
		func() error { return s.Gemm(false, false, 4, 6, 5, 1, in, w, 0, hidden) },
		func() error { return s.BiasAct(device.ActGELU, 4, 6, hidden, bias, out) },
		func() error { return s.Scale(out, 0.5) },
		func() error { return s.Axpy(0.25, hidden, out) },
		func() error { return s.ColSum(4, 6, out, 1, stats) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func testCapture(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	in, w, bias := e.buf(fillSeq(20, 0.3)), e.buf(fillSeq(30, 0.2)), e.buf(fillSeq(6, 0.1))
	eagerH, eagerO, eagerS := e.zeros(24), e.zeros(24), e.zeros(6)
	for range 3 {
		e.must(step(s, in, w, eagerH, eagerO, bias, eagerS))
	}
	e.must(s.Synchronize())

	h, o, st := e.zeros(24), e.zeros(24), e.zeros(6)
	e.must(s.BeginCapture(device.CaptureGlobal))
	if c, err := s.IsCapturing(); err != nil || !c {
		t.Fatalf("IsCapturing during capture = %v, %v", c, err)
	}
	e.must(step(s, in, w, h, o, bias, st))
	g, err := s.EndCapture()
	e.must(err)
	if c, _ := s.IsCapturing(); c {
		t.Fatal("IsCapturing after EndCapture = true")
	}
	if g.Nodes() < 5 {
		t.Fatalf("graph has %d nodes, want at least the 5 kernels", g.Nodes())
	}
	if got := e.read(st); !slices.Equal(got, make([]float32, 6)) {
		t.Fatalf("captured work ran during capture: stats = %v", got)
	}
	x, err := e.dev.Instantiate(g)
	e.must(err)
	e.must(x.Upload(s))
	for range 3 {
		e.must(s.Launch(x))
	}
	e.must(s.Synchronize())
	for _, p := range [][2]device.Buffer{{eagerO, o}, {eagerS, st}} {
		a, b := e.read(p[0]), e.read(p[1])
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("replay differs from eager at %d: %v vs %v", i, b[i], a[i])
			}
		}
	}
	e.must(x.Destroy())
	e.must(g.Destroy())
}

// violation is a capture-unsafe call made while another stream captures.
type violation struct {
	name string
	call func(e *env, other device.Stream) error
}

func violations() []violation {
	return []violation{
		{"AllocHost", func(e *env, _ device.Stream) error {
			h, err := e.dev.AllocHost(16)
			if err != nil {
				return err
			}
			return e.dev.FreeHost(h)
		}},
		{"Alloc", func(e *env, _ device.Stream) error { _, err := e.dev.Alloc(16); return err }},
		{"Free", func(e *env, _ device.Stream) error { return e.dev.Free(e.spare) }},
		{"FreeHost", func(e *env, _ device.Stream) error { return e.dev.FreeHost(e.spareHost) }},
		{"Device.Synchronize", func(e *env, _ device.Stream) error { return e.dev.Synchronize() }},
		{"Stream.Synchronize", func(e *env, o device.Stream) error { return o.Synchronize() }},
		{"Event.Synchronize", func(e *env, _ device.Stream) error { return e.spareEvent.Synchronize() }},
		{"Event.Query", func(e *env, _ device.Stream) error { _, err := e.spareEvent.Query(); return err }},
		{"Upload", func(e *env, _ device.Stream) error { return e.dev.Upload(e.spare2, make([]float32, 16)) }},
		{"Download", func(e *env, _ device.Stream) error { return e.dev.Download(make([]float32, 16), e.spare2) }},
		{"pageable CopyHtoD", func(e *env, o device.Stream) error {
			return o.CopyHtoD(e.spare2, device.Pageable(make([]float32, 16)))
		}},
		{"pageable CopyDtoH", func(e *env, o device.Stream) error {
			return o.CopyDtoH(device.Pageable(make([]float32, 16)), e.spare2)
		}},
		{"legacy stream", func(e *env, _ device.Stream) error { return e.dev.DefaultStream().Fill(e.spare2, 1) }},
	}
}

func testViolations(t *testing.T, open Opener) {
	for _, v := range violations() {
		t.Run(v.name, func(t *testing.T) {
			e := newEnv(t, open)
			e.spare, e.spare2 = e.zeros(16), e.zeros(16)
			e.spareHost = e.host(16)
			e.spareEvent = e.event()
			capt, other := e.stream(), e.stream()
			e.must(other.Record(e.spareEvent))
			x := e.zeros(8)
			e.must(capt.BeginCapture(device.CaptureGlobal))
			e.must(capt.Fill(x, 1))
			// The unsafe call comes from another goroutine, as the
			// predecessor's pin-memory thread did.
			var wg sync.WaitGroup
			wg.Add(1)
			var err error
			go func() { defer wg.Done(); err = v.call(e, other) }()
			wg.Wait()
			wantErr(t, err, device.ErrCaptureViolation, v.name+" during a global capture")
			_, endErr := capt.EndCapture()
			wantErr(t, endErr, device.ErrCaptureInvalidated, "EndCapture after "+v.name)
			// Once the capture has ended, the same call is legal again.
			if err := v.call(e, other); err != nil {
				t.Fatalf("%s after the capture ended: %v", v.name, err)
			}
		})
	}

	// A person reading the error must not need a stack dump to find which
	// goroutine broke the capture: both the caller's error and EndCapture's
	// name the call, the capturing stream and the caller's own function.
	t.Run("the error names the culprit", func(t *testing.T) {
		e := newEnv(t, open)
		capt := e.stream()
		x, staged := e.zeros(8), e.zeros(8)
		e.must(capt.BeginCapture(device.CaptureGlobal))
		e.must(capt.Fill(x, 1))
		errc := make(chan error, 1)
		go stageBatchFromLoader(e.dev, staged, errc)
		err := <-errc
		wantErr(t, err, device.ErrCaptureViolation, "Upload from a loader goroutine during a global capture")
		_, endErr := capt.EndCapture()
		wantErr(t, endErr, device.ErrCaptureInvalidated, "EndCapture after the loader's Upload")
		for _, got := range []error{err, endErr} {
			for _, want := range []string{"Upload", "stream", "goroutine", "devicetest.stageBatchFromLoader", "runtime.go:"} {
				if !strings.Contains(got.Error(), want) {
					t.Errorf("error does not name the culprit (missing %q): %v", want, got)
				}
			}
		}
	})

	t.Run("async work on an unrelated stream is legal", func(t *testing.T) {
		e := newEnv(t, open)
		capt, other := e.stream(), e.stream()
		h := e.host(32)
		x, y := e.zeros(32), e.zeros(32)
		ev := e.event()
		e.must(capt.BeginCapture(device.CaptureGlobal))
		e.must(capt.Fill(x, 1))
		e.must(other.CopyHtoD(y, h))
		e.must(other.Scale(y, 2))
		e.must(other.Record(ev))
		g, err := capt.EndCapture()
		e.must(err)
		e.must(g.Destroy())
	})

	t.Run("relaxed mode allows allocation", func(t *testing.T) {
		e := newEnv(t, open)
		capt := e.stream()
		x := e.zeros(8)
		e.must(capt.BeginCapture(device.CaptureRelaxed))
		e.must(capt.Fill(x, 1))
		b, err := e.dev.Alloc(8)
		e.must(err)
		_, err = capt.EndCapture()
		e.must(err)
		e.must(e.dev.Free(b))
	})

	// The driver cannot wait for work that is being recorded rather than
	// run: cuStreamSynchronize on a capturing stream fails with
	// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture in
	// every mode, relaxed included.
	for _, mode := range captureModes {
		t.Run("Stream.Synchronize on the capturing stream/"+mode.String(), func(t *testing.T) {
			e := newEnv(t, open)
			capt := e.stream()
			x := e.zeros(8)
			e.must(capt.BeginCapture(mode))
			e.must(capt.Fill(x, 1))
			wantErr(t, capt.Synchronize(), device.ErrCaptureViolation,
				"Stream.Synchronize on a stream capturing in "+mode.String()+" mode")
			_, err := capt.EndCapture()
			wantErr(t, err, device.ErrCaptureInvalidated, "EndCapture after synchronizing the capturing stream")
			e.must(capt.Synchronize())
		})
	}
}

var captureModes = []device.CaptureMode{device.CaptureGlobal, device.CaptureRelaxed}

func testIsolation(t *testing.T, open Opener) {
	t.Run("capture waits on an outside event", func(t *testing.T) {
		e := newEnv(t, open)
		capt, other := e.stream(), e.stream()
		outside := e.event()
		e.must(other.Record(outside))
		e.must(capt.BeginCapture(device.CaptureGlobal))
		wantErr(t, capt.Wait(outside), device.ErrCaptureIsolation, "capturing stream waiting on an outside event")
		_, err := capt.EndCapture()
		wantErr(t, err, device.ErrCaptureInvalidated, "EndCapture after an isolation error")
	})
	// cuEventSynchronize and cuEventQuery on an event last recorded in a
	// capturing stream fail with CUDA_ERROR_CAPTURED_EVENT, which the contract
	// calls ErrCaptureIsolation, in either mode and ahead of the global-mode
	// rule; like every invalid call during a capture, it invalidates the
	// capture.
	for _, mode := range captureModes {
		t.Run("host waits on a captured event/"+mode.String(), func(t *testing.T) {
			e := newEnv(t, open)
			capt := e.stream()
			inside := e.event()
			x := e.zeros(4)
			e.must(capt.BeginCapture(mode))
			e.must(capt.Fill(x, 1))
			e.must(capt.Record(inside))
			wantErr(t, inside.Synchronize(), device.ErrCaptureIsolation, "host Synchronize on an event recorded in the capture")
			_, err := inside.Query()
			wantErr(t, err, device.ErrCaptureIsolation, "host Query of an event recorded in the capture")
			_, err = capt.EndCapture()
			wantErr(t, err, device.ErrCaptureInvalidated, "EndCapture after the host waited on a captured event")
			// Once the capture has ended, the event is the host's again.
			e.must(inside.Synchronize())
		})
	}
	// That host wait is also a capture-unsafe call during every global-mode
	// capture in progress: a global-mode capture on another stream is
	// invalidated too, whatever the mode of the capture holding the event.
	hostWaits := []struct {
		name string
		call func(device.Event) error
	}{
		{"Query", func(ev device.Event) error { _, err := ev.Query(); return err }},
		{"Synchronize", func(ev device.Event) error { return ev.Synchronize() }},
	}
	for _, mode := range captureModes {
		for _, wait := range hostWaits {
			t.Run("host waits on a captured event, another global capture/"+wait.name+"/"+mode.String(), func(t *testing.T) {
				e := newEnv(t, open)
				capt, bystander := e.stream(), e.stream()
				inside := e.event()
				x, y := e.zeros(4), e.zeros(4)
				e.must(bystander.BeginCapture(device.CaptureGlobal))
				e.must(bystander.Fill(y, 2))
				e.must(capt.BeginCapture(mode))
				e.must(capt.Fill(x, 1))
				e.must(capt.Record(inside))
				wantErr(t, wait.call(inside), device.ErrCaptureIsolation, "host "+wait.name+" of an event recorded in the capture")
				_, err := capt.EndCapture()
				wantErr(t, err, device.ErrCaptureInvalidated, "EndCapture of the capture holding the event")
				_, err = bystander.EndCapture()
				wantErr(t, err, device.ErrCaptureInvalidated,
					"EndCapture of a global-mode capture on another stream, after the host's "+wait.name+" of an event recorded in a "+mode.String()+" capture")
			})
		}
	}
	// The contract has no fork/join capture: a stream outside the capture
	// waiting on an event recorded inside it does not join the capture. The
	// wait is refused with ErrCaptureIsolation and enqueues nothing; the
	// waiting stream stays outside the capture and runs its later work at
	// once, and the capture goes on unharmed.
	t.Run("another stream waits on a captured event", func(t *testing.T) {
		e := newEnv(t, open)
		capt, other := e.stream(), e.stream()
		inside := e.event()
		x, y := e.zeros(4), e.zeros(4)
		e.must(capt.BeginCapture(device.CaptureGlobal))
		e.must(capt.Fill(x, 1))
		e.must(capt.Record(inside))
		wantErr(t, other.Wait(inside), device.ErrCaptureIsolation,
			"a stream outside the capture waiting on an event recorded inside it")
		if c, err := other.IsCapturing(); err != nil || c {
			t.Fatalf("IsCapturing of the stream whose wait was refused = %v, %v; want false, nil", c, err)
		}
		e.must(other.Fill(y, 2))
		e.must(capt.Scale(x, 3))
		g, err := capt.EndCapture()
		if err != nil {
			t.Fatalf("EndCapture after another stream's refused wait: %v; the capture should be unharmed", err)
		}
		e.must(other.Synchronize())
		if got := e.read(y); got[0] != 2 {
			t.Fatalf("work after the refused wait did not run eagerly: y = %v, want 2", got[0])
		}
		ex, err := e.dev.Instantiate(g)
		e.must(err)
		e.must(capt.Launch(ex))
		e.must(capt.Synchronize())
		if got := e.read(x); got[0] != 3 {
			t.Fatalf("replay = %v, want 3", got[0])
		}
	})
	t.Run("wait on an event of the same capture", func(t *testing.T) {
		e := newEnv(t, open)
		capt := e.stream()
		inside := e.event()
		x := e.zeros(4)
		e.must(capt.BeginCapture(device.CaptureGlobal))
		e.must(capt.Fill(x, 1))
		e.must(capt.Record(inside))
		e.must(capt.Wait(inside))
		e.must(capt.Scale(x, 3))
		g, err := capt.EndCapture()
		e.must(err)
		ex, err := e.dev.Instantiate(g)
		e.must(err)
		e.must(capt.Launch(ex))
		e.must(capt.Synchronize())
		if got := e.read(x); got[0] != 3 {
			t.Fatalf("replay = %v, want 3", got[0])
		}
	})
}

// testFreedMemoryHeldByExec: an executable holds the addresses it was
// captured against. Freeing one of its buffers must not let the next Alloc
// of the same size receive that memory while the executable lives, or its
// next launch writes into the new owner's data.
func testFreedMemoryHeldByExec(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	before := e.dev.MemoryStats().DeviceInUse
	old := e.zeros(64)
	g := e.captureFill(s, old, 7, false)
	x, err := e.dev.Instantiate(g)
	e.must(err)
	e.must(g.Destroy())
	e.must(e.dev.Free(old))
	// Same size: a pooling backend would hand the freed block back.
	fresh := e.zeros(64)
	e.must(s.Launch(x))
	e.must(s.Synchronize())
	if got := e.read(fresh); got[0] != 0 || got[63] != 0 {
		t.Fatalf("a launch of an executable captured against a freed buffer wrote %v into the buffer allocated after the free", got[0])
	}
	e.must(x.Destroy())
	// With its last holder gone, the freed memory is no longer counted.
	if got, want := e.dev.MemoryStats().DeviceInUse, before+fresh.Bytes(); got != want {
		t.Errorf("after the executable was destroyed %d bytes are in use, want %d (the freed buffer's memory was not given back)", got, want)
	}
}

func (e *env) captureFill(s device.Stream, dst device.Buffer, v float32, scale bool) device.Graph {
	e.t.Helper()
	e.must(s.BeginCapture(device.CaptureGlobal))
	e.must(s.Fill(dst, v))
	if scale {
		e.must(s.Scale(dst, 2))
	}
	g, err := s.EndCapture()
	e.must(err)
	return g
}

func testUpdate(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	a, b := e.zeros(8), e.zeros(8)
	ga := e.captureFill(s, a, 1, true)
	x, err := e.dev.Instantiate(ga)
	e.must(err)
	gb := e.captureFill(s, b, 5, true)
	e.must(x.Update(gb))
	e.must(s.Launch(x))
	e.must(s.Synchronize())
	if got := e.read(b); got[0] != 10 {
		t.Fatalf("updated executable wrote %v to the new buffer, want 10", got[0])
	}
	if got := e.read(a); got[0] != 0 {
		t.Fatalf("updated executable still wrote the old buffer: %v", got[0])
	}
	gc := e.captureFill(s, a, 7, false)
	wantErr(t, x.Update(gc), device.ErrTopologyChanged, "Update with a different topology")
	e.must(s.Fill(b, 0))
	e.must(s.Launch(x))
	e.must(s.Synchronize())
	if got := e.read(b); got[0] != 10 {
		t.Fatalf("a refused update changed the executable: got %v, want 10", got[0])
	}
}

// testLaunchOrder: launches of one executable run one after another in
// the order they were issued, whatever streams they were issued on, as
// cuGraphLaunch orders them. The first launch (fill with 1) waits behind
// slow work on its stream; the executable is updated to fill with 5 and
// launched on an idle stream, which must wait for the first launch.
func testLaunchOrder(t *testing.T, open Opener) {
	e := newEnv(t, open)
	slow, idle, capturer := e.stream(), e.stream(), e.stream()
	x := e.zeros(64)
	ex, err := e.dev.Instantiate(e.captureFill(capturer, x, 1, false))
	e.must(err)
	e.slowWork(slow)
	e.must(slow.Launch(ex))
	e.must(ex.Update(e.captureFill(capturer, x, 5, false)))
	e.must(idle.Launch(ex))
	e.must(e.dev.Synchronize())
	if got := e.read(x); got[0] != 5 {
		t.Fatalf("x = %v after launches filling 1 then 5 on two streams; want 5: the second launch ran before the first", got[0])
	}
}

func testMisuse(t *testing.T, open Opener) {
	e := newEnv(t, open)
	s := e.stream()
	x := e.zeros(8)
	_, err := s.EndCapture()
	wantErr(t, err, device.ErrMisuse, "EndCapture without BeginCapture")
	e.must(s.BeginCapture(device.CaptureGlobal))
	wantErr(t, s.BeginCapture(device.CaptureGlobal), device.ErrMisuse, "BeginCapture twice")
	_, err = s.EndCapture()
	e.must(err)
	wantErr(t, s.CopyDtoD(x, e.zeros(4)), device.ErrMisuse, "CopyDtoD of different lengths")
	wantErr(t, e.dev.Upload(x, make([]float32, 3)), device.ErrMisuse, "Upload of the wrong length")
	wantErr(t, s.Gemm(false, false, 2, 2, 2, 1, x, x.Slice(0, 3), 0, x), device.ErrMisuse, "Gemm with a short B")
	_, err = e.dev.Alloc(0)
	wantErr(t, err, device.ErrMisuse, "Alloc(0)")

	other := open(t)
	y, err := other.Alloc(8)
	e.must(err)
	wantErr(t, s.CopyDtoD(x, y), device.ErrMisuse, "a buffer of another device")
	f := e.zeros(8)
	e.must(e.dev.Free(f))
	if err := s.Fill(f, 1); err == nil {
		t.Fatal("Fill of a freed buffer succeeded")
	}
	if err := e.dev.Free(x.Slice(1, 2)); !errors.Is(err, device.ErrMisuse) {
		t.Fatalf("Free of a slice: %v", err)
	}
	if err := e.dev.Free(x.Slice(0, 4)); !errors.Is(err, device.ErrMisuse) {
		t.Fatalf("Free of a slice at offset 0: %v", err)
	}

	// Events, graphs and executables of another device are refused too.
	ostr, err := other.NewStream()
	e.must(err)
	defer ostr.Destroy()
	oev, err := other.NewEvent()
	e.must(err)
	defer oev.Destroy()
	wantErr(t, s.Record(oev), device.ErrMisuse, "Record of an event of another device")
	oy, err := other.Alloc(8)
	e.must(err)
	e.must(ostr.BeginCapture(device.CaptureGlobal))
	e.must(ostr.Fill(oy, 1))
	og, err := ostr.EndCapture()
	e.must(err)
	defer og.Destroy()
	_, err = e.dev.Instantiate(og)
	wantErr(t, err, device.ErrMisuse, "Instantiate of a graph of another device")
	ox, err := other.Instantiate(og)
	e.must(err)
	defer ox.Destroy()
	wantErr(t, s.Launch(ox), device.ErrMisuse, "Launch of an executable of another device")
}

// stageBatchFromLoader plays a data loader's staging goroutine that copies a
// batch to the device with a synchronous Upload, unaware that the training
// goroutine is capturing.
func stageBatchFromLoader(dev device.Device, dst device.Buffer, errc chan<- error) {
	errc <- dev.Upload(dst, make([]float32, 8))
}

// testFreeWithoutStall checks that Free does not wait for the device
// (cuMemFree synchronises it, stalling every stream): a Free made while
// another stream runs products lasting 250 ms of device time (measured,
// LastingProducts) returns before they end; and that work queued before the
// Free of its own buffers still computes what it would have: the freed
// memory is not handed out while it runs.
func testFreeWithoutStall(t *testing.T, open Opener) {
	e := newEnv(t, open)
	const n = 256
	a, b := e.buf(ones(n*n)), e.buf(ones(n*n))
	out, unrelated := e.zeros(n*n), e.zeros(1024)
	s := e.stream()
	ev, count, err := LastingProducts(e.dev, s, n, a, b, out, 250*time.Millisecond)
	e.must(err)
	defer ev.Destroy()
	e.must(e.dev.Free(unrelated))
	if done, err := ev.Query(); err != nil || done {
		t.Fatalf("%d products of %d³ (250 ms of device time) on another stream had completed when Free returned (%v, %v): Free waited for the device", count, n, done, err)
	}
	// The product's inputs, freed while it reads them; memory allocated
	// now must not be theirs.
	e.must(e.dev.Free(a))
	e.must(e.dev.Free(b))
	fresh, err := e.dev.Alloc(n * n) // no Upload: that synchronises
	e.must(err)
	other := e.stream()
	e.must(other.Fill(fresh, -1))
	e.must(ev.Synchronize())
	e.must(other.Synchronize())
	got := e.read(out)
	for _, i := range []int{0, n*n/2 + 7, n*n - 1} {
		if got[i] != n {
			t.Fatalf("C[%d] = %v, want %d: the product's inputs were overwritten after their Free", i, got[i], n)
		}
	}
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

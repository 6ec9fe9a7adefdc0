//go:build cuda

package cuda

import (
	"errors"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/devicetest"
)

// TestPoolBesideCapture runs runBesideCapture on the GPU (or the emulated
// driver, which refuses what a GPU refuses during a global-mode capture:
// an event query or wait, cuGraphExecDestroy, docs/cuda.md): B's blocks
// come back to the pool during A's capture without the fence recording on
// A's stream or asking any event, and B's executable is destroyed once the
// capture has ended. Then, while the work B queued before giving them back
// still runs, an Alloc of their size gets other memory; once the device is
// idle, the next Allocs get them back.
func TestPoolBesideCapture(t *testing.T) {
	d := openTest(t)
	const n = 256
	var done *Event
	hooks := besideCaptureHooks{
		busy: func(t *testing.T, s device.Stream) {
			a := mustUpload(t, d, make([]float32, n*n))
			b := mustUpload(t, d, make([]float32, n*n))
			c := mustUpload(t, d, make([]float32, n*n))
			ev, count, err := devicetest.LastingProducts(d, s, n, a, b, c, lastFor)
			check(t, "LastingProducts", err)
			t.Logf("%d products of %d³ enqueued on B's stream for %v of device time", count, n, lastFor)
			done = ev.(*Event)
			t.Cleanup(func() { _ = done.Destroy() })
		},
		afterCapture: func(t *testing.T, given []device.Buffer) {
			back := map[uintptr]bool{}
			for _, g := range given {
				back[uintptr(g.Allocation().(*deviceAlloc).ptr)] = true
			}
			var held []device.Buffer
			alloc := func() uintptr {
				b, err := d.Alloc(besideCaptureElems)
				check(t, "Alloc", err)
				held = append(held, b)
				return uintptr(b.Allocation().(*deviceAlloc).ptr)
			}
			for range given {
				p := alloc()
				if ok, _ := done.Query(); !ok && back[p] {
					t.Fatal("Alloc handed out a block B gave back during A's capture while the work B queued before still ran")
				}
			}
			d.pool.mu.Lock()
			late := len(d.pool.late)
			d.pool.mu.Unlock()
			if late != 0 {
				t.Errorf("%d executable destructions still put off after the capture ended and an Alloc", late)
			}
			check(t, "Synchronize", d.Synchronize())
			for range given {
				if p := alloc(); !back[p] {
					t.Errorf("once the device was idle, Alloc took block %#x rather than one B gave back", p)
				}
			}
			for _, b := range held {
				check(t, "Free", d.Free(b))
			}
		},
	}
	runBesideCapture(t, d, hooks)
}

// TestPoolBesideCapturesConcurrently: B gives blocks back (destroying
// graphs and executables that held buffers it had freed) on one goroutine
// while A begins and ends global-mode captures on another, so that give-
// backs land before, during and as captures begin (BeginCapture passes the
// pool's gate). Every one of A's captures must succeed, whatever the
// interleaving; a failure names the capture and the driver's answer. Then
// the blocks come back to the pool.
func TestPoolBesideCapturesConcurrently(t *testing.T) {
	d := openTest(t)
	const k, n = 16, 1024
	sA, sB := mustStream(t, d), mustStream(t, d)
	xA := mustUpload(t, d, make([]float32, n))
	var graphsB []device.Graph
	var execsB []device.Exec
	for i := range k {
		tmp := mustUpload(t, d, make([]float32, n))
		check(t, "BeginCapture", sB.BeginCapture(device.CaptureGlobal))
		check(t, "Fill", sB.Fill(tmp, float32(i)))
		g, err := sB.EndCapture()
		check(t, "EndCapture", err)
		x, err := d.Instantiate(g)
		check(t, "Instantiate", err)
		check(t, "Launch", sB.Launch(x))
		check(t, "Free (held)", d.Free(tmp))
		graphsB, execsB = append(graphsB, g), append(execsB, x)
	}
	errc := make(chan error, 1)
	go func() {
		var errs []error
		for i := range k {
			errs = append(errs, graphsB[i].Destroy(), execsB[i].Destroy())
		}
		errc <- errors.Join(errs...)
	}()
	for i := range k {
		check(t, "BeginCapture", sA.BeginCapture(device.CaptureGlobal))
		if err := sA.Scale(xA, 1); err != nil {
			t.Fatalf("A's capture %d of %d beside B's give-backs: its kernel: %v", i+1, k, err)
		}
		g, err := sA.EndCapture()
		if err != nil {
			t.Fatalf("A's capture %d of %d beside B's give-backs: %v", i+1, k, err)
		}
		check(t, "Graph.Destroy", g.Destroy())
	}
	if err := <-errc; err != nil {
		t.Fatalf("B's give-backs: %v", err)
	}
	check(t, "Synchronize", d.Synchronize())
	before := d.pool.stats()
	check(t, "Trim", d.Trim())
	after := d.pool.stats()
	if before.cached < k*n*4 || after.cached != 0 || after.reserved > before.reserved-int64(k*n*4) {
		t.Errorf("B's %d blocks did not come back to the pool: cached %d then %d after Trim, reserved %d then %d", k, before.cached, after.cached, before.reserved, after.reserved)
	}
	d.pool.mu.Lock()
	late := len(d.pool.late)
	d.pool.mu.Unlock()
	if late != 0 {
		t.Errorf("%d executable destructions still put off after the captures", late)
	}
}

// TestDriverRefusesEventWaitsBesideGlobalCapture checks on the GPU the
// premises of the fence's rule (docs/cuda.md, "Beside another capture"),
// straight at the driver, past this package's own checks: during a
// global-mode capture on one stream, another thread's cuEventQuery or
// cuEventSynchronize of an event recorded outside it on another stream,
// and its cuGraphExecDestroy, are refused as capture violations, and so
// is a graph launched into the capturing stream; each refusal leaves the
// capture invalidated. None of these is in the driver API reference's
// lists: they are what drivers were seen to do (the evidence is in
// docs/cuda.md), which the emulated driver copies and this test checks
// wherever it runs.
func TestDriverRefusesEventWaitsBesideGlobalCapture(t *testing.T) {
	tests := []struct {
		name      string
		elsewhere bool // called on another thread than the capture's
		call      func(ev *Event, x *Exec, s *Stream) cuResult
	}{
		{"cuEventQuery", true, func(ev *Event, _ *Exec, _ *Stream) cuResult { return codeOf(ev.ev.Query()) }},
		{"cuEventSynchronize", true, func(ev *Event, _ *Exec, _ *Stream) cuResult { return codeOf(ev.ev.Synchronize()) }},
		{"cuGraphExecDestroy", true, func(_ *Event, x *Exec, _ *Stream) cuResult { return graphExecDestroy(x.e) }},
		{"cuGraphLaunch into the capturing stream", false, func(_ *Event, x *Exec, s *Stream) cuResult { return graphLaunch(x.e, s.cu) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := openTest(t)
			s, other := mustStream(t, d).(*Stream), mustStream(t, d).(*Stream)
			x := mustUpload(t, d, make([]float32, 1024))
			// An executable made before the capture, and an event recorded
			// outside it, after the executable's launch on the other stream.
			check(t, "BeginCapture", other.BeginCapture(device.CaptureGlobal))
			check(t, "Fill", other.Fill(x, 2))
			g, err := other.EndCapture()
			check(t, "EndCapture", err)
			ex, err := d.Instantiate(g)
			check(t, "Instantiate", err)
			check(t, "Graph.Destroy", g.Destroy())
			check(t, "Launch", other.Launch(ex))
			ev, err := d.NewEvent()
			check(t, "NewEvent", err)
			check(t, "Record", other.Record(ev))

			check(t, "BeginCapture", s.BeginCapture(device.CaptureGlobal))
			check(t, "Fill while capturing", s.Fill(x, 1))
			call := func() cuResult {
				// Straight to the driver, past this package's checks.
				if err := d.enter("test"); err != nil {
					return cuErrInvalidContext
				}
				defer d.exit()
				return tt.call(ev.(*Event), ex.(*Exec), s)
			}
			var r cuResult
			if tt.elsewhere {
				rc := make(chan cuResult)
				go func() { rc <- call() }()
				r = <-rc
			} else {
				r = call()
			}
			if sentinelFor(r) != device.ErrCaptureViolation {
				t.Errorf("%s during another stream's global capture returned %v, want a capture violation (%v); a belief from drivers' behaviour, not the reference manual (docs/cuda.md)",
					tt.name, DriverError{r}, DriverError{cuErrCaptureUnsupported})
			}
			got, err := s.EndCapture()
			if got != nil {
				_ = got.Destroy()
			}
			if !errors.Is(err, device.ErrCaptureInvalidated) {
				t.Errorf("after the driver answered %s with %v, EndCapture = %v; want the capture invalidated", tt.name, DriverError{r}, err)
			}
			t.Logf("the driver answered %s with %v; EndCapture then: %v", tt.name, DriverError{r}, err)
			if tt.name != "cuGraphExecDestroy" || r != cuSuccess {
				check(t, "Exec.Destroy", ex.Destroy())
			}
			check(t, "Event.Destroy", ev.Destroy())
			check(t, "Synchronize", d.Synchronize())
		})
	}
}

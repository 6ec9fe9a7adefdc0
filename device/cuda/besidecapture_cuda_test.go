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

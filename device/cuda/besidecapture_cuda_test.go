//go:build cuda

package cuda

import (
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

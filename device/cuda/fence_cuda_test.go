//go:build cuda

package cuda

import (
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/devicetest"
)

// lastFor is how long longGemm's work lasts on the device: thousands of
// times a Free or an Alloc, which are what the tests race against it.
const lastFor = 250 * time.Millisecond

// longGemm enqueues on s products of n×n matrices lasting lastFor of
// device time, measured on this device (devicetest.LastingProducts), so they
// are still running when the test looks on the emulated driver and on an
// H100 alike, writing into c, and returns an event recorded after them.
func longGemm(t *testing.T, d *Device, n int) (*Event, device.Buffer) {
	t.Helper()
	s := mustStream(t, d)
	a := mustUpload(t, d, make([]float32, n*n))
	b := mustUpload(t, d, make([]float32, n*n))
	cb := mustUpload(t, d, make([]float32, n*n))
	ev, count, err := devicetest.LastingProducts(d, s, n, a, b, cb, lastFor)
	check(t, "LastingProducts", err)
	t.Logf("%d products of %d³ enqueued for %v of device time", count, n, lastFor)
	return ev.(*Event), cb
}

// TestFreeDoesNotStallTheDevice: Free returns while another stream's work
// still runs (cuMemFree would synchronise the whole device first), and the
// freed block is not handed to the next Alloc of its size until the work
// queued before the Free has run: the Alloc gets other memory meanwhile.
func TestFreeDoesNotStallTheDevice(t *testing.T) {
	d := openTest(t)
	const n = 256
	// (Upload synchronises the device: every buffer is made first.)
	unrelated := mustUpload(t, d, make([]float32, 1024))
	done, out := longGemm(t, d, n)
	c := out.Allocation().(*deviceAlloc)
	check(t, "Free", d.Free(unrelated))
	if ok, err := done.Query(); err != nil || ok {
		t.Fatalf("the other stream's product had completed when Free returned (%v, %v): Free waited for the device", ok, err)
	}
	// The product's own output, freed while the product writes it.
	check(t, "Free the product's output", d.Free(out))
	again, err := d.Alloc(n * n)
	check(t, "Alloc", err)
	if ok, _ := done.Query(); !ok && again.Allocation().(*deviceAlloc).ptr == c.ptr {
		t.Fatal("Alloc handed out the freed output while the product still wrote it")
	}
	// Once the work has run, the block is reused. The device, not only the
	// product's event, is waited for: the Free's fence is an event recorded
	// after it, which completes a moment later.
	check(t, "Synchronize", d.Synchronize())
	check(t, "Free", d.Free(again))
	reused, err := d.Alloc(n * n)
	check(t, "Alloc", err)
	if p := reused.Allocation().(*deviceAlloc).ptr; p != c.ptr && p != again.Allocation().(*deviceAlloc).ptr {
		t.Errorf("after the work ran, Alloc took new memory rather than a freed block")
	}
}

//go:build cuda

package cuda

import (
	"errors"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// Every stream but the legacy one holds a scratch of ScratchFloats from
// NewStream on. Destroy makes no capture-unsafe call, so the scratch is
// freed by the next Alloc or NewStream (or Close), and a Destroy during
// another stream's global-mode capture leaves that capture intact. NewStream
// during a capture is refused without breaking the capture.
func TestStreamScratchLifetime(t *testing.T) {
	d := openTest(t)
	scratch := device.AllocBytes(d, ScratchFloats)
	if got := d.StreamScratchBytes(); got != scratch {
		t.Fatalf("StreamScratchBytes = %d, want %d", got, scratch)
	}
	x := mustUpload(t, d, make([]float32, 64))
	base := d.MemoryStats().DeviceInUse
	inUse := func(want int64, when string) {
		t.Helper()
		if got := d.MemoryStats().DeviceInUse; got != want {
			t.Fatalf("%s: %d bytes in use, want %d", when, got, want)
		}
	}
	a, b := mustStream(t, d), mustStream(t, d)
	inUse(base+2*scratch, "two streams")
	check(t, "BeginCapture", a.BeginCapture(device.CaptureGlobal))
	check(t, "Scale", a.Scale(x, 2))
	check(t, "Destroy during another stream's capture", b.Destroy())
	if _, err := d.NewStream(); !errors.Is(err, device.ErrCaptureViolation) {
		t.Fatalf("NewStream during a capture = %v, want ErrCaptureViolation", err)
	}
	inUse(base+2*scratch, "a stream destroyed during a capture")
	g, err := a.EndCapture()
	check(t, "EndCapture (the capture survived the Destroy and the refused NewStream)", err)
	check(t, "Graph.Destroy", g.Destroy())
	c := mustStream(t, d) // frees the destroyed stream's scratch first
	inUse(base+2*scratch, "the destroyed stream's scratch freed, a third stream made")
	check(t, "Destroy", c.Destroy())
	check(t, "Destroy", a.Destroy())
	y := mustUpload(t, d, make([]float32, 64)) // Alloc frees their scratch first
	if held := d.MemoryStats().DeviceInUse - base; held >= scratch {
		t.Fatalf("after an Alloc, %d bytes are held besides x: the destroyed streams' scratch was not freed", held)
	}
	check(t, "Free", d.Free(y))
	inUse(base, "every stream destroyed, the buffers after x freed")
}

// Under a memory limit too small for a scratch, NewStream still succeeds:
// the stream runs tl_gemm_klanes in one part, with the same result.
func TestStreamWithoutScratch(t *testing.T) {
	d := openConfig(t, Config{MemoryLimit: 512 << 10})
	s := mustStream(t, d)
	if s.(*Stream).scratch.Len() != 0 {
		t.Fatal("a stream under a 512 KiB limit holds a 1 MiB scratch")
	}
	const m, n, k = 3, 8, 4096
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	for i := range b {
		b[i] = float32(i%5) - 2
	}
	ab, bb, cb := mustUpload(t, d, a), mustUpload(t, d, b), mustUpload(t, d, make([]float32, m*n))
	check(t, "Gemm", s.Gemm(false, false, m, n, k, 1, ab, bb, 0, cb))
	got := make([]float32, m*n)
	check(t, "Download", d.Download(got, cb))
	for i := range m {
		for j := range n {
			want := 0.0
			for l := range k {
				want += float64(a[i*k+l]) * float64(b[l*n+j])
			}
			if float64(got[i*n+j]) != want {
				t.Fatalf("C[%d,%d] = %g, want %g", i, j, got[i*n+j], want)
			}
		}
	}
}

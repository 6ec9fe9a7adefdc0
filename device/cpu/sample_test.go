package cpu_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
)

// TestSampleKernelsOnAStream: SampleLast, AdvanceRNG and ShiftAppend as
// a decode step enqueues them, twice from the same state: the same ids,
// the window shifted with each appended.
func TestSampleKernelsOnAStream(t *testing.T) {
	d := openWith(t, cpu.Config{Threads: 2})
	s, err := d.NewStream()
	must(t, err)
	t.Cleanup(func() { _ = s.Destroy() })
	sk, ok := s.(device.SampleKernels)
	if !ok {
		t.Fatal("the CPU stream has no sampling kernels")
	}
	alloc := func(v []float32) device.Buffer {
		b, err := d.Alloc(len(v))
		must(t, err)
		must(t, d.Upload(b, v))
		return b
	}
	logits := alloc([]float32{0.1, 2, -1, 0.5, 1.2})
	window := alloc([]float32{10, 11, 12})
	rng := alloc(make([]float32, device.RNGLen))
	id := alloc([]float32{0})
	draw := func() []float32 {
		must(t, d.Upload(window, []float32{10, 11, 12}))
		must(t, d.Upload(rng, make([]float32, device.RNGLen)))
		for range 3 {
			must(t, sk.SampleLast(5, 1, logits, rng, id))
			must(t, s.AdvanceRNG(rng, 1))
			must(t, sk.ShiftAppend(3, id, window))
		}
		must(t, s.Synchronize())
		w := make([]float32, 3)
		must(t, d.Download(w, window))
		return w
	}
	a, b := draw(), draw()
	if !slices.Equal(a, b) {
		t.Fatalf("two draws from the same state: %v and %v", a, b)
	}
	for _, v := range a {
		if v != float32(int(v)) || v < 0 || v >= 5 {
			t.Fatalf("window %v: want three ids in [0, 5) appended", a)
		}
	}
	if err := sk.SampleLast(5, -1, logits, rng, id); !errors.Is(err, device.ErrMisuse) {
		t.Errorf("temperature -1: %v, want ErrMisuse", err)
	}
	if err := sk.ShiftAppend(3, window.Slice(2, 1), window); !errors.Is(err, device.ErrMisuse) {
		t.Errorf("an id inside the window: %v, want ErrMisuse", err)
	}
}

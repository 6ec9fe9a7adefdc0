package devicetest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// kernelEnv runs kernels on one stream of a device and fails its test on
// any error. Every buffer it uploads is a view with guard elements on both
// sides, so a kernel that ignores a view's offset or writes past its end is
// caught, and so is a backend that assumes aligned memory.
type kernelEnv struct {
	t      *testing.T
	dev    device.Device
	s      device.Stream
	guards *[]device.Buffer // whole allocations behind this test's views
}

// guardLen is odd so that views start off any vector alignment.
const guardLen = 3

// guardValue fills the guard elements; any change to one is an error.
const guardValue = float32(-12345.5)

func newKernelEnv(t *testing.T, open Opener) *kernelEnv {
	t.Helper()
	dev := open(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Destroy() })
	return &kernelEnv{t: t, dev: dev, s: s, guards: new([]device.Buffer)}
}

// run runs fn as a subtest on the same stream, then checks the guards of
// the buffers fn uploaded.
func (ke *kernelEnv) run(name string, fn func(ke *kernelEnv)) {
	ke.t.Run(name, func(t *testing.T) {
		sub := &kernelEnv{t: t, dev: ke.dev, s: ke.s, guards: new([]device.Buffer)}
		fn(sub)
		sub.checkGuards()
	})
}

func (ke *kernelEnv) must(err error) {
	ke.t.Helper()
	if err != nil {
		ke.t.Fatal(err)
	}
}

// upload copies vals into a new guarded view on the device.
func (ke *kernelEnv) upload(vals []float32) device.Buffer {
	ke.t.Helper()
	whole, err := ke.dev.Alloc(len(vals) + 2*guardLen)
	ke.must(err)
	ke.t.Cleanup(func() { _ = ke.dev.Free(whole) })
	data := make([]float32, whole.Len())
	fill32(data, guardValue)
	copy(data[guardLen:], vals)
	ke.must(ke.dev.Upload(whole, data))
	*ke.guards = append(*ke.guards, whole)
	return whole.Slice(guardLen, len(vals))
}

// download waits for the stream, then copies b back to the host.
func (ke *kernelEnv) download(b device.Buffer) []float32 {
	ke.t.Helper()
	ke.must(ke.s.Synchronize())
	out := make([]float32, b.Len())
	ke.must(ke.dev.Download(out, b))
	return out
}

func (ke *kernelEnv) checkGuards() {
	ke.t.Helper()
	for i, whole := range *ke.guards {
		data := ke.download(whole)
		n := len(data) - guardLen
		for j, v := range append(data[:guardLen:guardLen], data[n:]...) {
			if math.Float32bits(v) != math.Float32bits(guardValue) {
				ke.t.Errorf("buffer %d: guard element %d outside the view was overwritten with %g", i, j, v)
			}
		}
	}
}

// misuseCase is a call with bad arguments. It must fail with ErrMisuse and
// enqueue nothing: keep, a buffer the kernel would write, stays unchanged.
type misuseCase struct {
	name string
	keep device.Buffer // may be the zero Buffer when nothing is written
	call func(s device.Stream) error
}

func (ke *kernelEnv) checkMisuse(cases []misuseCase) {
	for _, c := range cases {
		ke.run(c.name, func(ke *kernelEnv) {
			var before []float32
			if !c.keep.IsZero() {
				before = ke.download(c.keep)
			}
			err := c.call(ke.s)
			if !errors.Is(err, device.ErrMisuse) {
				ke.t.Fatalf("got error %v, want one wrapping device.ErrMisuse", err)
			}
			if !c.keep.IsZero() {
				checkSameBits(ke.t, "output after a rejected call", ke.download(c.keep), before)
			}
		})
	}
}

// newRand returns a generator seeded per case, so failures reproduce.
func newRand(kernel string, seed int) *rand.Rand {
	var h uint64
	for _, c := range kernel {
		h = h*31 + uint64(c)
	}
	return rand.New(rand.NewPCG(h, uint64(seed)))
}

// uniform returns n values drawn uniformly from [lo, hi).
func uniform(rng *rand.Rand, n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*rng.Float32()
	}
	return v
}

// classLabels returns one random class index in [0, cols) per row.
func classLabels(rng *rand.Rand, rows, cols int) []float32 {
	v := make([]float32, rows)
	for i := range v {
		v[i] = float32(rng.IntN(cols))
	}
	return v
}

// maskTail returns a mask whose last pad rows are padding.
func maskTail(rows, pad int) []float32 {
	m := make([]float32, rows)
	fill32(m[:rows-pad], 1)
	return m
}

func fill32(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}

func nans(n int) []float32 {
	v := make([]float32, n)
	fill32(v, float32(math.NaN()))
	return v
}

func absf(x float32) float32 { return float32(math.Abs(float64(x))) }

func absAll(x []float32) []float32 {
	v := make([]float32, len(x))
	for i, e := range x {
		v[i] = float32(math.Abs(float64(e)))
	}
	return v
}

// Tolerances, relative to the magnitude of each expected element.
//
// Elementwise kernels do a few float32 operations per element, so a backend
// is within a few ulps (1e-7) of the float64 reference; 1e-5 leaves room
// for fused multiply-adds and fast exp/tanh. Near zero the magnitude is
// floored at elemFloor because cancelling O(1) operands leaves an absolute
// error of a few 1e-8, so the bound there is 1e-6 absolute.
//
// GEMM and reductions may sum thousands of terms in float32 in any order,
// so they get 1e-4 relative to the sum of the terms' absolute values (the
// magnitude that rounding errors scale with), not to the possibly cancelled
// result.
const (
	elemTol   = 1e-5
	elemFloor = 0.1
	sumTol    = 1e-4
)

// elemMagnitude returns max(|want|, elemFloor) for each element.
func elemMagnitude(want []float64) []float64 {
	mag := make([]float64, len(want))
	for i, w := range want {
		mag[i] = math.Max(math.Abs(w), elemFloor)
	}
	return mag
}

// checkClose reports the elements where |got-want| > tol*mag; a NaN in want
// must be matched by a NaN.
func checkClose(t *testing.T, name string, got []float32, want, mag []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d elements, want %d", name, len(got), len(want))
	}
	bad := 0
	for i, g := range got {
		w := want[i]
		ok := math.IsNaN(w) == math.IsNaN(float64(g)) &&
			(math.IsNaN(w) || math.Abs(float64(g)-w) <= tol*mag[i])
		if !ok {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g (tolerance %.1g of %.3g)", name, i, g, w, tol, mag[i])
			}
			bad++
		}
	}
	if bad >= 5 {
		t.Errorf("%s: %d of %d elements out of tolerance", name, bad, len(got))
	}
}

// checkElems compares an elementwise kernel's output.
func checkElems(t *testing.T, name string, got []float32, want []float64) {
	t.Helper()
	checkClose(t, name, got, want, elemMagnitude(want), elemTol)
}

// checkSameBits reports whether two results are identical bit for bit.
func checkSameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d elements, want %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d differs: %g (%#x) then %g (%#x)", name, i,
				want[i], math.Float32bits(want[i]), got[i], math.Float32bits(got[i]))
		}
	}
}

// checkRepeatable runs a kernel twice on fresh copies of the same inputs
// and checks that its outputs have the same bits; it returns them.
func checkRepeatable(t *testing.T, run func() [][]float32) [][]float32 {
	t.Helper()
	first, second := run(), run()
	for i := range first {
		checkSameBits(t, fmt.Sprintf("output %d of a repeated run", i), second[i], first[i])
	}
	return first
}

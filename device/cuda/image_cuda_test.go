//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
)

// devicePair runs the same kernel on the GPU and on the CPU device.
type devicePair struct {
	t        *testing.T
	gpu, ref device.Device
	gs, cs   device.Stream
}

func newDevicePair(t *testing.T) *devicePair {
	gpu := openTest(t)
	ref, err := cpu.Open(cpu.Config{})
	check(t, "cpu.Open", err)
	t.Cleanup(func() { ref.Close() })
	return &devicePair{t: t, gpu: gpu, ref: ref, gs: mustStream(t, gpu), cs: mustStream(t, ref)}
}

// run uploads ins to fresh buffers on each device, calls the kernel on them
// and returns every buffer's contents afterwards, the GPU's then the CPU's.
func (p *devicePair) run(ins [][]float32, call func(s device.Stream, b []device.Buffer) error) (gpu, ref [][]float32) {
	p.t.Helper()
	return runOn(p.t, p.gpu, p.gs, ins, call), runOn(p.t, p.ref, p.cs, ins, call)
}

// runOn uploads ins to fresh buffers on d, calls the kernel on them on s
// and returns every buffer's contents afterwards.
func runOn(t *testing.T, d device.Device, s device.Stream, ins [][]float32, call func(s device.Stream, b []device.Buffer) error) [][]float32 {
	t.Helper()
	bufs := make([]device.Buffer, len(ins))
	for i, v := range ins {
		b, err := d.Alloc(len(v))
		check(t, "Alloc", err)
		check(t, "Upload", d.Upload(b, v))
		bufs[i] = b
	}
	check(t, "kernel", call(s, bufs))
	check(t, "Synchronize", s.Synchronize())
	out := make([][]float32, len(ins))
	for i, b := range bufs {
		out[i] = make([]float32, b.Len())
		check(t, "Download", d.Download(out[i], b))
		check(t, "Free", d.Free(b))
	}
	return out
}

// sameBitsAs fails unless the GPU's buffers hold the CPU device's bits.
func sameBitsAs(t *testing.T, what string, gpu, ref [][]float32) {
	t.Helper()
	for i := range gpu {
		for j := range gpu[i] {
			if math.Float32bits(gpu[i][j]) != math.Float32bits(ref[i][j]) {
				t.Errorf("%s: buffer %d element %d: GPU %g (%#08x), CPU device %g (%#08x)", what, i, j,
					gpu[i][j], math.Float32bits(gpu[i][j]), ref[i][j], math.Float32bits(ref[i][j]))
				return
			}
		}
	}
}

// sameBitsNaNAsNaN is sameBitsAs for results computed from NaN inputs: a
// NaN matches any NaN. Arithmetic on a NaN gives the canonical NaN
// (0x7fffffff) on NVIDIA GPUs, as an H100 showed, where x86 keeps the
// quieted payload of the input (0x7fc00000 here); IEEE 754 leaves NaN
// payloads to the implementation. Every other element must match bit for bit.
func sameBitsNaNAsNaN(t *testing.T, what string, gpu, ref [][]float32) {
	t.Helper()
	for i := range gpu {
		for j := range gpu[i] {
			g, r := gpu[i][j], ref[i][j]
			if g != g && r != r {
				continue
			}
			if math.Float32bits(g) != math.Float32bits(r) {
				t.Errorf("%s: buffer %d element %d: GPU %g (%#08x), CPU device %g (%#08x)", what, i, j,
					g, math.Float32bits(g), r, math.Float32bits(r))
				return
			}
		}
	}
}

// within fails when a GPU buffer differs from the CPU device's by more
// than tol relative to max(1, |CPU|), and logs how many elements differ.
func within(t *testing.T, what string, gpu, ref [][]float32, tol float64) {
	t.Helper()
	differ, total := 0, 0
	for i := range gpu {
		for j, g := range gpu[i] {
			r := float64(ref[i][j])
			total++
			if math.Float32bits(g) != math.Float32bits(ref[i][j]) {
				differ++
			}
			if math.Abs(float64(g)-r) > tol*math.Max(1, math.Abs(r)) || math.IsNaN(float64(g)) != math.IsNaN(r) {
				t.Errorf("%s: buffer %d element %d: GPU %g, CPU device %g", what, i, j, g, r)
				return
			}
		}
	}
	t.Logf("%s: %d of %d elements differ from the CPU device's bits", what, differ, total)
}

func randFloats(rng *rand.Rand, n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*rng.Float32()
	}
	return v
}

func nanFloats(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

// The gather kernels (Col2Im, MaxPoolGrad, AvgPoolGrad) add each element's
// terms in the order the CPU device's scatter does, in float32 from zero,
// the forward window kernels and Mul are per-element float32 arithmetic,
// and Dropout draws the same Philox words: all give the CPU device's bits.
// Batch normalisation sums in double in another (fixed) order, so it
// agrees to within rounding.
func TestImageKernelsMatchCPUDevice(t *testing.T) {
	p := newDevicePair(t)
	rng := rand.New(rand.NewPCG(23, 1))
	convs := []device.ConvShape{
		{N: 2, H: 7, W: 6, C: 3, KH: 3, KW: 3, Stride: 1, Pad: 1},
		{N: 1, H: 9, W: 8, C: 4, KH: 3, KW: 2, Stride: 2, Pad: 1},
		{N: 3, H: 5, W: 5, C: 2, KH: 5, KW: 5, Stride: 3, Pad: 2},
	}
	for _, cs := range convs {
		name := fmt.Sprintf("%+v", cs)
		x := randFloats(rng, cs.InLen(), -1, 1)
		g, c := p.run([][]float32{x, nanFloats(cs.Rows() * cs.Cols())}, func(ik device.Stream, b []device.Buffer) error {
			return ik.Im2Col(cs, b[0], b[1])
		})
		sameBitsAs(t, "Im2Col "+name, g, c)
		dcols := randFloats(rng, cs.Rows()*cs.Cols(), -1, 1)
		g, c = p.run([][]float32{dcols, nanFloats(cs.InLen())}, func(ik device.Stream, b []device.Buffer) error {
			return ik.Col2Im(cs, b[0], b[1])
		})
		sameBitsAs(t, "Col2Im "+name, g, c)
	}
	pools := []device.PoolShape{
		{N: 2, H: 6, W: 6, C: 3, K: 2, Stride: 2},
		{N: 1, H: 7, W: 5, C: 4, K: 3, Stride: 2, Pad: 1},
		{N: 2, H: 5, W: 5, C: 2, K: 3, Stride: 1, Pad: 1},
		{N: 3, H: 4, W: 4, C: 5, K: 4, Stride: 1}, // global
	}
	for _, ps := range pools {
		name := fmt.Sprintf("%+v", ps)
		x := randFloats(rng, ps.InLen(), -1, 1)
		x[ps.C] = x[0] // a tie in the first window
		x[2*ps.C+1] = float32(math.NaN())
		g, c := p.run([][]float32{x, nanFloats(ps.OutLen()), nanFloats(ps.OutLen())}, func(ik device.Stream, b []device.Buffer) error {
			return ik.MaxPool(ps, b[0], b[1], b[2])
		})
		sameBitsAs(t, "MaxPool "+name, g, c)
		arg := g[2]
		dy := randFloats(rng, ps.OutLen(), -1, 1)
		g, c = p.run([][]float32{dy, arg, nanFloats(ps.InLen())}, func(ik device.Stream, b []device.Buffer) error {
			return ik.MaxPoolGrad(ps, b[0], b[1], b[2])
		})
		sameBitsAs(t, "MaxPoolGrad "+name, g, c)
		g, c = p.run([][]float32{x, nanFloats(ps.OutLen())}, func(ik device.Stream, b []device.Buffer) error {
			return ik.AvgPool(ps, b[0], b[1])
		})
		sameBitsNaNAsNaN(t, "AvgPool "+name, g, c)
		g, c = p.run([][]float32{dy, nanFloats(ps.InLen())}, func(ik device.Stream, b []device.Buffer) error {
			return ik.AvgPoolGrad(ps, b[0], b[1])
		})
		sameBitsAs(t, "AvgPoolGrad "+name, g, c)
	}
	for _, sh := range [][2]int{{2, 3}, {50, 37}, {300, 8}} {
		rows, cols := sh[0], sh[1]
		name := fmt.Sprintf("%dx%d", rows, cols)
		x := randFloats(rng, rows*cols, 1, 4)
		params, running := randFloats(rng, 2*cols, 0.5, 1.5), randFloats(rng, 2*cols, 0.5, 1)
		g, c := p.run([][]float32{x, params, nanFloats(2 * cols), nanFloats(rows * cols), nanFloats(rows * cols), running},
			func(ik device.Stream, b []device.Buffer) error {
				return ik.BatchNormTrain(rows, cols, 1e-5, 0.1, b[0], b[1], b[2], b[3], b[4], b[5])
			})
		within(t, "BatchNormTrain "+name, g, c, 1e-5)
		stats, xhat := c[2], c[3]
		g, c = p.run([][]float32{x, params, running, nanFloats(rows * cols)}, func(ik device.Stream, b []device.Buffer) error {
			return ik.BatchNormEval(rows, cols, 1e-5, b[0], b[1], b[2], b[3])
		})
		sameBitsAs(t, "BatchNormEval "+name, g, c)
		dy := randFloats(rng, rows*cols, -1, 1)
		g, c = p.run([][]float32{dy, xhat, params, stats, nanFloats(rows * cols), nanFloats(2 * cols)},
			func(ik device.Stream, b []device.Buffer) error {
				return ik.BatchNormGrad(rows, cols, b[0], b[1], b[2], b[3], b[4], b[5])
			})
		within(t, "BatchNormGrad "+name, g, c, 1e-5)
	}
	for _, d := range []struct {
		n            int
		p            float32
		seed, offset uint64
	}{{1, 0.5, 1, 0}, {1003, 0.3, 0x0123456789abcdef, 12345}, {200, 0.5, 7, 0x1_ffff_fff0}, {64, 0.1, 9, math.MaxUint64 - 3}} {
		name := fmt.Sprintf("n=%d p=%g seed=%#x offset=%#x", d.n, d.p, d.seed, d.offset)
		state := []float32{
			math.Float32frombits(uint32(d.seed)), math.Float32frombits(uint32(d.seed >> 32)),
			math.Float32frombits(uint32(d.offset)), math.Float32frombits(uint32(d.offset >> 32)),
		}
		x := randFloats(rng, d.n, -2, 2)
		g, c := p.run([][]float32{state, x, nanFloats(d.n), nanFloats(d.n)}, func(ik device.Stream, b []device.Buffer) error {
			if err := ik.Dropout(d.p, b[0], b[1], b[2], b[3]); err != nil {
				return err
			}
			return ik.AdvanceRNG(b[0], (d.n+3)/4)
		})
		sameBitsAs(t, "Dropout and AdvanceRNG "+name, g, c)
	}
	x, y := randFloats(rng, 1001, -2, 2), randFloats(rng, 1001, -2, 2)
	g, c := p.run([][]float32{x, y, nanFloats(1001)}, func(ik device.Stream, b []device.Buffer) error {
		return ik.Mul(b[0], b[1], b[2])
	})
	sameBitsAs(t, "Mul", g, c)
}

package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/device/devicetest"
)

// imageRig holds every image kernel's buffers on one device, at sizes
// large enough to be split across threads and not multiples of any part's
// alignment.
type imageRig struct {
	d    device.Device
	s    device.Stream
	bufs map[string]device.Buffer
	// names lists bufs in a fixed order.
	names []string
}

var (
	rigConv = device.ConvShape{N: 8, H: 30, W: 31, C: 6, KH: 3, KW: 3, Stride: 1, Pad: 1}
	rigPool = device.PoolShape{N: 8, H: 30, W: 31, C: 6, K: 3, Stride: 2, Pad: 1}
)

const rigRows, rigCols, rigN = 3001, 37, 100_003

func newImageRig(t testing.TB, threads int) *imageRig {
	t.Helper()
	d := openWith(t, cpu.Config{Threads: threads})
	s, err := d.NewStream()
	must(t, err)
	t.Cleanup(func() { _ = s.Destroy() })
	r := &imageRig{d: d, s: s, bufs: map[string]device.Buffer{}}
	rng := rand.New(rand.NewPCG(23, 5))
	add := func(name string, n int, lo, hi float32) {
		v := make([]float32, n)
		for i := range v {
			v[i] = lo + (hi-lo)*rng.Float32()
		}
		b, err := d.Alloc(n)
		must(t, err)
		must(t, d.Upload(b, v))
		r.bufs[name] = b
		r.names = append(r.names, name)
	}
	add("x", rigConv.InLen(), -1, 1)
	add("cols", rigConv.Rows()*rigConv.Cols(), 0, 0)
	add("dcols", rigConv.Rows()*rigConv.Cols(), -1, 1)
	add("dx", rigConv.InLen(), 0, 0)
	add("pooled", rigPool.OutLen(), 0, 0)
	add("arg", rigPool.OutLen(), 0, 0)
	add("dpooled", rigPool.OutLen(), -1, 1)
	add("dxmax", rigPool.InLen(), 0, 0)
	add("avg", rigPool.OutLen(), 0, 0)
	add("dxavg", rigPool.InLen(), 0, 0)
	add("bnx", rigRows*rigCols, -2, 3)
	add("params", 2*rigCols, 0.5, 1.5)
	add("stats", 2*rigCols, 0, 0)
	add("xhat", rigRows*rigCols, 0, 0)
	add("bny", rigRows*rigCols, 0, 0)
	add("running", 2*rigCols, 0.5, 1)
	add("bneval", rigRows*rigCols, 0, 0)
	add("bndy", rigRows*rigCols, -1, 1)
	add("bndx", rigRows*rigCols, 0, 0)
	add("dparams", 2*rigCols, 0, 0)
	add("dropx", rigN, -1, 1)
	add("dropy", rigN, 0, 0)
	add("mask", rigN, 0, 0)
	add("prod", rigN, 0, 0)
	r.names = append(r.names, "rng")
	r.bufs["rng"], err = d.Alloc(device.RNGLen)
	must(t, err)
	must(t, d.Upload(r.bufs["rng"], devicetest.RNGState(0x5eed, 0xffff_ff00)))
	return r
}

// step enqueues every image kernel once, in the order of a layer's forward
// and backward passes.
func (r *imageRig) step(s device.Stream) error {
	b := r.bufs
	return first(
		s.Im2Col(rigConv, b["x"], b["cols"]),
		s.Col2Im(rigConv, b["dcols"], b["dx"]),
		s.MaxPool(rigPool, b["x"], b["pooled"], b["arg"]),
		s.MaxPoolGrad(rigPool, b["dpooled"], b["arg"], b["dxmax"]),
		s.AvgPool(rigPool, b["x"], b["avg"]),
		s.AvgPoolGrad(rigPool, b["dpooled"], b["dxavg"]),
		s.BatchNormTrain(rigRows, rigCols, 1e-5, 0.1, b["bnx"], b["params"], b["stats"], b["xhat"], b["bny"], b["running"]),
		s.BatchNormEval(rigRows, rigCols, 1e-5, b["bnx"], b["params"], b["running"], b["bneval"]),
		s.BatchNormGrad(rigRows, rigCols, b["bndy"], b["xhat"], b["params"], b["stats"], b["bndx"], b["dparams"]),
		s.Dropout(0.3, b["rng"], b["dropx"], b["dropy"], b["mask"]),
		s.AdvanceRNG(b["rng"], (rigN+3)/4),
		s.Mul(b["dropy"], b["mask"], b["prod"]),
	)
}

func (r *imageRig) contents(t testing.TB) [][]float32 {
	t.Helper()
	must(t, r.s.Synchronize())
	out := make([][]float32, len(r.names))
	for i, name := range r.names {
		out[i] = make([]float32, r.bufs[name].Len())
		must(t, r.d.Download(out[i], r.bufs[name]))
	}
	return out
}

// TestImageKernelsSameBitsAtAnyThreadCount: the image kernels split only
// over outputs that do not depend on each other, and batch normalisation's
// column sums run whole in one part, so one thread and several give the
// same bits.
func TestImageKernelsSameBitsAtAnyThreadCount(t *testing.T) {
	run := func(threads int) ([]string, [][]float32) {
		r := newImageRig(t, threads)
		for range 2 { // the second step sees the first's running statistics and generator
			must(t, r.step(r.s))
		}
		return r.names, r.contents(t)
	}
	sameBitsAtAnyThreadCount(t, run)
}

// sameBitsAtAnyThreadCount fails unless run at 2, 3 and 5 threads leaves
// every named buffer with the bits run at one thread leaves.
func sameBitsAtAnyThreadCount(t *testing.T, run func(threads int) ([]string, [][]float32)) {
	t.Helper()
	names, one := run(1)
	for _, threads := range []int{2, 3, 5} {
		_, got := run(threads)
		for i := range one {
			for j := range one[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(one[i][j]) {
					t.Fatalf("%d threads: %s[%d] = %g, one thread gives %g", threads, names[i], j, got[i][j], one[i][j])
				}
			}
		}
	}
}

// TestReplayedImageKernelsAllocateNothing: a captured graph of every image
// kernel, launched and waited for, allocates nothing in Go.
func TestReplayedImageKernelsAllocateNothing(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		r := newImageRig(t, threads)
		must(t, r.s.BeginCapture(device.CaptureGlobal))
		err := r.step(r.s)
		g, endErr := r.s.EndCapture()
		must(t, err)
		must(t, endErr)
		x, err := r.d.Instantiate(g)
		must(t, err)
		must(t, r.s.Launch(x)) // the stream goroutine's scratch is made on its first kernel
		must(t, r.s.Synchronize())
		allocs := testing.AllocsPerRun(10, func() {
			must(t, r.s.Launch(x))
			must(t, r.s.Synchronize())
		})
		if allocs != 0 {
			t.Errorf("%d threads: a replay of the image kernels allocates %.1f times, want 0", threads, allocs)
		}
		must(t, x.Destroy())
		must(t, g.Destroy())
	}
}

func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// benchDevice opens a device at the machine's thread count and allocates
// buffers of the given lengths, filled with values in [-1, 1).
func benchDevice(b *testing.B, lens ...int) (device.Stream, []device.Buffer) {
	d := openWith(b, cpu.Config{})
	s, err := d.NewStream()
	must(b, err)
	b.Cleanup(func() { _ = s.Destroy() })
	rng := rand.New(rand.NewPCG(1, 2))
	bufs := make([]device.Buffer, len(lens))
	for i, n := range lens {
		v := make([]float32, n)
		for j := range v {
			v[j] = 2*rng.Float32() - 1
		}
		bufs[i], err = d.Alloc(n)
		must(b, err)
		must(b, d.Upload(bufs[i], v))
	}
	return s, bufs
}

// benchConv is a small CNN's first layer at batch 64: 28×28×1 images, 32
// output channels, 3×3 kernels, padding 1.
var benchConv = device.ConvShape{N: 64, H: 28, W: 28, C: 1, KH: 3, KW: 3, Stride: 1, Pad: 1}

// BenchmarkConvForward times a convolution's forward pass through im2col
// (Im2Col, then one Gemm of rows×(3·3·1) by (3·3·1)×32), and each half
// alone; and the backward pass's Col2Im of a 32-channel layer's columns.
func BenchmarkConvForward(b *testing.B) {
	const out = 32
	cs := benchConv
	cases := []struct {
		name string
		run  func(s device.Stream, x, cols, w, y device.Buffer) error
	}{
		{"im2col+gemm", func(s device.Stream, x, cols, w, y device.Buffer) error {
			return first(s.Im2Col(cs, x, cols), s.Gemm(false, false, cs.Rows(), out, cs.Cols(), 1, cols, w, 0, y))
		}},
		{"im2col", func(s device.Stream, x, cols, _, _ device.Buffer) error {
			return s.Im2Col(cs, x, cols)
		}},
		{"gemm", func(s device.Stream, _, cols, w, y device.Buffer) error {
			return s.Gemm(false, false, cs.Rows(), out, cs.Cols(), 1, cols, w, 0, y)
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, bufs := benchDevice(b, cs.InLen(), cs.Rows()*cs.Cols(), cs.Cols()*out, cs.Rows()*out)
			for b.Loop() {
				must(b, c.run(s, bufs[0], bufs[1], bufs[2], bufs[3]))
				must(b, s.Synchronize())
			}
		})
	}
	// The second layer's backward: 32 channels in, 3×3, so 288 columns.
	b.Run("col2im_32ch", func(b *testing.B) {
		cs := device.ConvShape{N: 64, H: 14, W: 14, C: 32, KH: 3, KW: 3, Stride: 1, Pad: 1}
		s, bufs := benchDevice(b, cs.Rows()*cs.Cols(), cs.InLen())
		for b.Loop() {
			must(b, s.Col2Im(cs, bufs[0], bufs[1]))
			must(b, s.Synchronize())
		}
	})
}

// BenchmarkBatchNorm times batch normalisation of the first layer's
// output (64·28·28 rows of 32 channels): training, evaluation, gradient.
func BenchmarkBatchNorm(b *testing.B) {
	const rows, cols = 64 * 28 * 28, 32
	s, bufs := benchDevice(b, rows*cols, 2*cols, 2*cols, rows*cols, rows*cols, 2*cols, rows*cols, rows*cols, 2*cols)
	x, params, stats, xhat, y, running, dy, dx, dparams := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5], bufs[6], bufs[7], bufs[8]
	must(b, s.Fill(running, 1))
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"train", func() error { return s.BatchNormTrain(rows, cols, 1e-5, 0.1, x, params, stats, xhat, y, running) }},
		{"eval", func() error { return s.BatchNormEval(rows, cols, 1e-5, x, params, running, y) }},
		{"grad", func() error { return s.BatchNormGrad(rows, cols, dy, xhat, params, stats, dx, dparams) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				must(b, c.run())
				must(b, s.Synchronize())
			}
			b.ReportMetric(float64(rows*cols)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
		})
	}
}

// BenchmarkPoolAndDropout times the first block's 2×2 max pool, forward
// and backward, and dropout over its output.
func BenchmarkPoolAndDropout(b *testing.B) {
	ps := device.PoolShape{N: 64, H: 28, W: 28, C: 32, K: 2, Stride: 2}
	s, bufs := benchDevice(b, ps.InLen(), ps.OutLen(), ps.OutLen(), ps.InLen(), device.RNGLen, ps.InLen())
	x, y, arg, dx, rng, mask := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5]
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"maxpool", func() error { return s.MaxPool(ps, x, y, arg) }},
		{"maxpool_grad", func() error { return s.MaxPoolGrad(ps, y, arg, dx) }},
		{fmt.Sprintf("dropout_%d", ps.InLen()), func() error { return s.Dropout(0.5, rng, x, dx, mask) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				must(b, c.run())
				must(b, s.Synchronize())
			}
		})
	}
}

// TestIm2ColOneChannel: the 3×3 windows of one channel (a first
// convolution's, copied without a table) give devicetest's reference
// columns, interior and padded windows, on 1 and 2 threads.
func TestIm2ColOneChannel(t *testing.T) {
	for _, cs := range []device.ConvShape{
		{N: 2, H: 5, W: 6, C: 1, KH: 3, KW: 3, Stride: 1, Pad: 1},
		{N: 3, H: 28, W: 28, C: 1, KH: 3, KW: 3, Stride: 1, Pad: 1},
		{N: 1, H: 9, W: 7, C: 1, KH: 3, KW: 3, Stride: 2, Pad: 0},
	} {
		x := make([]float32, cs.InLen())
		for i := range x {
			x[i] = float32(i%97) - 48.5
		}
		want := devicetest.RefIm2Col(cs, x)
		for _, threads := range []int{1, 2} {
			d := openWith(t, cpu.Config{Threads: threads})
			s, err := d.NewStream()
			must(t, err)
			xb, err := d.Alloc(len(x))
			must(t, err)
			cb, err := d.Alloc(cs.Rows() * cs.Cols())
			must(t, err)
			must(t, d.Upload(xb, x))
			must(t, s.Im2Col(cs, xb, cb))
			must(t, s.Synchronize())
			got := make([]float32, cb.Len())
			must(t, d.Download(got, cb))
			for i, v := range got {
				if float64(v) != want[i] {
					t.Fatalf("%+v, %d threads: cols[%d] = %g, want %g", cs, threads, i, v, want[i])
				}
			}
			must(t, s.Destroy())
		}
	}
}

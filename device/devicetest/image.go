package devicetest

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// RunImage checks every kernel of device.ImageKernels: each against the
// float64 references of imageref.go on several shapes (odd sizes, stride
// 2, padding, windows wider than the stride, a 1×1 image, a global pool),
// each case run twice eagerly and once captured and replayed with the same
// bits every time; the backward kernels against finite differences of the
// forward ones (and Col2Im as Im2Col's adjoint); dropout's generator
// against Philox's known answers, its statistics, and fresh masks on each
// replay; and bad arguments failing with ErrMisuse without enqueueing
// anything.
func RunImage(t *testing.T, open Opener) {
	t.Run("Philox known answers", testPhiloxKnownAnswers)
	kernels := []struct {
		name string
		test func(*kernelEnv)
	}{
		{"Im2Col", testIm2Col},
		{"Col2Im", testCol2Im},
		{"MaxPool", testMaxPool},
		{"MaxPoolGrad", testMaxPoolGrad},
		{"AvgPool", testAvgPool},
		{"AvgPoolGrad", testAvgPoolGrad},
		{"BatchNormTrain", testBatchNormTrain},
		{"BatchNormEval", testBatchNormEval},
		{"BatchNormGrad", testBatchNormGrad},
		{"Dropout", testDropout},
		{"AdvanceRNG", testAdvanceRNG},
		{"Mul", testMul},
	}
	for _, k := range kernels {
		t.Run(k.name, func(t *testing.T) { k.test(newKernelEnv(t, open)) })
	}
}

// imageCall is a kernel call on fresh buffers holding ins (guarded views,
// as kernelEnv.upload makes them).
type imageCall struct {
	ins  [][]float32
	call func(ik device.ImageKernels, b []device.Buffer) error
}

func (ke *kernelEnv) uploadAll(vals [][]float32) []device.Buffer {
	ke.t.Helper()
	b := make([]device.Buffer, len(vals))
	for i, v := range vals {
		b[i] = ke.upload(v)
	}
	return b
}

func (ke *kernelEnv) downloadAll(bufs []device.Buffer) [][]float32 {
	ke.t.Helper()
	out := make([][]float32, len(bufs))
	for i, b := range bufs {
		out[i] = ke.download(b)
	}
	return out
}

// outputs runs c twice eagerly and once captured and replayed, each time
// on fresh copies of its inputs, checks that the three leave every buffer
// with the same bits, and returns the buffers' contents.
func (ke *kernelEnv) outputs(c imageCall) [][]float32 {
	ke.t.Helper()
	first := checkRepeatable(ke.t, func() [][]float32 {
		b := ke.uploadAll(c.ins)
		ke.must(c.call(ke.s, b))
		return ke.downloadAll(b)
	})
	b := ke.uploadAll(c.ins)
	ke.must(ke.s.Synchronize())
	replayed := ke.downloadAll(ke.replay(func(ik device.ImageKernels) error { return c.call(ik, b) }, b, 1))
	for i := range first {
		checkSameBits(ke.t, fmt.Sprintf("buffer %d after a replay", i), replayed[i], first[i])
	}
	return first
}

// replay captures the work enqueue makes, launches it the given number of
// times and returns bufs once the launches are done.
func (ke *kernelEnv) replay(enqueue func(ik device.ImageKernels) error, bufs []device.Buffer, launches int) []device.Buffer {
	ke.t.Helper()
	ke.must(ke.s.BeginCapture(device.CaptureGlobal))
	err := enqueue(ke.s)
	g, endErr := ke.s.EndCapture() // always, so that a failure leaves no capture behind
	ke.must(err)
	ke.must(endErr)
	x, err := ke.dev.Instantiate(g)
	ke.must(err)
	for range launches {
		ke.must(ke.s.Launch(x))
	}
	ke.must(ke.s.Synchronize())
	ke.must(x.Destroy())
	ke.must(g.Destroy())
	return bufs
}

// Finite differences: a backward kernel's gradient is compared with
// central differences of a scalar loss through the forward kernel, in
// float32 on the device, with one Richardson step (4·D(h/2) - D(h))/3 so
// that the truncation error is of order h⁴ and h can stay large beside
// float32's rounding.
const (
	fdTol   = 2e-3
	fdFloor = 0.1
)

// numericGrad returns the finite-difference gradient of loss at x.
func numericGrad(x []float32, h float32, loss func([]float32) float64) []float64 {
	xp := slices.Clone(x)
	diff := func(i int, h float32) float64 {
		xp[i] = x[i] + h
		up, lu := xp[i], loss(xp)
		xp[i] = x[i] - h
		down, ld := xp[i], loss(xp)
		xp[i] = x[i]
		return (lu - ld) / float64(up-down)
	}
	g := make([]float64, len(x))
	for i := range x {
		g[i] = (4*diff(i, h/2) - diff(i, h)) / 3
	}
	return g
}

// checkGrad compares a kernel's gradient with a numeric one.
func checkGrad(t *testing.T, name string, got []float32, numeric []float64) {
	t.Helper()
	mag := make([]float64, len(numeric))
	for i, w := range numeric {
		mag[i] = math.Max(math.Abs(w), fdFloor)
	}
	checkClose(t, name, got, numeric, mag, fdTol)
}

// dot is Σ w·v in float64.
func dot(w []float32, v []float32) float64 {
	var s float64
	for i := range w {
		s += float64(w[i]) * float64(v[i])
	}
	return s
}

// exact compares a kernel that only moves values (no arithmetic) with its
// reference: every element must be equal.
func exact(t *testing.T, name string, got []float32, want []float64) {
	t.Helper()
	mag := make([]float64, len(want))
	checkClose(t, name, got, want, mag, 0)
}

// checkSum compares a sum with its reference, within sumTol of absWant,
// the same sum over the terms' absolute values (the magnitude its rounding
// errors scale with).
func checkSum(t *testing.T, name string, got []float32, want, absWant []float64) {
	t.Helper()
	mag := make([]float64, len(absWant))
	for i, m := range absWant {
		mag[i] = math.Max(m, 1e-30)
	}
	checkClose(t, name, got, want, mag, sumTol)
}

var convShapes = []device.ConvShape{
	{N: 2, H: 5, W: 7, C: 3, KH: 3, KW: 3, Stride: 1, Pad: 1},
	{N: 1, H: 7, W: 6, C: 2, KH: 3, KW: 2, Stride: 2, Pad: 1},
	{N: 2, H: 9, W: 8, C: 5, KH: 5, KW: 5, Stride: 3, Pad: 2},
	{N: 2, H: 6, W: 6, C: 1, KH: 2, KW: 2, Stride: 2, Pad: 0},
	{N: 3, H: 1, W: 1, C: 4, KH: 1, KW: 1, Stride: 1, Pad: 0},
	{N: 2, H: 1, W: 1, C: 2, KH: 3, KW: 3, Stride: 1, Pad: 2},
	{N: 4, H: 28, W: 28, C: 3, KH: 3, KW: 3, Stride: 1, Pad: 1},
}

func convName(s device.ConvShape) string {
	return fmt.Sprintf("%dx%dx%dx%d_k%dx%d_s%d_p%d", s.N, s.H, s.W, s.C, s.KH, s.KW, s.Stride, s.Pad)
}

func testIm2Col(ke *kernelEnv) {
	for i, s := range convShapes {
		ke.run(convName(s), func(ke *kernelEnv) {
			x := uniform(newRand("Im2Col", i), s.InLen(), -1, 1)
			out := ke.outputs(imageCall{ins: [][]float32{x, nans(s.Rows() * s.Cols())}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.Im2Col(s, b[0], b[1])
			}})
			exact(ke.t, "cols", out[1], RefIm2Col(s, x))
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		s := device.ConvShape{N: 1, H: 4, W: 4, C: 2, KH: 3, KW: 3, Stride: 1, Pad: 1}
		x, cols := ke.upload(make([]float32, s.InLen())), ke.upload(make([]float32, s.Rows()*s.Cols()))
		call := func(s device.ConvShape, x, cols device.Buffer) func(device.Stream) error {
			return func(st device.Stream) error { return st.Im2Col(s, x, cols) }
		}
		with := func(f func(*device.ConvShape)) device.ConvShape { c := s; f(&c); return c }
		ke.checkMisuse([]misuseCase{
			{"N=0", cols, call(with(func(c *device.ConvShape) { c.N = 0 }), x, cols)},
			{"stride 0", cols, call(with(func(c *device.ConvShape) { c.Stride = 0 }), x, cols)},
			{"padding as wide as the kernel", cols, call(with(func(c *device.ConvShape) { c.Pad = 3 }), x, cols)},
			{"negative padding", cols, call(with(func(c *device.ConvShape) { c.Pad = -1 }), x, cols)},
			{"kernel larger than the padded image", cols, call(with(func(c *device.ConvShape) { c.KH, c.Pad = 7, 1 }), x, cols)},
			{"x too short", cols, call(s, x.Slice(0, s.InLen()-1), cols)},
			{"cols too short", cols.Slice(0, cols.Len()-1), call(s, x, cols.Slice(0, cols.Len()-1))},
			{"zero x", cols, call(s, device.Buffer{}, cols)},
		})
	})
}

func testCol2Im(ke *kernelEnv) {
	for i, s := range convShapes {
		ke.run(convName(s), func(ke *kernelEnv) {
			dcols := uniform(newRand("Col2Im", i), s.Rows()*s.Cols(), -1, 1)
			out := ke.outputs(imageCall{ins: [][]float32{dcols, nans(s.InLen())}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.Col2Im(s, b[0], b[1])
			}})
			checkSum(ke.t, "dx", out[1], RefCol2Im(s, dcols), RefCol2Im(s, absAll(dcols)))
		})
	}
	// <Im2Col(x), d> = <x, Col2Im(d)>: Col2Im is Im2Col's transpose.
	for i, s := range convShapes[:4] {
		ke.run("adjoint_"+convName(s), func(ke *kernelEnv) {
			rng := newRand("Col2Im adjoint", i)
			x, d := uniform(rng, s.InLen(), -1, 1), uniform(rng, s.Rows()*s.Cols(), -1, 1)
			xb, cols, db, dx := ke.upload(x), ke.upload(nans(len(d))), ke.upload(d), ke.upload(nans(len(x)))
			ke.must(ke.s.Im2Col(s, xb, cols))
			ke.must(ke.s.Col2Im(s, db, dx))
			lhs, rhs := dot(ke.download(cols), d), dot(x, ke.download(dx))
			if bound := sumTol * dot(absAll(ke.download(cols)), absAll(d)); math.Abs(lhs-rhs) > bound {
				ke.t.Errorf("<Im2Col(x), d> = %.9g, <x, Col2Im(d)> = %.9g: differ by more than %.2g", lhs, rhs, bound)
			}
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		s := device.ConvShape{N: 1, H: 4, W: 4, C: 2, KH: 3, KW: 3, Stride: 2, Pad: 1}
		dcols, dx := ke.upload(make([]float32, s.Rows()*s.Cols())), ke.upload(make([]float32, s.InLen()))
		call := func(s device.ConvShape, dcols, dx device.Buffer) func(device.Stream) error {
			return func(st device.Stream) error { return st.Col2Im(s, dcols, dx) }
		}
		bad := s
		bad.KW = 0
		ke.checkMisuse([]misuseCase{
			{"KW=0", dx, call(bad, dcols, dx)},
			{"dcols too short", dx, call(s, dcols.Slice(1, dcols.Len()-1), dx)},
			{"dx too short", dx.Slice(0, dx.Len()-1), call(s, dcols, dx.Slice(0, dx.Len()-1))},
		})
	})
}

// poolCase is a pooling shape and the kind of input it is tried on.
type poolCase struct {
	s device.PoolShape
	// input: "uniform" in [-1, 1); "negative" in [-3, -1), so that a
	// padding zero would win a max if it counted; "ties", values in
	// {-1, 0, 1}, so that windows hold their maximum several times.
	input string
}

var poolCases = []poolCase{
	{device.PoolShape{N: 2, H: 6, W: 6, C: 3, K: 2, Stride: 2}, "uniform"},
	{device.PoolShape{N: 1, H: 7, W: 5, C: 2, K: 3, Stride: 2, Pad: 1}, "uniform"},
	{device.PoolShape{N: 1, H: 7, W: 5, C: 2, K: 3, Stride: 2, Pad: 1}, "negative"},
	{device.PoolShape{N: 2, H: 5, W: 5, C: 2, K: 3, Stride: 1, Pad: 1}, "ties"},
	{device.PoolShape{N: 2, H: 5, W: 4, C: 3, K: 2, Stride: 1, Pad: 1}, "negative"},
	{device.PoolShape{N: 2, H: 1, W: 1, C: 3, K: 1, Stride: 1}, "uniform"},
	{device.PoolShape{N: 3, H: 7, W: 7, C: 4, K: 7, Stride: 1}, "uniform"}, // global
	{device.PoolShape{N: 8, H: 28, W: 28, C: 8, K: 2, Stride: 2}, "uniform"},
	{device.PoolShape{N: 1, H: 5, W: 4, C: 70, K: 2, Stride: 2, Pad: 1}, "ties"}, // many channels
}

func (c poolCase) String() string {
	s := c.s
	return fmt.Sprintf("%dx%dx%dx%d_k%d_s%d_p%d_%s", s.N, s.H, s.W, s.C, s.K, s.Stride, s.Pad, c.input)
}

func (c poolCase) x(seed int) []float32 {
	rng := newRand("pool "+c.input, seed)
	switch c.input {
	case "negative":
		return uniform(rng, c.s.InLen(), -3, -1)
	case "ties":
		x := make([]float32, c.s.InLen())
		for i := range x {
			x[i] = float32(rng.IntN(3) - 1)
		}
		return x
	}
	return uniform(rng, c.s.InLen(), -1, 1)
}

// distinct returns n values a spacing apart in a random order, so that a
// max pool's arg-max stays put under perturbations below half the spacing.
func distinct(seed, n int, spacing float32) []float32 {
	rng := newRand("distinct", seed)
	x := make([]float32, n)
	for i, p := range rng.Perm(n) {
		x[i] = spacing * float32(p-n/2)
	}
	return x
}

func argsFloat(arg []int) []float32 {
	a := make([]float32, len(arg))
	for i, v := range arg {
		a[i] = float32(v)
	}
	return a
}

func poolMisuse(ke *kernelEnv, name string, withArg bool, call func(ik device.ImageKernels, s device.PoolShape, in, out, arg device.Buffer) error) {
	s := device.PoolShape{N: 1, H: 4, W: 4, C: 2, K: 2, Stride: 2}
	in, out, arg := ke.upload(make([]float32, s.InLen())), ke.upload(make([]float32, s.OutLen())), ke.upload(make([]float32, s.OutLen()))
	keep := in
	if name == "forward" {
		keep = out
	}
	c := func(s device.PoolShape, in, out, arg device.Buffer) func(device.Stream) error {
		return func(st device.Stream) error { return call(st, s, in, out, arg) }
	}
	with := func(f func(*device.PoolShape)) device.PoolShape { c := s; f(&c); return c }
	cases := []misuseCase{
		{"K=0", keep, c(with(func(p *device.PoolShape) { p.K = 0 }), in, out, arg)},
		{"stride 0", keep, c(with(func(p *device.PoolShape) { p.Stride = 0 }), in, out, arg)},
		{"padding over half the window", keep, c(with(func(p *device.PoolShape) { p.Pad = 2 }), in, out, arg)},
		{"window larger than the image", keep, c(with(func(p *device.PoolShape) { p.K = 5 }), in, out, arg)},
		{"input too short", keep, c(s, in.Slice(0, in.Len()-1), out, arg)},
		{"output too short", keep, c(s, in, out.Slice(0, out.Len()-1), arg)},
	}
	if withArg {
		cases = append(cases,
			misuseCase{"arg too short", keep, c(s, in, out, arg.Slice(0, arg.Len()-1))},
			misuseCase{"zero arg", keep, c(s, in, out, device.Buffer{})})
	}
	ke.checkMisuse(cases)
}

func testMaxPool(ke *kernelEnv) {
	for i, c := range poolCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x := c.x(i)
			out := ke.outputs(imageCall{ins: [][]float32{x, nans(c.s.OutLen()), nans(c.s.OutLen())}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.MaxPool(c.s, b[0], b[1], b[2])
			}})
			y, arg := RefMaxPool(c.s, x)
			exact(ke.t, "y", out[1], y)
			exact(ke.t, "arg", out[2], float64s(argsFloat(arg)))
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		poolMisuse(ke, "forward", true, func(ik device.ImageKernels, s device.PoolShape, x, y, arg device.Buffer) error {
			return ik.MaxPool(s, x, y, arg)
		})
	})
}

func float64s(x []float32) []float64 {
	v := make([]float64, len(x))
	for i, e := range x {
		v[i] = float64(e)
	}
	return v
}

func testMaxPoolGrad(ke *kernelEnv) {
	for i, c := range poolCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			rng := newRand("MaxPoolGrad", i)
			_, arg := RefMaxPool(c.s, c.x(i))
			dy := uniform(rng, c.s.OutLen(), -1, 1)
			out := ke.outputs(imageCall{ins: [][]float32{dy, argsFloat(arg), nans(c.s.InLen())}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.MaxPoolGrad(c.s, b[0], b[1], b[2])
			}})
			checkSum(ke.t, "dx", out[2], RefMaxPoolGrad(c.s, dy, arg), RefMaxPoolGrad(c.s, absAll(dy), arg))
		})
	}
	for i, c := range poolCases[:5] {
		ke.run("finite_differences_"+c.String(), func(ke *kernelEnv) {
			s := c.s
			x, w := distinct(i, s.InLen(), 0.01), uniform(newRand("MaxPoolGrad fd", i), s.OutLen(), -1, 1)
			xb, y, arg := ke.upload(x), ke.upload(nans(s.OutLen())), ke.upload(nans(s.OutLen()))
			ke.must(ke.s.MaxPool(s, xb, y, arg))
			dx := ke.upload(nans(s.InLen()))
			ke.must(ke.s.MaxPoolGrad(s, ke.upload(w), arg, dx))
			numeric := numericGrad(x, 2e-3, func(xp []float32) float64 {
				ke.must(ke.dev.Upload(xb, xp))
				ke.must(ke.s.MaxPool(s, xb, y, arg))
				return dot(w, ke.download(y))
			})
			checkGrad(ke.t, "dx", ke.download(dx), numeric)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		poolMisuse(ke, "backward", true, func(ik device.ImageKernels, s device.PoolShape, dx, dy, arg device.Buffer) error {
			return ik.MaxPoolGrad(s, dy, arg, dx)
		})
	})
}

func testAvgPool(ke *kernelEnv) {
	for i, c := range poolCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x := c.x(i)
			out := ke.outputs(imageCall{ins: [][]float32{x, nans(c.s.OutLen())}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.AvgPool(c.s, b[0], b[1])
			}})
			checkSum(ke.t, "y", out[1], RefAvgPool(c.s, x), RefAvgPool(c.s, absAll(x)))
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		poolMisuse(ke, "forward", false, func(ik device.ImageKernels, s device.PoolShape, x, y, _ device.Buffer) error {
			return ik.AvgPool(s, x, y)
		})
	})
}

func testAvgPoolGrad(ke *kernelEnv) {
	for i, c := range poolCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			dy := uniform(newRand("AvgPoolGrad", i), c.s.OutLen(), -1, 1)
			out := ke.outputs(imageCall{ins: [][]float32{dy, nans(c.s.InLen())}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.AvgPoolGrad(c.s, b[0], b[1])
			}})
			checkSum(ke.t, "dx", out[1], RefAvgPoolGrad(c.s, dy), RefAvgPoolGrad(c.s, absAll(dy)))
		})
	}
	for i, c := range poolCases[:7] {
		ke.run("finite_differences_"+c.String(), func(ke *kernelEnv) {
			s := c.s
			rng := newRand("AvgPoolGrad fd", i)
			x, w := uniform(rng, s.InLen(), -1, 1), uniform(rng, s.OutLen(), -1, 1)
			dx := ke.upload(nans(s.InLen()))
			ke.must(ke.s.AvgPoolGrad(s, ke.upload(w), dx))
			xb, y := ke.upload(x), ke.upload(nans(s.OutLen()))
			numeric := numericGrad(x, 0.1, func(xp []float32) float64 {
				ke.must(ke.dev.Upload(xb, xp))
				ke.must(ke.s.AvgPool(s, xb, y))
				return dot(w, ke.download(y))
			})
			checkGrad(ke.t, "dx", ke.download(dx), numeric)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		poolMisuse(ke, "backward", false, func(ik device.ImageKernels, s device.PoolShape, dx, dy, _ device.Buffer) error {
			return ik.AvgPoolGrad(s, dy, dx)
		})
	})
}

// bnCase is a batch-normalisation shape; its columns have means around
// offset and spreads around 0.5.
type bnCase struct {
	rows, cols int
	offset     float32
}

var bnCases = []bnCase{
	{2, 1, 0}, {7, 3, 0}, {64, 5, 3}, {33, 70, -1}, {1000, 40, 0.5},
}

func (c bnCase) String() string { return fmt.Sprintf("%dx%d_mean%g", c.rows, c.cols, c.offset) }

// bnInputs returns x, params (gamma then beta) and running statistics
// (means, then positive variances) for c.
func (c bnCase) inputs(seed int) (x, params, running []float32) {
	rng := newRand("BatchNorm", seed)
	x = uniform(rng, c.rows*c.cols, c.offset-1, c.offset+1)
	for j := range c.cols { // a spread of its own for each column
		scale := 0.2 + rng.Float32()
		for i := range c.rows {
			x[i*c.cols+j] = c.offset + scale*(x[i*c.cols+j]-c.offset)
		}
	}
	params = slices.Concat(uniform(rng, c.cols, 0.5, 1.5), uniform(rng, c.cols, -0.5, 0.5))
	running = slices.Concat(uniform(rng, c.cols, -1, 1), uniform(rng, c.cols, 0.5, 2))
	return x, params, running
}

// bnMagnitudes returns the magnitudes that a normalised value's and y's
// rounding errors scale with: max(|xhat|, 1), and |gamma|·that + |beta|.
func bnMagnitudes(cols int, xhat []float64, params []float32) (mh, my []float64) {
	mh, my = make([]float64, len(xhat)), make([]float64, len(xhat))
	for i, h := range xhat {
		c := i % cols
		mh[i] = math.Max(math.Abs(h), 1)
		my[i] = math.Abs(float64(params[c]))*mh[i] + math.Abs(float64(params[cols+c]))
	}
	return mh, my
}

const (
	bnEps      = 1e-5
	bnMomentum = 0.1
)

func testBatchNormTrain(ke *kernelEnv) {
	for i, c := range bnCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x, params, running := c.inputs(i)
			n := c.rows * c.cols
			out := ke.outputs(imageCall{
				ins: [][]float32{x, params, nans(2 * c.cols), nans(n), nans(n), running},
				call: func(ik device.ImageKernels, b []device.Buffer) error {
					return ik.BatchNormTrain(c.rows, c.cols, bnEps, bnMomentum, b[0], b[1], b[2], b[3], b[4], b[5])
				}})
			want := RefBatchNormTrain(c.rows, c.cols, bnEps, bnMomentum, x, params, running)
			// The means and the running statistics are sums: their
			// magnitudes are those of the same sums over |x| and
			// |running|; invstd is a quotient and has its own.
			abs := RefBatchNormTrain(c.rows, c.cols, bnEps, bnMomentum, absAll(x), params, absAll(running))
			statMag, runMag := slices.Clone(abs.Stats), slices.Clone(abs.Running)
			for j := range statMag {
				if j >= c.cols {
					statMag[j] = math.Abs(want.Stats[j])
				}
				runMag[j] = math.Max(runMag[j], math.Abs(want.Running[j]))
			}
			mh, my := bnMagnitudes(c.cols, want.Xhat, params)
			checkClose(ke.t, "stats", out[2], want.Stats, statMag, elemTol)
			checkClose(ke.t, "xhat", out[3], want.Xhat, mh, elemTol)
			checkClose(ke.t, "y", out[4], want.Y, my, elemTol)
			checkClose(ke.t, "running", out[5], want.Running, runMag, elemTol)
			checkSameBits(ke.t, "x", out[0], x)
			checkSameBits(ke.t, "params", out[1], params)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const rows, cols = 4, 3
		m, pc := func() device.Buffer { return ke.upload(make([]float32, rows*cols)) }, func() device.Buffer { return ke.upload(make([]float32, 2*cols)) }
		x, params, stats, xhat, y, running := m(), pc(), pc(), m(), m(), pc()
		call := func(rows int, eps, momentum float32, stats, y, running device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error {
				return s.BatchNormTrain(rows, cols, eps, momentum, x, params, stats, xhat, y, running)
			}
		}
		ke.checkMisuse([]misuseCase{
			{"one row", y, call(1, bnEps, bnMomentum, stats, y, running)},
			{"rows=0", y, call(0, bnEps, bnMomentum, stats, y, running)},
			{"eps=0", y, call(rows, 0, bnMomentum, stats, y, running)},
			{"eps NaN", y, call(rows, float32(math.NaN()), bnMomentum, stats, y, running)},
			{"momentum above 1", y, call(rows, bnEps, 1.5, stats, y, running)},
			{"negative momentum", y, call(rows, bnEps, -0.1, stats, y, running)},
			{"stats too short", y, call(rows, bnEps, bnMomentum, stats.Slice(0, 2*cols-1), y, running)},
			{"y too short", y.Slice(0, rows*cols-1), call(rows, bnEps, bnMomentum, stats, y.Slice(0, rows*cols-1), running)},
			{"zero running", y, call(rows, bnEps, bnMomentum, stats, y, device.Buffer{})},
		})
	})
}

func testBatchNormEval(ke *kernelEnv) {
	for i, c := range bnCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x, params, running := c.inputs(i)
			out := ke.outputs(imageCall{ins: [][]float32{x, params, running, nans(c.rows * c.cols)}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.BatchNormEval(c.rows, c.cols, bnEps, b[0], b[1], b[2], b[3])
			}})
			want := RefBatchNormEval(c.rows, c.cols, bnEps, x, params, running)
			xhat := make([]float64, len(x))
			for j, v := range x {
				col := j % c.cols
				xhat[j] = (float64(v) - float64(running[col])) / math.Sqrt(float64(running[c.cols+col])+bnEps)
			}
			_, my := bnMagnitudes(c.cols, xhat, params)
			checkClose(ke.t, "y", out[3], want, my, elemTol)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const rows, cols = 4, 3
		x, params, running, y := ke.upload(make([]float32, rows*cols)), ke.upload(make([]float32, 2*cols)), ke.upload(ones(2*cols)), ke.upload(make([]float32, rows*cols))
		call := func(rows int, running, y device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.BatchNormEval(rows, cols, bnEps, x, params, running, y) }
		}
		ke.checkMisuse([]misuseCase{
			{"rows=0", y, call(0, running, y)},
			{"running too short", y, call(rows, running.Slice(0, 2*cols-1), y)},
			{"y too short", y.Slice(0, rows*cols-1), call(rows, running, y.Slice(0, rows*cols-1))},
		})
	})
}

// bnForward returns xhat and stats of BatchNormTrain on x, from the
// reference, rounded to float32 as a device stores them.
func bnForward(c bnCase, x, params, running []float32) (xhat, stats []float32) {
	r := RefBatchNormTrain(c.rows, c.cols, bnEps, bnMomentum, x, params, running)
	return float32s(r.Xhat), float32s(r.Stats)
}

func float32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, e := range v {
		out[i] = float32(e)
	}
	return out
}

func testBatchNormGrad(ke *kernelEnv) {
	for i, c := range bnCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x, params, running := c.inputs(i)
			xhat, stats := bnForward(c, x, params, running)
			dy := uniform(newRand("BatchNormGrad", i), c.rows*c.cols, -1, 1)
			out := ke.outputs(imageCall{
				ins: [][]float32{dy, xhat, params, stats, nans(len(dy)), nans(2 * c.cols)},
				call: func(ik device.ImageKernels, b []device.Buffer) error {
					return ik.BatchNormGrad(c.rows, c.cols, b[0], b[1], b[2], b[3], b[4], b[5])
				}})
			wantDx, wantDp := RefBatchNormGrad(c.rows, c.cols, dy, xhat, params, stats)
			_, absDp := RefBatchNormGrad(c.rows, c.cols, absAll(dy), absAll(xhat), params, stats)
			checkSum(ke.t, "dparams", out[5], wantDp, absDp)
			// dx = k·(dy - dbeta/rows - xhat·dgamma/rows): its rounding
			// scales with k times the terms' magnitudes.
			mag := make([]float64, len(wantDx))
			for j := range mag {
				col, n := j%c.cols, float64(c.rows)
				k := math.Abs(float64(params[col]) * float64(stats[c.cols+col]))
				mag[j] = k * (math.Abs(float64(dy[j])) + math.Abs(wantDp[c.cols+col])/n + math.Abs(float64(xhat[j])*wantDp[col])/n)
			}
			checkClose(ke.t, "dx", out[4], wantDx, mag, elemTol)
		})
	}
	for i, c := range []bnCase{{6, 3, 0}, {5, 2, 2}, {2, 2, 0}} {
		ke.run("finite_differences_"+c.String(), func(ke *kernelEnv) { bnFiniteDifferences(ke, c, i) })
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const rows, cols = 4, 3
		m, pc := func() device.Buffer { return ke.upload(make([]float32, rows*cols)) }, func() device.Buffer { return ke.upload(make([]float32, 2*cols)) }
		dy, xhat, params, stats, dx, dparams := m(), m(), pc(), pc(), m(), pc()
		call := func(cols int, xhat, dparams device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error {
				return s.BatchNormGrad(rows, cols, dy, xhat, params, stats, dx, dparams)
			}
		}
		ke.checkMisuse([]misuseCase{
			{"cols=0", dx, call(0, xhat, dparams)},
			{"xhat too short", dx, call(cols, xhat.Slice(0, rows*cols-1), dparams)},
			{"dparams too short", dx, call(cols, xhat, dparams.Slice(0, 2*cols-1))},
		})
	})
}

// bnFiniteDifferences checks BatchNormGrad's dx and dparams against the
// numerical gradient of L = Σ w·y through BatchNormTrain, with dy = w.
func bnFiniteDifferences(ke *kernelEnv, c bnCase, seed int) {
	x, params, running := c.inputs(100 + seed)
	w := uniform(newRand("BatchNormGrad fd", seed), c.rows*c.cols, -1, 1)
	n := c.rows * c.cols
	xb, pb, stats, xhat, y, rb := ke.upload(x), ke.upload(params), ke.upload(nans(2*c.cols)), ke.upload(nans(n)), ke.upload(nans(n)), ke.upload(running)
	ik := ke.s
	ke.must(ik.BatchNormTrain(c.rows, c.cols, bnEps, bnMomentum, xb, pb, stats, xhat, y, rb))
	dx, dparams := ke.upload(nans(n)), ke.upload(nans(2*c.cols))
	ke.must(ik.BatchNormGrad(c.rows, c.cols, ke.upload(w), xhat, pb, stats, dx, dparams))
	gotDx, gotDp := ke.download(dx), ke.download(dparams)
	loss := func(x, params []float32) float64 {
		ke.must(ke.dev.Upload(xb, x))
		ke.must(ke.dev.Upload(pb, params))
		ke.must(ik.BatchNormTrain(c.rows, c.cols, bnEps, bnMomentum, xb, pb, stats, xhat, y, rb))
		return dot(w, ke.download(y))
	}
	checkGrad(ke.t, "dx", gotDx, numericGrad(x, 1e-2, func(xp []float32) float64 { return loss(xp, params) }))
	checkGrad(ke.t, "dparams", gotDp, numericGrad(params, 1e-2, func(pp []float32) float64 { return loss(x, pp) }))
}

// The Random123 known answers for Philox 4x32-10.
var philoxKnownAnswers = []struct {
	ctr, want [4]uint32
	key       [2]uint32
}{
	{[4]uint32{0, 0, 0, 0}, [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}, [2]uint32{0, 0}},
	{[4]uint32{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}, [2]uint32{0xffffffff, 0xffffffff}},
}

func testPhiloxKnownAnswers(t *testing.T) {
	for _, k := range philoxKnownAnswers {
		if got := RefPhilox(k.ctr, k.key); got != k.want {
			t.Errorf("RefPhilox(%#x, %#x) = %#x, want %#x", k.ctr, k.key, got, k.want)
		}
	}
}

// dropoutCall is Dropout on x with the generator state (seed, offset).
func dropoutCall(p float32, seed, offset uint64, x []float32) imageCall {
	return imageCall{ins: [][]float32{RNGState(seed, offset), x, nans(len(x)), nans(len(x))}, call: func(ik device.ImageKernels, b []device.Buffer) error {
		return ik.Dropout(p, b[0], b[1], b[2], b[3])
	}}
}

// checkMask compares a dropout mask and output with the reference: the
// kept elements exactly, the values within elemTol.
func checkMask(t *testing.T, p float32, seed, offset uint64, x, y, mask []float32) {
	t.Helper()
	wantY, wantMask := RefDropout(p, seed, offset, x)
	for i, m := range wantMask {
		if (m == 0) != (mask[i] == 0) {
			t.Fatalf("seed %#x offset %#x: mask[%d] = %g, want %g", seed, offset, i, mask[i], m)
		}
	}
	checkElems(t, "mask", mask, wantMask)
	checkElems(t, "y", y, wantY)
}

func testDropout(ke *kernelEnv) {
	cases := []struct {
		name         string
		n            int
		p            float32
		seed, offset uint64
	}{
		{"n=1", 1, 0.5, 1, 0},
		{"n=1003_p=0.3", 1003, 0.3, 0x0123456789abcdef, 12345},
		{"offset_carries_into_the_high_word", 200, 0.5, 7, 0x1_ffff_fff0},
		{"offset_wraps", 64, 0.5, 7, math.MaxUint64 - 3},
		{"p=0", 37, 0, 42, 9},
		{"p=0.9", 5000, 0.9, 3, 0},
	}
	for i, c := range cases {
		ke.run(c.name, func(ke *kernelEnv) {
			x := uniform(newRand("Dropout", i), c.n, -2, 2)
			out := ke.outputs(dropoutCall(c.p, c.seed, c.offset, x))
			checkSameBits(ke.t, "rng (Dropout does not advance it)", out[0], RNGState(c.seed, c.offset))
			checkMask(ke.t, c.p, c.seed, c.offset, x, out[2], out[3])
			if c.p == 0 {
				checkSameBits(ke.t, "y with p=0", out[2], x)
			}
		})
	}
	// Element k of the first block is word k of Philox({0,0,0,0}, {0,0}):
	// it is kept at p = its top 24 bits·2^-24 and dropped just above.
	ke.run("known_answer", func(ke *kernelEnv) {
		x := ones(4)
		for k, word := range philoxKnownAnswers[0].want {
			u := float32(word>>8) / (1 << 24)
			for _, p := range []float32{u, math.Nextafter32(u, 1)} {
				b := ke.uploadAll(dropoutCall(p, 0, 0, x).ins)
				ke.must(ke.s.Dropout(p, b[0], b[1], b[2], b[3]))
				mask := ke.download(b[3])
				if kept := mask[k] != 0; kept != (p == u) {
					ke.t.Errorf("p = %v: element %d kept = %v, want %v (Philox word %#x)", p, k, kept, p == u, word)
				}
			}
		}
	})
	ke.run("statistics", func(ke *kernelEnv) {
		const n = 1 << 18
		for _, p := range []float32{0.1, 0.5} {
			out := ke.outputs(dropoutCall(p, 2024, 77, ones(n)))
			var kept [4]int
			for i, m := range out[3] {
				if m != 0 {
					kept[i%4]++
				}
			}
			// Each of the four words keeps about 1-p of its n/4
			// elements: within five standard deviations.
			sd := math.Sqrt(float64(p) * float64(1-p) / (n / 4))
			for w, k := range kept {
				if frac := float64(k) / (n / 4); math.Abs(frac-float64(1-p)) > 5*sd {
					ke.t.Errorf("p = %v: word %d keeps %.4f of its elements, want %.4f ± %.4f", p, w, frac, 1-p, 5*sd)
				}
			}
		}
	})
	ke.run("seeds_differ", func(ke *kernelEnv) {
		a := ke.outputs(dropoutCall(0.5, 1, 0, ones(256)))[3]
		b := ke.outputs(dropoutCall(0.5, 2, 0, ones(256)))[3]
		if slices.Equal(a, b) {
			ke.t.Error("seeds 1 and 2 draw the same mask")
		}
	})
	ke.run("fresh_masks_after_AdvanceRNG_and_on_each_replay", func(ke *kernelEnv) { testDropoutSequence(ke) })
	ke.run("misuse", func(ke *kernelEnv) {
		rng, x, y, mask := ke.upload(RNGState(1, 0)), ke.upload(ones(8)), ke.upload(ones(8)), ke.upload(ones(8))
		call := func(p float32, rng, y, mask device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.Dropout(p, rng, x, y, mask) }
		}
		ke.checkMisuse([]misuseCase{
			{"p=1", y, call(1, rng, y, mask)},
			{"p<0", y, call(-0.1, rng, y, mask)},
			{"p NaN", y, call(float32(math.NaN()), rng, y, mask)},
			{"rng too short", y, call(0.5, rng.Slice(0, device.RNGLen-1), y, mask)},
			{"y too short", y.Slice(0, 7), call(0.5, rng, y.Slice(0, 7), mask)},
			{"mask too short", y, call(0.5, rng, y, mask.Slice(0, 7))},
			{"zero rng", y, call(0.5, device.Buffer{}, y, mask)},
		})
	})
}

// testDropoutSequence: a step of Dropout then AdvanceRNG by ceil(n/4),
// run eagerly three times and replayed three times from the same state,
// draws three different masks, the same bits both ways, and each the
// reference mask at the offset the generator held: so a run resumed with
// a saved generator state draws what the uninterrupted run would have.
func testDropoutSequence(ke *kernelEnv) {
	const n, p, seed, offset = 1001, float32(0.5), 99, 0xffff_fff0
	counters := (n + 3) / 4
	x := uniform(newRand("Dropout sequence", 0), n, -1, 1)
	step := func(ik device.ImageKernels, rng, xb, y, mask device.Buffer) error {
		return first(ik.Dropout(p, rng, xb, y, mask), ik.AdvanceRNG(rng, counters))
	}
	masks := func(replayed bool) [][]float32 {
		b := ke.uploadAll([][]float32{RNGState(seed, offset), x, nans(n), nans(n)})
		var out [][]float32
		if replayed {
			ke.must(ke.s.Synchronize())
			ke.must(ke.s.BeginCapture(device.CaptureGlobal))
			err := step(ke.s, b[0], b[1], b[2], b[3])
			g, endErr := ke.s.EndCapture()
			ke.must(err)
			ke.must(endErr)
			exec, err := ke.dev.Instantiate(g)
			ke.must(err)
			defer func() { ke.must(exec.Destroy()); ke.must(g.Destroy()) }()
			for range 3 {
				ke.must(ke.s.Launch(exec))
				out = append(out, ke.download(b[3]), ke.download(b[2]))
			}
		} else {
			for range 3 {
				ke.must(step(ke.s, b[0], b[1], b[2], b[3]))
				out = append(out, ke.download(b[3]), ke.download(b[2]))
			}
		}
		checkSameBits(ke.t, "rng after three steps", ke.download(b[0]), RNGState(seed, offset+3*uint64(counters)))
		return out
	}
	eager, replayed := masks(false), masks(true)
	for i := range eager {
		checkSameBits(ke.t, fmt.Sprintf("output %d replayed", i), replayed[i], eager[i])
	}
	for k := range 3 {
		checkMask(ke.t, p, seed, offset+uint64(k*counters), x, eager[2*k+1], eager[2*k])
		if k > 0 && slices.Equal(eager[2*k], eager[2*k-2]) {
			ke.t.Errorf("step %d draws the mask of step %d", k, k-1)
		}
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

func testAdvanceRNG(ke *kernelEnv) {
	cases := []struct {
		name           string
		offset         uint64
		counters       int
		seed, wantNext uint64
	}{
		{"small", 5, 3, 0xdeadbeef, 8},
		{"carry", 0xffff_ffff, 1, 1, 0x1_0000_0000},
		{"large_step", 0x1_ffff_fff0, 1 << 20, 0xffff_ffff_ffff_ffff, 0x1_ffff_fff0 + 1<<20},
		{"wraps", math.MaxUint64, 2, 0, 1},
	}
	for _, c := range cases {
		ke.run(c.name, func(ke *kernelEnv) {
			out := ke.outputs(imageCall{ins: [][]float32{RNGState(c.seed, c.offset)}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.AdvanceRNG(b[0], c.counters)
			}})
			checkSameBits(ke.t, "rng", out[0], RNGState(c.seed, c.wantNext))
			if got := RNGOffset(out[0]); got != c.wantNext {
				ke.t.Errorf("offset %#x, want %#x", got, c.wantNext)
			}
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		rng := ke.upload(RNGState(1, 2))
		ke.checkMisuse([]misuseCase{
			{"counters=0", rng, func(s device.Stream) error { return s.AdvanceRNG(rng, 0) }},
			{"negative counters", rng, func(s device.Stream) error { return s.AdvanceRNG(rng, -4) }},
			{"rng too short", rng, func(s device.Stream) error { return s.AdvanceRNG(rng.Slice(0, 3), 1) }},
			{"zero rng", rng, func(s device.Stream) error { return s.AdvanceRNG(device.Buffer{}, 1) }},
		})
	})
}

func testMul(ke *kernelEnv) {
	for i, n := range vectorLens {
		ke.run(fmt.Sprintf("n=%d", n), func(ke *kernelEnv) {
			rng := newRand("Mul", i)
			x, y := uniform(rng, n, -2, 2), uniform(rng, n, -2, 2)
			want := make([]float64, n)
			for j := range want {
				want[j] = float64(x[j]) * float64(y[j])
			}
			out := ke.outputs(imageCall{ins: [][]float32{x, y, nans(n)}, call: func(ik device.ImageKernels, b []device.Buffer) error {
				return ik.Mul(b[0], b[1], b[2])
			}})
			checkElems(ke.t, "z", out[2], want)
			for _, into := range []int{0, 1} { // z = x, then z = y
				b := ke.uploadAll([][]float32{x, y})
				ke.must(ke.s.Mul(b[0], b[1], b[into]))
				checkSameBits(ke.t, fmt.Sprintf("z in place of operand %d", into+1), ke.download(b[into]), out[2])
			}
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		x, y, z := ke.upload(ones(5)), ke.upload(ones(5)), ke.upload(ones(5))
		ke.checkMisuse([]misuseCase{
			{"y too short", z, func(s device.Stream) error { return s.Mul(x, y.Slice(0, 4), z) }},
			{"z too short", z.Slice(0, 4), func(s device.Stream) error { return s.Mul(x, y, z.Slice(0, 4)) }},
			{"zero x", z, func(s device.Stream) error { return s.Mul(device.Buffer{}, y, z) }},
		})
	})
}

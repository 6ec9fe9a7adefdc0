package devicetest

import (
	"fmt"
	"math"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// testKernels checks every kernel of device.Kernels against the float64
// references of ref.go on seeded random inputs, runs each case twice to
// check that the same inputs give the same bits, and checks that bad
// arguments fail with ErrMisuse without enqueueing anything.
func testKernels(t *testing.T, open Opener) {
	kernels := []struct {
		name string
		test func(*kernelEnv)
	}{
		{"Gemm", testGemm},
		{"BiasAct", testBiasAct},
		{"ActGrad", testActGrad},
		{"SoftmaxXent", testSoftmaxXent},
		{"SoftmaxXentGrad", testSoftmaxXentGrad},
		{"MSE", testMSE},
		{"MSEGrad", testMSEGrad},
		{"ColSum", testColSum},
		{"Fill", testFill},
		{"Scale", testScale},
		{"Axpy", testAxpy},
		{"ClipGlobalNorm", testClipGlobalNorm},
		{"SGDMomentum", testSGDMomentum},
		{"AdamW", testAdamW},
	}
	for _, k := range kernels {
		t.Run(k.name, func(t *testing.T) { k.test(newKernelEnv(t, open)) })
	}
}

func testGemm(ke *kernelEnv) {
	cases := []struct {
		m, n, k        int
		transA, transB bool
		alpha, beta    float32
	}{
		{m: 4, n: 3, k: 5, alpha: 1, beta: 0},
		{m: 1, n: 7, k: 3, alpha: 0.5, beta: 1},
		{m: 5, n: 1, k: 9, transA: true, alpha: 1, beta: -0.5},
		{m: 6, n: 4, k: 2, transB: true, alpha: -2, beta: 0},
		{m: 3, n: 8, k: 7, transA: true, transB: true, alpha: 1.5, beta: 0.25},
		{m: 130, n: 70, k: 33, transB: true, alpha: 1, beta: 0},
		{m: 64, n: 256, k: 784, alpha: 1, beta: 0},
		{m: 300, n: 128, k: 64, transA: true, alpha: 1, beta: 1},
	}
	for i, c := range cases {
		name := fmt.Sprintf("%dx%dx%d_tA=%v_tB=%v_beta=%g", c.m, c.n, c.k, c.transA, c.transB, c.beta)
		ke.run(name, func(ke *kernelEnv) {
			rng := newRand("Gemm", i)
			a, b := uniform(rng, c.m*c.k, -1, 1), uniform(rng, c.k*c.n, -1, 1)
			cIn := uniform(rng, c.m*c.n, -1, 1)
			if c.beta == 0 {
				cIn = nans(c.m * c.n) // must not be read
			}
			out := checkRepeatable(ke.t, func() [][]float32 {
				cBuf := ke.upload(cIn)
				ke.must(ke.s.Gemm(c.transA, c.transB, c.m, c.n, c.k, c.alpha, ke.upload(a), ke.upload(b), c.beta, cBuf))
				return [][]float32{ke.download(cBuf)}
			})
			want := RefGemm(c.transA, c.transB, c.m, c.n, c.k, c.alpha, a, b, c.beta, cIn)
			mag := RefGemm(c.transA, c.transB, c.m, c.n, c.k, absf(c.alpha), absAll(a), absAll(b), absf(c.beta), absAll(cIn))
			checkClose(ke.t, "C", out[0], want, mag, sumTol)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		a, b, c := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 12)), ke.upload(make([]float32, 8))
		gemm := func(m, n, k int, a, b, c device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.Gemm(false, false, m, n, k, 1, a, b, 0, c) }
		}
		ke.checkMisuse([]misuseCase{
			{"m=0", c, gemm(0, 4, 3, a, b, c)},
			{"k<0", c, gemm(2, 4, -3, a, b, c)},
			{"A too short", c, gemm(2, 4, 3, a.Slice(0, 5), b, c)},
			{"B too short", c, gemm(2, 4, 3, a, b.Slice(1, 11), c)},
			{"C too short", c.Slice(0, 7), gemm(2, 4, 3, a, b, c.Slice(0, 7))},
			{"zero B", c, gemm(2, 4, 3, a, device.Buffer{}, c)},
		})
	})
}

var activations = []device.Activation{device.ActNone, device.ActReLU, device.ActGELU, device.ActTanh}

func testBiasAct(ke *kernelEnv) {
	shapes := [][2]int{{1, 1}, {1, 9}, {5, 3}, {64, 130}}
	for i, sh := range shapes {
		for _, act := range activations {
			rows, cols := sh[0], sh[1]
			ke.run(fmt.Sprintf("%s_%dx%d", act, rows, cols), func(ke *kernelEnv) {
				rng := newRand("BiasAct", i)
				z, bias := uniform(rng, rows*cols, -3, 3), uniform(rng, cols, -1, 1)
				out := checkRepeatable(ke.t, func() [][]float32 {
					zBuf, yBuf := ke.upload(z), ke.upload(nans(rows*cols))
					ke.must(ke.s.BiasAct(act, rows, cols, zBuf, ke.upload(bias), yBuf))
					return [][]float32{ke.download(zBuf), ke.download(yBuf)}
				})
				wantZ, wantY := RefBiasAct(act, rows, cols, z, bias)
				checkElems(ke.t, "z", out[0], wantZ)
				checkElems(ke.t, "y", out[1], wantY)
			})
		}
	}
	ke.run("none_in_place", func(ke *kernelEnv) {
		rng := newRand("BiasAct", -1)
		z, bias := uniform(rng, 12, -1, 1), uniform(rng, 4, -1, 1)
		zBuf := ke.upload(z)
		ke.must(ke.s.BiasAct(device.ActNone, 3, 4, zBuf, ke.upload(bias), zBuf))
		_, want := RefBiasAct(device.ActNone, 3, 4, z, bias)
		checkElems(ke.t, "z", ke.download(zBuf), want)
	})
	ke.run("misuse", func(ke *kernelEnv) {
		z, bias, y := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 3)), ke.upload(make([]float32, 6))
		call := func(act device.Activation, rows int, bias, y device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.BiasAct(act, rows, 3, z, bias, y) }
		}
		ke.checkMisuse([]misuseCase{
			{"unknown activation", y, call(device.ActTanh+1, 2, bias, y)},
			{"rows=0", y, call(device.ActReLU, 0, bias, y)},
			{"bias too short", y, call(device.ActReLU, 2, bias.Slice(0, 2), y)},
			{"y too short", y.Slice(0, 5), call(device.ActReLU, 2, bias, y.Slice(0, 5))},
			{"y aliases z for relu", z, call(device.ActReLU, 2, bias, z)},
			{"y aliases z for gelu", z, call(device.ActGELU, 2, bias, z)},
			{"y aliases z for tanh", z, call(device.ActTanh, 2, bias, z)},
		})
	})
}

func testActGrad(ke *kernelEnv) {
	shapes := [][2]int{{1, 1}, {1, 9}, {5, 3}, {64, 130}}
	for i, sh := range shapes {
		for _, act := range activations {
			rows, cols := sh[0], sh[1]
			ke.run(fmt.Sprintf("%s_%dx%d", act, rows, cols), func(ke *kernelEnv) {
				rng := newRand("ActGrad", i)
				z, dy := uniform(rng, rows*cols, -3, 3), uniform(rng, rows*cols, -1, 1)
				z[0] = 0 // ReLU's derivative at 0 is 0
				out := checkRepeatable(ke.t, func() [][]float32 {
					dz := ke.upload(nans(rows * cols))
					ke.must(ke.s.ActGrad(act, rows, cols, ke.upload(z), ke.upload(dy), dz))
					return [][]float32{ke.download(dz)}
				})
				checkElems(ke.t, "dz", out[0], RefActGrad(act, rows, cols, z, dy))
			})
		}
	}
	ke.run("gelu_in_place", func(ke *kernelEnv) {
		rng := newRand("ActGrad", -1)
		z, dy := uniform(rng, 12, -3, 3), uniform(rng, 12, -1, 1)
		dyBuf := ke.upload(dy)
		ke.must(ke.s.ActGrad(device.ActGELU, 4, 3, ke.upload(z), dyBuf, dyBuf))
		checkElems(ke.t, "dy", ke.download(dyBuf), RefActGrad(device.ActGELU, 4, 3, z, dy))
	})
	ke.run("misuse", func(ke *kernelEnv) {
		z, dy, dz := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 6)), ke.upload(make([]float32, 6))
		ke.checkMisuse([]misuseCase{
			{"unknown activation", dz, func(s device.Stream) error { return s.ActGrad(-1, 2, 3, z, dy, dz) }},
			{"activation past tanh", dz, func(s device.Stream) error { return s.ActGrad(device.ActTanh+1, 2, 3, z, dy, dz) }},
			{"cols=0", dz, func(s device.Stream) error { return s.ActGrad(device.ActReLU, 2, 0, z, dy, dz) }},
			{"z too short", dz, func(s device.Stream) error { return s.ActGrad(device.ActReLU, 2, 3, z.Slice(0, 5), dy, dz) }},
			{"dz too short", dz.Slice(0, 5), func(s device.Stream) error { return s.ActGrad(device.ActReLU, 2, 3, z, dy, dz.Slice(0, 5)) }},
		})
	})
}

// lossCase is a batch for the loss kernels: its mask pads the last pad rows.
type lossCase struct {
	name            string
	rows, cols, pad int
}

var lossCases = []lossCase{
	{"one_row", 1, 10, 0},
	{"one_class", 4, 1, 0},
	{"batch", 64, 10, 0},
	{"padded", 9, 7, 4},
	{"all_padding", 5, 3, 5},
}

// tiedLogits returns random logits in which every third row has its maximum
// twice; rows with a tie are labelled with the later of the two maxima on
// odd rows, which arg-max (first maximum) must then count as wrong.
func tiedLogits(c lossCase, seed int) (logits, labels []float32) {
	rng := newRand("logits", seed)
	logits, labels = uniform(rng, c.rows*c.cols, -4, 4), classLabels(rng, c.rows, c.cols)
	for r := 0; r < c.rows && c.cols > 1; r += 3 {
		x := logits[r*c.cols : (r+1)*c.cols]
		i := rng.IntN(c.cols - 1)
		j := i + 1 + rng.IntN(c.cols-1-i)
		x[i], x[j] = 5, 5
		labels[r] = float32(i)
		if r%2 == 1 {
			labels[r] = float32(j)
		}
	}
	// Padding rows carry labels that are not class indices: a kernel must
	// skip them, not read out of bounds.
	for r := c.rows - c.pad; r < c.rows; r++ {
		labels[r] = float32(c.cols + r)
		if r%2 == 0 {
			labels[r] = -1
		}
	}
	return logits, labels
}

// initialStats holds earlier sums, so the kernels must accumulate, and one
// element past StatsLen that they must not touch.
var initialStats = []float32{1.5, 2, 3, 42}

func checkStats(t *testing.T, got []float32, want [device.StatsLen]float64) {
	t.Helper()
	w := append(want[:], float64(initialStats[device.StatsLen]))
	mag := make([]float64, len(w))
	for i := range w {
		mag[i] = math.Max(math.Abs(w[i]), 1)
	}
	checkClose(t, "stats", got, w, mag, sumTol)
}

func testSoftmaxXent(ke *kernelEnv) {
	for i, c := range lossCases {
		ke.run(c.name, func(ke *kernelEnv) {
			logits, labels := tiedLogits(c, i)
			mask := maskTail(c.rows, c.pad)
			out := checkRepeatable(ke.t, func() [][]float32 {
				probs, stats := ke.upload(nans(c.rows*c.cols)), ke.upload(initialStats)
				ke.must(ke.s.SoftmaxXent(c.rows, c.cols, ke.upload(logits), ke.upload(labels), ke.upload(mask), probs, stats))
				return [][]float32{ke.download(probs), ke.download(stats)}
			})
			probs, stats := RefSoftmaxXent(c.rows, c.cols, logits, labels, mask, initialStats)
			checkElems(ke.t, "probs", out[0], probs)
			checkStats(ke.t, out[1], stats)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		x, lab, mask := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 2)), ke.upload([]float32{1, 1})
		probs, stats := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 3))
		call := func(rows int, lab, mask, probs, stats device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.SoftmaxXent(rows, 3, x, lab, mask, probs, stats) }
		}
		ke.checkMisuse([]misuseCase{
			{"rows=0", probs, call(0, lab, mask, probs, stats)},
			{"labels too short", probs, call(2, lab.Slice(0, 1), mask, probs, stats)},
			{"mask too short", probs, call(2, lab, mask.Slice(0, 1), probs, stats)},
			{"probs too short", probs.Slice(0, 5), call(2, lab, mask, probs.Slice(0, 5), stats)},
			{"stats too short", stats.Slice(0, 2), call(2, lab, mask, probs, stats.Slice(0, 2))},
			{"zero stats", probs, call(2, lab, mask, probs, device.Buffer{})},
		})
	})
}

func testSoftmaxXentGrad(ke *kernelEnv) {
	for i, c := range lossCases {
		ke.run(c.name, func(ke *kernelEnv) {
			logits, labels := tiedLogits(c, i)
			mask := maskTail(c.rows, c.pad)
			p, _ := RefSoftmaxXent(c.rows, c.cols, logits, labels, mask, initialStats)
			probs := make([]float32, len(p))
			for j, v := range p {
				probs[j] = float32(v)
			}
			out := checkRepeatable(ke.t, func() [][]float32 {
				d := ke.upload(nans(c.rows * c.cols))
				ke.must(ke.s.SoftmaxXentGrad(c.rows, c.cols, ke.upload(probs), ke.upload(labels), ke.upload(mask), d))
				return [][]float32{ke.download(d)}
			})
			checkElems(ke.t, "dlogits", out[0], RefSoftmaxXentGrad(c.rows, c.cols, probs, labels, mask))
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		p, lab, mask, d := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 2)), ke.upload([]float32{1, 1}), ke.upload(make([]float32, 6))
		call := func(cols int, lab, d device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.SoftmaxXentGrad(2, cols, p, lab, mask, d) }
		}
		ke.checkMisuse([]misuseCase{
			{"cols=0", d, call(0, lab, d)},
			{"labels too short", d, call(3, lab.Slice(1, 1), d)},
			{"dlogits too short", d.Slice(0, 5), call(3, lab, d.Slice(0, 5))},
		})
	})
}

// regressionBatch returns predictions and targets for the MSE kernels.
func regressionBatch(c lossCase, seed int) (pred, target, mask []float32) {
	rng := newRand("regression", seed)
	return uniform(rng, c.rows*c.cols, -2, 2), uniform(rng, c.rows*c.cols, -2, 2), maskTail(c.rows, c.pad)
}

func testMSE(ke *kernelEnv) {
	for i, c := range lossCases {
		ke.run(c.name, func(ke *kernelEnv) {
			pred, target, mask := regressionBatch(c, i)
			out := checkRepeatable(ke.t, func() [][]float32 {
				stats := ke.upload(initialStats)
				ke.must(ke.s.MSE(c.rows, c.cols, ke.upload(pred), ke.upload(target), ke.upload(mask), stats))
				return [][]float32{ke.download(stats)}
			})
			checkStats(ke.t, out[0], RefMSE(c.rows, c.cols, pred, target, mask, initialStats))
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		p, tg, mask, stats := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 6)), ke.upload([]float32{1, 1}), ke.upload(make([]float32, 3))
		call := func(tg, mask, stats device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.MSE(2, 3, p, tg, mask, stats) }
		}
		ke.checkMisuse([]misuseCase{
			{"target too short", stats, call(tg.Slice(0, 5), mask, stats)},
			{"mask too short", stats, call(tg, mask.Slice(0, 1), stats)},
			{"stats too short", stats.Slice(0, 2), call(tg, mask, stats.Slice(0, 2))},
		})
	})
}

func testMSEGrad(ke *kernelEnv) {
	for i, c := range lossCases {
		ke.run(c.name, func(ke *kernelEnv) {
			pred, target, mask := regressionBatch(c, i)
			out := checkRepeatable(ke.t, func() [][]float32 {
				d := ke.upload(nans(c.rows * c.cols))
				ke.must(ke.s.MSEGrad(c.rows, c.cols, ke.upload(pred), ke.upload(target), ke.upload(mask), d))
				return [][]float32{ke.download(d)}
			})
			checkElems(ke.t, "dpred", out[0], RefMSEGrad(c.rows, c.cols, pred, target, mask))
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		p, tg, mask, d := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 6)), ke.upload([]float32{1, 1}), ke.upload(make([]float32, 6))
		call := func(rows int, tg, mask, d device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.MSEGrad(rows, 3, p, tg, mask, d) }
		}
		ke.checkMisuse([]misuseCase{
			{"rows<0", d, call(-2, tg, mask, d)},
			{"target too short", d, call(2, tg.Slice(0, 3), mask, d)},
			{"mask too short", d, call(2, tg, mask.Slice(0, 1), d)},
			{"dpred too short", d.Slice(0, 5), call(2, tg, mask, d.Slice(0, 5))},
		})
	})
}

func testColSum(ke *kernelEnv) {
	cases := []struct {
		rows, cols int
		beta       float32
	}{
		{1, 1, 0}, {1, 9, 1}, {5, 3, 0.5}, {7, 64, 0}, {200, 130, -1},
	}
	for i, c := range cases {
		ke.run(fmt.Sprintf("%dx%d_beta=%g", c.rows, c.cols, c.beta), func(ke *kernelEnv) {
			rng := newRand("ColSum", i)
			x, outIn := uniform(rng, c.rows*c.cols, -1, 1), uniform(rng, c.cols, -1, 1)
			if c.beta == 0 {
				outIn = nans(c.cols) // must not be read
			}
			out := checkRepeatable(ke.t, func() [][]float32 {
				o := ke.upload(outIn)
				ke.must(ke.s.ColSum(c.rows, c.cols, ke.upload(x), c.beta, o))
				return [][]float32{ke.download(o)}
			})
			want := RefColSum(c.rows, c.cols, x, c.beta, outIn)
			mag := RefColSum(c.rows, c.cols, absAll(x), absf(c.beta), absAll(outIn))
			checkClose(ke.t, "out", out[0], want, mag, sumTol)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		x, o := ke.upload(make([]float32, 6)), ke.upload(make([]float32, 3))
		ke.checkMisuse([]misuseCase{
			{"cols=0", o, func(s device.Stream) error { return s.ColSum(2, 0, x, 0, o) }},
			{"x too short", o, func(s device.Stream) error { return s.ColSum(3, 3, x, 0, o) }},
			{"out too short", o.Slice(0, 2), func(s device.Stream) error { return s.ColSum(2, 3, x, 0, o.Slice(0, 2)) }},
		})
	})
}

var vectorLens = []int{1, 7, 1000}

func testFill(ke *kernelEnv) {
	for _, n := range vectorLens {
		for _, v := range []float32{0, -2.5, float32(math.Inf(1))} {
			ke.run(fmt.Sprintf("n=%d_v=%g", n, v), func(ke *kernelEnv) {
				x := ke.upload(nans(n))
				ke.must(ke.s.Fill(x, v))
				want := make([]float32, n)
				fill32(want, v)
				checkSameBits(ke.t, "x", ke.download(x), want)
			})
		}
	}
	ke.run("misuse", func(ke *kernelEnv) {
		ke.checkMisuse([]misuseCase{
			{"zero buffer", device.Buffer{}, func(s device.Stream) error { return s.Fill(device.Buffer{}, 1) }},
		})
	})
}

func testScale(ke *kernelEnv) {
	for i, n := range vectorLens {
		for _, alpha := range []float32{0.5, -3, 0} {
			ke.run(fmt.Sprintf("n=%d_alpha=%g", n, alpha), func(ke *kernelEnv) {
				x := uniform(newRand("Scale", i), n, -1, 1)
				out := checkRepeatable(ke.t, func() [][]float32 {
					b := ke.upload(x)
					ke.must(ke.s.Scale(b, alpha))
					return [][]float32{ke.download(b)}
				})
				checkElems(ke.t, "x", out[0], RefScale(x, alpha))
			})
		}
	}
	ke.run("misuse", func(ke *kernelEnv) {
		ke.checkMisuse([]misuseCase{
			{"zero buffer", device.Buffer{}, func(s device.Stream) error { return s.Scale(device.Buffer{}, 2) }},
		})
	})
}

func testAxpy(ke *kernelEnv) {
	for i, n := range vectorLens {
		for _, alpha := range []float32{1, -0.25} {
			ke.run(fmt.Sprintf("n=%d_alpha=%g", n, alpha), func(ke *kernelEnv) {
				rng := newRand("Axpy", i)
				x, y := uniform(rng, n, -1, 1), uniform(rng, n, -1, 1)
				out := checkRepeatable(ke.t, func() [][]float32 {
					yb := ke.upload(y)
					ke.must(ke.s.Axpy(alpha, ke.upload(x), yb))
					return [][]float32{ke.download(yb)}
				})
				checkElems(ke.t, "y", out[0], RefAxpy(alpha, x, y))
			})
		}
	}
	ke.run("misuse", func(ke *kernelEnv) {
		x, y := ke.upload(make([]float32, 4)), ke.upload(make([]float32, 5))
		ke.checkMisuse([]misuseCase{
			{"lengths differ", y, func(s device.Stream) error { return s.Axpy(1, x, y) }},
			{"zero x", y, func(s device.Stream) error { return s.Axpy(1, device.Buffer{}, y) }},
		})
	})
}

func testClipGlobalNorm(ke *kernelEnv) {
	cases := []struct {
		name string
		n    int
		// maxNorm as a multiple of the norm, or of 1 for a zero vector.
		ratio float32
		zero  bool
	}{
		{"one_clipped", 1, 0.5, false},
		{"clipped", 1000, 0.25, false},
		{"below_threshold", 1000, 2, false},
		{"odd_length_clipped", 37, 0.9, false},
		{"zero_vector", 10, 1, true},
	}
	for i, c := range cases {
		ke.run(c.name, func(ke *kernelEnv) {
			x := uniform(newRand("ClipGlobalNorm", i), c.n, -1, 1)
			if c.zero {
				x = make([]float32, c.n)
			}
			_, norm := RefClipGlobalNorm(x, 0)
			maxNorm := c.ratio * float32(norm)
			if c.zero {
				maxNorm = c.ratio
			}
			out := checkRepeatable(ke.t, func() [][]float32 {
				xb, nb := ke.upload(x), ke.upload([]float32{-1, 7})
				ke.must(ke.s.ClipGlobalNorm(xb, maxNorm, nb))
				return [][]float32{ke.download(xb), ke.download(nb)}
			})
			clipped, norm := RefClipGlobalNorm(x, maxNorm)
			checkElems(ke.t, "x", out[0], clipped)
			checkClose(ke.t, "norm", out[1], []float64{norm, 7}, []float64{math.Max(norm, 1), 1}, sumTol)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		x, norm := ke.upload([]float32{3, 4}), ke.upload([]float32{0})
		ke.checkMisuse([]misuseCase{
			{"zero norm", x, func(s device.Stream) error { return s.ClipGlobalNorm(x, 1, device.Buffer{}) }},
			{"zero x", norm, func(s device.Stream) error { return s.ClipGlobalNorm(device.Buffer{}, 1, norm) }},
		})
	})
}

// hyperParams holds the learning rate and AdamW's bias corrections at step
// 3, followed by an element the optimizers must ignore.
var hyperParams = []float32{0.05, 1 - 0.9*0.9*0.9, 1 - 0.999*0.999*0.999, float32(math.NaN())}

func testSGDMomentum(ke *kernelEnv) {
	for i, n := range vectorLens {
		for _, nesterov := range []bool{false, true} {
			for _, wd := range []float32{0, 0.01} {
				ke.run(fmt.Sprintf("n=%d_nesterov=%v_wd=%g", n, nesterov, wd), func(ke *kernelEnv) {
					rng := newRand("SGDMomentum", i)
					p, g, vel := uniform(rng, n, -1, 1), uniform(rng, n, -1, 1), uniform(rng, n, -1, 1)
					out := checkRepeatable(ke.t, func() [][]float32 {
						pb, vb := ke.upload(p), ke.upload(vel)
						ke.must(ke.s.SGDMomentum(pb, ke.upload(g), vb, ke.upload(hyperParams), 0.9, wd, nesterov))
						return [][]float32{ke.download(pb), ke.download(vb)}
					})
					wantP, wantVel := RefSGDMomentum(p, g, vel, hyperParams, 0.9, wd, nesterov)
					checkElems(ke.t, "p", out[0], wantP)
					checkElems(ke.t, "vel", out[1], wantVel)
				})
			}
		}
	}
	ke.run("misuse", func(ke *kernelEnv) {
		p, g, vel, hyper := ke.upload(make([]float32, 4)), ke.upload(make([]float32, 4)), ke.upload(make([]float32, 4)), ke.upload(hyperParams)
		sgd := func(g, vel, hyper device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.SGDMomentum(p, g, vel, hyper, 0.9, 0, false) }
		}
		ke.checkMisuse([]misuseCase{
			{"gradient length differs", p, sgd(g.Slice(0, 3), vel, hyper)},
			{"velocity length differs", p, sgd(g, vel.Slice(0, 3), hyper)},
			{"hyper too short", p, sgd(g, vel, hyper.Slice(0, device.HyperLen-1))},
			{"zero velocity", p, sgd(g, device.Buffer{}, hyper)},
		})
	})
}

func testAdamW(ke *kernelEnv) {
	for i, n := range vectorLens {
		for _, wd := range []float32{0, 0.01} {
			ke.run(fmt.Sprintf("n=%d_wd=%g", n, wd), func(ke *kernelEnv) {
				rng := newRand("AdamW", i)
				p, g, m := uniform(rng, n, -1, 1), uniform(rng, n, -1, 1), uniform(rng, n, -0.1, 0.1)
				v := uniform(rng, n, 0, 0.01)
				out := checkRepeatable(ke.t, func() [][]float32 {
					pb, mb, vb := ke.upload(p), ke.upload(m), ke.upload(v)
					ke.must(ke.s.AdamW(pb, ke.upload(g), mb, vb, ke.upload(hyperParams), 0.9, 0.999, 1e-8, wd))
					return [][]float32{ke.download(pb), ke.download(mb), ke.download(vb)}
				})
				wantP, wantM, wantV := RefAdamW(p, g, m, v, hyperParams, 0.9, 0.999, 1e-8, wd)
				checkElems(ke.t, "p", out[0], wantP)
				checkElems(ke.t, "m", out[1], wantM)
				checkClose(ke.t, "v", out[2], wantV, wantV, elemTol) // v is tiny and never cancels
			})
		}
	}
	ke.run("misuse", func(ke *kernelEnv) {
		p, g, m, v, hyper := ke.upload(make([]float32, 4)), ke.upload(make([]float32, 4)), ke.upload(make([]float32, 4)), ke.upload(make([]float32, 4)), ke.upload(hyperParams)
		adam := func(m, v, hyper device.Buffer) func(device.Stream) error {
			return func(s device.Stream) error { return s.AdamW(p, g, m, v, hyper, 0.9, 0.999, 1e-8, 0) }
		}
		ke.checkMisuse([]misuseCase{
			{"first moment length differs", p, adam(m.Slice(1, 3), v, hyper)},
			{"second moment length differs", p, adam(m, ke.upload(make([]float32, 5)), hyper)},
			{"hyper too short", p, adam(m, v, hyper.Slice(0, 1))},
			{"zero first moment", p, adam(device.Buffer{}, v, hyper)},
		})
	})
}

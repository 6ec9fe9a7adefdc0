package cpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/devicetest"
)

// These tests call the kernel functions directly. The conformance suite
// (devicetest) checks the same math through the device; here are the
// properties it cannot see: exact bits, aliasing, and edge cases that the
// contract leaves to this backend.

func randSlice(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 2*rng.Float32() - 1
	}
	return v
}

// near fails when |got-want| > tol*max(|want|, 1) for some element.
func near(t *testing.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	for i, w := range want {
		if math.IsNaN(w) != math.IsNaN(float64(got[i])) || math.Abs(float64(got[i])-w) > tol*math.Max(math.Abs(w), 1) {
			t.Fatalf("%s[%d] = %g, want %g", name, i, got[i], w)
		}
	}
}

func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %g, want %g bit for bit", name, i, got[i], want[i])
		}
	}
}

// withTeam runs f with a team of the given thread count, as a stream
// goroutine of a device with that many threads would.
func withTeam(threads int, f func(t *team)) {
	h := startHelpers(threads)
	defer h.stop()
	f(&team{h: h})
}

// gemm runs the device's GEMM on one thread.
func gemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	newGemmTask(transA, transB, m, n, k, alpha, a, b, beta, c).run(nil)
}

// gemmShapes are benchShapes and shapes that reach every way of splitting a
// product: by rows and by columns, transposed or not, dimensions that are
// not multiples of gemmAlign, and splits that leave a part empty.
var gemmShapes = slices.Concat(benchShapes, []gemmShape{
	{m: 3, k: 5, n: 4, transA: true, transB: true},
	{m: 130, k: 33, n: 70, transA: true, transB: true},
	{m: 70, k: 33, n: 130, transA: true, transB: true},
	{m: 70, k: 300, n: 130, transB: true},
	{m: 130, k: 300, n: 70, transA: true},
	{m: 17, k: 1000, n: 33},
	{m: 8, k: 16, n: 2, transB: true},
	{m: 2, k: 8, n: 16, transA: true},
	{m: 1, k: 300, n: 3, transB: true},
	// Products that run in packed blocks (gemmTask.packs): several
	// k-blocks and row blocks, with rows and columns left over.
	{m: 518, k: 530, n: 1030},
	{m: 22, k: 300, n: 1037, transA: true},
	{m: 36, k: 270, n: 1040, transB: true}, // panels straight from B
	{m: 38, k: 270, n: 1040, transB: true}, // rows left over: through bt
	{m: 1030, k: 300, n: 80, transA: true}, // packs A too
	// Narrow products (the output layer's), in 8-row tiles and the rows
	// left over.
	{m: 256, k: 128, n: 10},
	{m: 131, k: 64, n: 10, transA: true},
	{m: 262, k: 128, n: 10, transA: true}, // split (minSplitWork), rows left over
	{m: 70, k: 300, n: 17, transB: true},
	// Products that run in bands of rows (gemmTask.bands), transposed B
	// packed before the split by rows, with rows left over.
	{m: 1100, k: 70, n: 100},
	{m: 1030, k: 70, n: 100, transB: true},
	// Long sums with a transposed A that run as Cᵀ (transposedProduct):
	// k-blocks, columns and rows of Cᵀ left over.
	{m: 100, k: 4500, n: 19, transA: true},
	{m: 70, k: 4200, n: 64, transA: true},
})

// TestGemmAgainstNaive checks that the device's GEMM, split across 1 to 3
// threads, gives the plain loop's bits for every transpose and beta: so
// neither the path, nor the split, nor an element's place in its tile
// changes a result.
func TestGemmAgainstNaive(t *testing.T) {
	for i, s := range gemmShapes {
		t.Run(s.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			a, b, c := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), randSlice(rng, s.m*s.n)
			for _, beta := range []float32{0, 1, -0.5} {
				want := append([]float32(nil), c...)
				gemmLoop(s.transA, s.transB, s.m, s.n, s.k, 1, a, b, beta, want)
				for threads := 1; threads <= 3; threads++ {
					for _, v := range tileVariants() {
						got := append([]float32(nil), c...)
						withTeam(threads, func(tm *team) {
							g := newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, a, b, beta, got)
							g.tile, g.narrow = v.tile, v.narrow
							g.run(tm)
						})
						sameBits(t, fmt.Sprintf("beta %g, %d threads, tiles %+v: C", beta, threads, v), got, want)
					}
				}
			}
		})
	}
}

// TestGemmSplitsOnlyWherePaysOff: a product under minSplitWork runs in
// one part whatever the threads (the output layer's at batch 64); one at
// or above it splits, so TestGemmAgainstNaive checks split products of
// every path too.
func TestGemmSplitsOnlyWherePaysOff(t *testing.T) {
	for _, c := range []struct {
		s     gemmShape
		split bool
	}{
		{gemmShape{m: 64, k: 128, n: 10}, false},
		{gemmShape{m: 128, k: 64, n: 10, transA: true}, false},
		{gemmShape{m: 64, k: 10, n: 128, transB: true}, false},
		{gemmShape{m: 128, k: 128, n: 10}, false},
		{gemmShape{m: 256, k: 128, n: 10}, true},
		{gemmShape{m: 262, k: 128, n: 10, transA: true}, true},
		{gemmShape{m: 64, k: 64, n: 64}, true},
		{gemmShape{m: 64, k: 784, n: 256}, true},
	} {
		withTeam(2, func(tm *team) {
			g := newGemmTask(c.s.transA, c.s.transB, c.s.m, c.s.n, c.s.k, 1, nil, nil, 0, nil)
			if parts := g.parts(tm); (parts > 1) != c.split {
				t.Errorf("%s (%d multiply-adds) on 2 threads: %d parts; want split %v (from %d)", c.s, c.s.m*c.s.n*c.s.k, parts, c.split, minSplitWork)
			}
		})
	}
	var split int
	for _, s := range gemmShapes {
		withTeam(3, func(tm *team) {
			if newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, nil, nil, 0, nil).parts(tm) > 1 {
				split++
			}
		})
	}
	if split < len(gemmShapes)/2 {
		t.Errorf("only %d of the %d shapes of gemmShapes split on 3 threads", split, len(gemmShapes))
	}
}

// TestGemmShapesReachPaths checks that gemmShapes reach the paths chosen by
// shape, so that TestGemmAgainstNaive checks their bits.
func TestGemmShapesReachPaths(t *testing.T) {
	if !haveWideKernel() {
		t.Skip("the transposed product needs the AVX-512 tiles")
	}
	paths := map[string]func(g *gemmTask) bool{
		"bands":               func(g *gemmTask) bool { return !g.transB && g.bands() },
		"bands, transposed B": func(g *gemmTask) bool { return g.transB && g.byRows },
		"transposed product":  func(g *gemmTask) bool { return g.ct != nil },
		"packed blocks":       func(g *gemmTask) bool { return g.packs(g.m) },
		"split by columns":    func(g *gemmTask) bool { return !g.byRows && g.ct == nil },
	}
	for name, reached := range paths {
		if !slices.ContainsFunc(gemmShapes, func(s gemmShape) bool {
			return reached(newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, nil, nil, 0, nil))
		}) {
			t.Errorf("no shape of gemmShapes runs in %s", name)
		}
	}
}

// tileVariant is a choice of tiles: their width, and whether 16-wide ones
// run 8 rows at a time in AVX-512.
type tileVariant struct {
	tile   int
	narrow bool
}

// tileVariants are the tiles this machine's kernels run: 16 wide in AVX,
// and with AVX-512 32 wide, and 16 wide in 8-row AVX-512 tiles.
func tileVariants() []tileVariant {
	if haveWideKernel() {
		return []tileVariant{{16, false}, {16, true}, {32, false}}
	}
	return []tileVariant{{16, false}}
}

// TestGemmDeterministic checks that a product split across the same number
// of threads gives the same bits every time, whichever thread runs which
// part: replay must equal eager.
func TestGemmDeterministic(t *testing.T) {
	for _, s := range benchShapes {
		rng := rand.New(rand.NewPCG(5, 5))
		a, b := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
		for threads := 1; threads <= 3; threads++ {
			var first []float32
			withTeam(threads, func(tm *team) {
				for range 20 {
					c := make([]float32, s.m*s.n)
					newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, a, b, 0, c).run(tm)
					if first == nil {
						first = c
					}
					sameBits(t, s.String(), c, first)
				}
			})
		}
	}
}

// TestGemmIgnoresAlignment checks that the same operands at every offset
// modulo the SIMD width give the same bits: reduction order must not
// depend on where a buffer happens to start.
func TestGemmIgnoresAlignment(t *testing.T) {
	for _, s := range []gemmShape{{m: 5, k: 37, n: 9, transB: true}, {m: 64, k: 256, n: 130, transB: true}, {m: 70, k: 64, n: 130, transA: true}} {
		rng := rand.New(rand.NewPCG(7, 7))
		a, b := randSlice(rng, s.m*s.k), randSlice(rng, s.n*s.k)
		var first []float32
		for off := range 16 {
			ab, bb := make([]float32, off+s.m*s.k), make([]float32, off+s.n*s.k)
			copy(ab[off:], a)
			copy(bb[off:], b)
			c := make([]float32, s.m*s.n)
			gemm(s.transA, s.transB, s.m, s.n, s.k, 1, ab[off:], bb[off:], 0, c)
			if off == 0 {
				first = c
			}
			sameBits(t, s.String(), c, first)
		}
	}
}

func TestGemmBetaZeroIgnoresGarbage(t *testing.T) {
	c := []float32{float32(math.NaN()), float32(math.Inf(1))}
	gemm(false, false, 1, 2, 1, 1, []float32{2}, []float32{3, 4}, 0, c)
	sameBits(t, "C", c, []float32{6, 8})
}

func TestElementwiseAgainstRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const rows, cols = 6, 11
	z, bias, dy := randSlice(rng, rows*cols), randSlice(rng, cols), randSlice(rng, rows*cols)
	for _, act := range []device.Activation{device.ActNone, device.ActReLU, device.ActGELU, device.ActTanh} {
		zz, y := append([]float32(nil), z...), make([]float32, rows*cols)
		biasAct(act, rows, cols, zz, bias, y)
		wantZ, wantY := devicetest.RefBiasAct(act, rows, cols, z, bias)
		near(t, act.String()+" z", zz, wantZ, 1e-6)
		near(t, act.String()+" y", y, wantY, 1e-6)

		dz := make([]float32, rows*cols)
		actGrad(act, rows, cols, z, dy, dz)
		near(t, act.String()+" dz", dz, devicetest.RefActGrad(act, rows, cols, z, dy), 1e-6)
	}
	x, yv := randSlice(rng, 100), randSlice(rng, 100)
	want := devicetest.RefAxpy(-0.5, x, yv)
	axpy(-0.5, x, yv)
	near(t, "axpy", yv, want, 1e-6)
}

// TestReLUGradDropsInactiveNaN pins the choice documented at actGrad.
func TestReLUGradDropsInactiveNaN(t *testing.T) {
	dz := make([]float32, 3)
	actGrad(device.ActReLU, 1, 3, []float32{-1, 0, 2}, []float32{float32(math.NaN()), 5, 7}, dz)
	sameBits(t, "dz", dz, []float32{0, 0, 7})
}

func TestSoftmaxXentAgainstRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	const rows, cols = 9, 5
	logits := randSlice(rng, rows*cols)
	labels, mask := make([]float32, rows), make([]float32, rows)
	for r := range labels {
		labels[r], mask[r] = float32(rng.IntN(cols)), float32(r%3%2) // rows 1, 4, 7 valid
	}
	// A padding row's label is never read.
	labels[0] = -3
	stats := []float32{0.5, 1, 2, 99}
	probs := make([]float32, rows*cols)
	wantP, wantS := devicetest.RefSoftmaxXent(rows, cols, logits, labels, mask, stats)
	softmaxXent(rows, cols, logits, labels, mask, probs, stats)
	near(t, "probs", probs, wantP, 1e-6)
	near(t, "stats", stats, append(wantS[:], 99), 1e-6)

	d := make([]float32, rows*cols)
	softmaxXentGrad(rows, cols, probs, labels, mask, d)
	near(t, "dlogits", d, devicetest.RefSoftmaxXentGrad(rows, cols, probs, labels, mask), 1e-6)
}

// TestSoftmaxXentBadLabel pins the choice documented at softmaxXent: a
// counted row whose label is no class index poisons the loss and its
// gradient row.
func TestSoftmaxXentBadLabel(t *testing.T) {
	for _, label := range []float32{-1, 3, 1.5, float32(math.NaN())} {
		stats := make([]float32, device.StatsLen)
		probs, d := make([]float32, 3), make([]float32, 3)
		softmaxXent(1, 3, []float32{1, 2, 3}, []float32{label}, []float32{1}, probs, stats)
		if !math.IsNaN(float64(stats[device.StatLossSum])) || stats[device.StatCorrect] != 0 || stats[device.StatCount] != 1 {
			t.Errorf("label %g: stats = %v, want [NaN 0 1]", label, stats)
		}
		softmaxXentGrad(1, 3, probs, []float32{label}, []float32{1}, d)
		for j, v := range d {
			if !math.IsNaN(float64(v)) {
				t.Errorf("label %g: dlogits[%d] = %g, want NaN", label, j, v)
			}
		}
	}
}

// TestSoftmaxXentGradGoesOnAfterABadLabel: a row with an invalid label
// gets NaNs, and the rows after it still get their gradient.
func TestSoftmaxXentGradGoesOnAfterABadLabel(t *testing.T) {
	labels, mask := []float32{-1, 2}, []float32{1, 1}
	probs, stats := make([]float32, 6), make([]float32, device.StatsLen)
	softmaxXent(2, 3, []float32{1, 2, 3, 3, 1, 2}, labels, mask, probs, stats)
	d := []float32{7, 7, 7, 7, 7, 7}
	softmaxXentGrad(2, 3, probs, labels, mask, d)
	for j, v := range d[:3] {
		if !math.IsNaN(float64(v)) {
			t.Errorf("dlogits[0][%d] = %g, want NaN for the invalid label", j, v)
		}
	}
	near(t, "dlogits of the row after the invalid label", d[3:], devicetest.RefSoftmaxXentGrad(2, 3, probs, labels, mask)[3:], 1e-6)
}

// TestSoftmaxXentInPlace checks that probs may alias logits, and that large
// logits neither overflow nor lose the loss.
func TestSoftmaxXentInPlace(t *testing.T) {
	x := []float32{1000, 999, 1000}
	stats := make([]float32, device.StatsLen)
	softmaxXent(1, 3, x, []float32{2}, []float32{1}, x, stats)
	e := math.Exp(-1)
	near(t, "probs", x, []float64{1 / (2 + e), e / (2 + e), 1 / (2 + e)}, 1e-6)
	// Label 2 ties with the first maximum at 0, which wins.
	near(t, "stats", stats, []float64{math.Log(2 + e), 0, 1}, 1e-6)
}

func TestMSEAgainstRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	const rows, cols = 7, 3
	pred, target := randSlice(rng, rows*cols), randSlice(rng, rows*cols)
	mask := []float32{1, 1, 0, 1, 1, 0, 0}
	stats := []float32{1, 0, 1}
	want := devicetest.RefMSE(rows, cols, pred, target, mask, stats)
	mse(rows, cols, pred, target, mask, stats)
	near(t, "stats", stats, want[:], 1e-6)

	d := make([]float32, rows*cols)
	mseGrad(rows, cols, pred, target, mask, d)
	near(t, "dpred", d, devicetest.RefMSEGrad(rows, cols, pred, target, mask), 1e-6)
}

func TestColSumAgainstRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	const rows, cols = 13, 2*colBlock + 5
	x, out := randSlice(rng, rows*cols), randSlice(rng, cols)
	want := devicetest.RefColSum(rows, cols, x, 0.5, out)
	colSum(rows, cols, 0, cols, x, 0.5, out)
	near(t, "out", out, want, 1e-6)

	fill(out, float32(math.NaN()))
	colSum(rows, cols, 0, cols, x, 0, out)
	near(t, "out with beta 0", out, devicetest.RefColSum(rows, cols, x, 0, nil), 1e-6)
}

// clipGlobalNorm runs ClipGlobalNorm's kernel on one thread.
func clipGlobalNorm(x []float32, maxNorm float32, norm []float32) {
	newClipTask(x, maxNorm, norm).run(nil)
}

func TestClipGlobalNorm(t *testing.T) {
	cases := []struct {
		name    string
		maxNorm float32
		want    []float32
	}{
		{"above", 1, []float32{0.6, 0.8}},
		{"equal", 5, []float32{3, 4}}, // only a norm that exceeds maxNorm clips
		{"below", 6, []float32{3, 4}},
	}
	for _, c := range cases {
		x, norm := []float32{3, 4}, []float32{0, -1}
		clipGlobalNorm(x, c.maxNorm, norm)
		sameBits(t, c.name+" norm", norm, []float32{5, -1})
		if c.maxNorm >= 5 {
			// Not clipped: not even rescaled by a factor near 1.
			sameBits(t, c.name+" x", x, c.want)
			continue
		}
		near(t, c.name+" x", x, []float64{float64(c.want[0]), float64(c.want[1])}, 1e-6)
	}
}

// TestClipGlobalNormEpsilon: the scale is maxNorm/(norm+1e-6), and at a
// small norm the 1e-6 is a large part of the denominator: 1/6 here where
// maxNorm/norm alone would give 1/5, and maxNorm/(norm-1e-6) 1/4.
func TestClipGlobalNormEpsilon(t *testing.T) {
	x, norm := []float32{3e-6, 4e-6}, []float32{0}
	clipGlobalNorm(x, 1e-6, norm)
	for i, w := range []float64{3e-6 / 6, 4e-6 / 6} {
		if math.Abs(float64(x[i])-w) > 1e-5*w {
			t.Fatalf("x[%d] = %g after clipping to 1e-6, want %g (scaled by maxNorm/(norm+1e-6))", i, x[i], w)
		}
	}
}

// TestClipGlobalNormRefusesANonPositiveMaxNorm: a maxNorm of zero or less
// would clip every gradient to nothing (or flip it); the CPU device refuses
// it with ErrMisuse and leaves x as it was.
func TestClipGlobalNormRefusesANonPositiveMaxNorm(t *testing.T) {
	d, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	x, err := d.Alloc(2)
	if err != nil {
		t.Fatal(err)
	}
	norm, err := d.Alloc(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Upload(x, []float32{3, 4}); err != nil {
		t.Fatal(err)
	}
	for _, maxNorm := range []float32{0, -1, float32(math.NaN())} {
		if err := s.ClipGlobalNorm(x, maxNorm, norm); !errors.Is(err, device.ErrMisuse) {
			t.Fatalf("ClipGlobalNorm with maxNorm %g: %v, want ErrMisuse", maxNorm, err)
		}
	}
	got := make([]float32, 2)
	if err := d.Download(got, x); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "x after refused calls", got, []float32{3, 4})
}

func TestOptimizersAgainstRef(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	const n = 257
	hyper := []float32{0.1, 0.19, 0.002997, float32(math.NaN())}
	for _, nesterov := range []bool{false, true} {
		p, g, vel := randSlice(rng, n), randSlice(rng, n), randSlice(rng, n)
		wantP, wantV := devicetest.RefSGDMomentum(p, g, vel, hyper, 0.9, 0.01, nesterov)
		sgdMomentum(p, g, vel, hyper, 0.9, 0.01, nesterov)
		near(t, "sgd p", p, wantP, 1e-6)
		near(t, "sgd vel", vel, wantV, 1e-6)
	}
	p, g, m, v := randSlice(rng, n), randSlice(rng, n), randSlice(rng, n), make([]float32, n)
	wantP, wantM, wantV := devicetest.RefAdamW(p, g, m, v, hyper, 0.9, 0.999, 1e-8, 0.01)
	adamW(p, g, m, v, hyper, 0.9, 0.999, 1e-8, 0.01)
	near(t, "adamw p", p, wantP, 1e-6)
	near(t, "adamw m", m, wantM, 1e-6)
	near(t, "adamw v", v, wantV, 1e-6)
}

// TestExp32 checks exp32 against math.Exp over its whole range, to 2 ulps
// relative, and at its edges.
func TestExp32(t *testing.T) {
	const ulp = 1.0 / (1 << 23)
	for x := float32(-87.33); x <= 88.72; x += 0.0037 {
		got, want := float64(exp32(x)), math.Exp(float64(x))
		if math.Abs(got-want) > 2*ulp*want {
			t.Fatalf("exp32(%g) = %g, want %g (%.2g ulps off)", x, got, want, math.Abs(got-want)/want/ulp)
		}
	}
	for _, c := range []struct{ x, want float32 }{
		{0, 1}, {-200, 0}, {89, float32(math.Inf(1))}, {float32(math.Inf(-1)), 0}, {float32(math.Inf(1)), float32(math.Inf(1))},
	} {
		if got := exp32(c.x); got != c.want {
			t.Errorf("exp32(%g) = %g, want %g", c.x, got, c.want)
		}
	}
	if got := exp32(float32(math.NaN())); got == got {
		t.Errorf("exp32(NaN) = %g, want NaN", got)
	}
	if got, want := exp32(88.72), math.Exp(float64(float32(88.72))); math.Abs(float64(got)-want) > 2*ulp*want {
		t.Errorf("exp32(88.72) = %g, want %g: the top of the range scales by 2^128 in two steps", got, want)
	}
}

// TestGELUAccuracy checks the float32 GELU and its derivative against the
// formula in float64 over the range where it is not trivially 0 or x, to
// within 1e-6 of max(|value|, 0.1): well inside the conformance suite's
// 1e-5, which a CUDA kernel's tanh meets too.
func TestGELUAccuracy(t *testing.T) {
	for x := float32(-12); x <= 12; x += 0.00173 {
		y := float64(x)
		if got, want := float64(gelu(x)), devicetest.RefActivation(device.ActGELU, y); math.Abs(got-want) > 1e-6*math.Max(math.Abs(want), 0.1) {
			t.Fatalf("gelu(%g) = %g, want %g", x, got, want)
		}
		if got, want := float64(geluGrad(x)), devicetest.RefActivationGrad(device.ActGELU, y); math.Abs(got-want) > 1e-6*math.Max(math.Abs(want), 0.1) {
			t.Fatalf("gelu'(%g) = %g, want %g", x, got, want)
		}
	}
	for _, x := range []float32{-1e30, -100, 100, 1e30} {
		if g := gelu(x); math.IsNaN(float64(g)) || math.IsNaN(float64(geluGrad(x))) {
			t.Errorf("gelu(%g) = %g, gelu' = %g: want numbers", x, g, geluGrad(x))
		}
	}
}

// TestAdamWVectorMatchesScalar: adamW's eight-lane loop gives the scalar
// loop's bits, element for element, on values over many magnitudes.
func TestAdamWVectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	const n = 1003
	wide := func() []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32((2*rng.Float64() - 1) * math.Pow(10, 8*rng.Float64()-6))
		}
		return x
	}
	p, g, m, v := wide(), wide(), wide(), wide()
	for i := range v {
		v[i] = abs32(v[i])
	}
	g[3], v[4] = 0, 0
	hyper := []float32{3e-3, 0.271, 0.00399, 0}
	wp, wm, wv := slices.Clone(p), slices.Clone(m), slices.Clone(v)
	k := adamConsts{beta1: 0.9, c1: 1 - float32(0.9), beta2: 0.999, c2: 1 - float32(0.999), bias1: hyper[1], bias2: hyper[2], eps: 1e-8, lr: hyper[0], weightDecay: 1e-4}
	for i := range wp {
		w, gi := wp[i], g[i]
		mi := k.beta1*wm[i] + k.c1*gi
		vi := k.beta2*wv[i] + k.c2*gi*gi
		wm[i], wv[i] = mi, vi
		step := (mi / k.bias1) / (sqrt32(vi/k.bias2) + k.eps)
		wp[i] = w - k.lr*(k.weightDecay*w+step)
	}
	adamW(p, g, m, v, hyper, 0.9, 0.999, 1e-8, 1e-4)
	sameBits(t, "p", p, wp)
	sameBits(t, "m", m, wm)
	sameBits(t, "v", v, wv)
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

// TestGELUVectorMatchesScalar: biasAct's and actGrad's eight-lane GELU
// gives gelu's and geluGrad's bits, element for element, over a dense
// sweep of z and at the special values (NaN, infinities, the ends of
// exp32's range, where 2^128 takes two steps).
func TestGELUVectorMatchesScalar(t *testing.T) {
	if !haveGELUKernel() {
		t.Skip("no AVX2: biasAct and actGrad run the scalar code")
	}
	var z []float32
	for x := float32(-60); x < 60; x += 0.000731 {
		z = append(z, x)
	}
	for _, x := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), 1e30, -1e30, 3e38, -3e38, 1e-30, -1e-30,
		-9.4, -9.5, -9.6, 9.4, 9.5, 9.6, 44.36142, -44.36142, 43.668, -43.668, 44.0, -44.0} {
		z = append(z, float32(x))
	}
	for len(z)%8 != 0 {
		z = append(z, 1)
	}
	n := len(z)
	bias := make([]float32, n) // one row of n columns
	rng := rand.New(rand.NewPCG(11, 11))
	for i := range bias {
		bias[i] = float32(rng.NormFloat64() * 1e-3)
	}
	zz, y := slices.Clone(z), make([]float32, n)
	biasAct(device.ActGELU, 1, n, zz, bias, y)
	dy := randSlice(rng, n)
	dz := make([]float32, n)
	actGrad(device.ActGELU, 1, n, z, dy, dz)
	for i, v := range z {
		wz := v + bias[i]
		if wy := gelu(wz); math.Float32bits(zz[i]) != math.Float32bits(wz) || math.Float32bits(y[i]) != math.Float32bits(wy) {
			t.Fatalf("z %g: biasAct gives z %g, y %g; gelu gives %g", wz, zz[i], y[i], wy)
		}
		if w := dy[i] * geluGrad(v); math.Float32bits(dz[i]) != math.Float32bits(w) {
			t.Fatalf("z %g: actGrad gives %g, dy*geluGrad gives %g", v, dz[i], w)
		}
	}
}

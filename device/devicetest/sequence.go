package devicetest

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// RunSequence checks every kernel of device.SequenceKernels: each against
// the float64 references of sequenceref.go on several shapes (one row,
// one position, one head, one column, odd sizes, sizes no part or thread
// count divides), each case run twice eagerly and once captured and
// replayed with the same bits every time; the backward kernels against
// finite differences of the forward ones, and BatchedGemm's transposed
// products through the adjoint identity; the orders and special values
// the contract spells out (invalid token ids, EmbeddingGrad's float32
// order from zero, the causal mask, the in-place forms it allows, the
// same bits as Gemm per product); bad arguments failing with ErrMisuse
// without enqueueing anything; and an attention layer's kernels captured
// as one graph and replayed twice with the eager bits.
//
// The suite skips, saying so, when the device's streams do not implement
// device.SequenceKernels, so a backend may run it before it has them.
func RunSequence(t *testing.T, open Opener) {
	requireSequenceKernels(t, open)
	kernels := []struct {
		name string
		test func(*kernelEnv)
	}{
		{"Embedding", testEmbedding},
		{"EmbeddingGrad", testEmbeddingGrad},
		{"LayerNorm", testLayerNorm},
		{"LayerNormGrad", testLayerNormGrad},
		{"SplitHeads", testSplitHeads},
		{"MergeHeads", testMergeHeads},
		{"BatchedGemm", testBatchedGemm},
		{"CausalSoftmax", testCausalSoftmax},
		{"CausalSoftmaxGrad", testCausalSoftmaxGrad},
		{"captured attention layer", testAttentionCapture},
	}
	for _, k := range kernels {
		t.Run(k.name, func(t *testing.T) { k.test(newKernelEnv(t, open)) })
	}
}

// requireSequenceKernels skips t unless open's streams implement
// device.SequenceKernels.
func requireSequenceKernels(t *testing.T, open Opener) {
	t.Helper()
	dev := open(t)
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Destroy() }()
	if _, ok := s.(device.SequenceKernels); !ok {
		t.Skipf("the streams of device %s (%T) do not implement device.SequenceKernels", dev.Name(), s)
	}
}

// seqCall is a sequence kernel's call on fresh buffers holding ins.
type seqCall struct {
	ins  [][]float32
	call func(sk device.SequenceKernels, b []device.Buffer) error
}

// seq returns the stream's sequence kernels (RunSequence has checked that
// it has them).
func (ke *kernelEnv) seq() device.SequenceKernels { return ke.s.(device.SequenceKernels) }

// seqOutputs is outputs for a sequence kernel: two eager runs and a
// replay with the same bits, and the buffers' contents.
func (ke *kernelEnv) seqOutputs(c seqCall) [][]float32 {
	ke.t.Helper()
	return ke.outputs(imageCall{ins: c.ins, call: func(ik device.ImageKernels, b []device.Buffer) error {
		return c.call(ik.(device.SequenceKernels), b)
	}})
}

// seqMisuse is a misuse case of a sequence kernel.
func seqMisuse(name string, keep device.Buffer, call func(sk device.SequenceKernels) error) misuseCase {
	return misuseCase{name: name, keep: keep, call: func(s device.Stream) error { return call(s.(device.SequenceKernels)) }}
}

// exactZeroAbove checks that every element above the diagonal of each
// seq×seq matrix of m is 0.
func exactZeroAbove(t *testing.T, name string, seq int, m []float32) {
	t.Helper()
	for i, v := range m {
		if r, j := (i/seq)%seq, i%seq; j > r && v != 0 {
			t.Fatalf("%s[%d] (row %d, column %d, above the diagonal) = %g, want 0", name, i, r, j, v)
		}
	}
}

// invalidIDs are token ids that name no row of a table of any vocabulary:
// negative, fractional, infinite, NaN, huge.
var invalidIDs = []float32{-1, 1.5, float32(math.Inf(1)), float32(math.NaN()), float32(math.Inf(-1)), 1e10, -0.5}

// tokenIDs returns n ids in [0, vocab), and every invalidEvery-th one
// invalid (none when invalidEvery is 0), one of invalidIDs or vocab itself.
func tokenIDs(seed, n, vocab, invalidEvery int) []float32 {
	ids := classLabels(newRand("token ids", seed), n, vocab)
	if invalidEvery > 0 {
		bad := append(slices.Clone(invalidIDs), float32(vocab))
		for i := invalidEvery - 1; i < n; i += invalidEvery {
			ids[i] = bad[(i/invalidEvery)%len(bad)]
		}
	}
	return ids
}

type embedCase struct{ n, vocab, dim int }

func (c embedCase) String() string { return fmt.Sprintf("n%d_vocab%d_dim%d", c.n, c.vocab, c.dim) }

var embedCases = []embedCase{{1, 1, 1}, {7, 5, 3}, {33, 10, 17}, {64, 50, 70}, {3, 1000, 5}, {200, 3, 16}}

func testEmbedding(ke *kernelEnv) {
	for i, c := range embedCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			ids := tokenIDs(i, c.n, c.vocab, 0)
			table := uniform(newRand("Embedding", i), c.vocab*c.dim, -1, 1)
			out := ke.seqOutputs(seqCall{ins: [][]float32{ids, table, nans(c.n * c.dim)}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.Embedding(c.n, c.vocab, c.dim, b[0], b[1], b[2])
			}})
			exact(ke.t, "y", out[2], RefEmbedding(c.n, c.vocab, c.dim, ids, table))
			checkSameBits(ke.t, "ids", out[0], ids)
			checkSameBits(ke.t, "table", out[1], table)
		})
	}
	// An id that names no row gives a row of NaN; -0 names row 0.
	ke.run("invalid_ids", func(ke *kernelEnv) {
		const vocab, dim = 4, 5
		ids := append([]float32{0, 3, float32(math.Copysign(0, -1)), vocab}, invalidIDs...)
		table := uniform(newRand("Embedding invalid", 0), vocab*dim, -1, 1)
		out := ke.seqOutputs(seqCall{ins: [][]float32{ids, table, ones(len(ids) * dim)}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
			return sk.Embedding(len(ids), vocab, dim, b[0], b[1], b[2])
		}})
		want := RefEmbedding(len(ids), vocab, dim, ids, table)
		for r := 3; r < len(ids); r++ {
			if !math.IsNaN(want[r*dim]) {
				ke.t.Fatalf("the reference takes id %g as valid", ids[r])
			}
		}
		exact(ke.t, "y", out[2], want)
	})
	ke.run("misuse", func(ke *kernelEnv) {
		const n, vocab, dim = 4, 3, 2
		ids, table, y := ke.upload(make([]float32, n)), ke.upload(make([]float32, vocab*dim)), ke.upload(ones(n*dim))
		call := func(n, vocab, dim int, ids, table, y device.Buffer) func(device.SequenceKernels) error {
			return func(sk device.SequenceKernels) error { return sk.Embedding(n, vocab, dim, ids, table, y) }
		}
		ke.checkMisuse([]misuseCase{
			seqMisuse("n=0", y, call(0, vocab, dim, ids, table, y)),
			seqMisuse("vocab=0", y, call(n, 0, dim, ids, table, y)),
			seqMisuse("negative dim", y, call(n, vocab, -2, ids, table, y)),
			seqMisuse("ids too short", y, call(n, vocab, dim, ids.Slice(0, n-1), table, y)),
			seqMisuse("table too short", y, call(n, vocab, dim, ids, table.Slice(0, vocab*dim-1), y)),
			seqMisuse("y too short", y.Slice(0, n*dim-1), call(n, vocab, dim, ids, table, y.Slice(0, n*dim-1))),
			seqMisuse("zero ids", y, call(n, vocab, dim, device.Buffer{}, table, y)),
		})
	})
}

func testEmbeddingGrad(ke *kernelEnv) {
	for i, c := range embedCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			ids := tokenIDs(i, c.n, c.vocab, 5)
			dy := uniform(newRand("EmbeddingGrad", i), c.n*c.dim, -1, 1)
			out := ke.seqOutputs(seqCall{ins: [][]float32{ids, dy, nans(c.vocab * c.dim)}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.EmbeddingGrad(c.n, c.vocab, c.dim, b[0], b[1], b[2])
			}})
			checkSum(ke.t, "dtable", out[2], RefEmbeddingGrad(c.n, c.vocab, c.dim, ids, dy), RefEmbeddingGrad(c.n, c.vocab, c.dim, ids, absAll(dy)))
			checkSameBits(ke.t, "dy", out[1], dy)
		})
	}
	// Row 1 gets 1e8, -1e8, 1 in increasing i: from zero in that order
	// the sum is 1, in any other order 0. Row 2's one term, -0, added to
	// zero gives +0. No valid id names rows 0 and 3: they are zero.
	ke.run("float32_order_from_zero", func(ke *kernelEnv) {
		const vocab, dim = 4, 1
		ids := []float32{1, -1, 1, 2, 4, 1, float32(math.NaN())}
		dy := []float32{1e8, 5, -1e8, float32(math.Copysign(0, -1)), 7, 1, 3}
		out := ke.seqOutputs(seqCall{ins: [][]float32{ids, dy, nans(vocab * dim)}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
			return sk.EmbeddingGrad(len(ids), vocab, dim, b[0], b[1], b[2])
		}})
		checkSameBits(ke.t, "dtable", out[2], []float32{0, 1, 0, 0})
	})
	for i, c := range []embedCase{{6, 4, 3}, {1, 1, 2}, {9, 3, 5}} {
		ke.run("finite_differences_"+c.String(), func(ke *kernelEnv) {
			ids := tokenIDs(100+i, c.n, c.vocab, 0)
			rng := newRand("EmbeddingGrad fd", i)
			table, w := uniform(rng, c.vocab*c.dim, -1, 1), uniform(rng, c.n*c.dim, -1, 1)
			idb, tb, y := ke.upload(ids), ke.upload(table), ke.upload(nans(c.n*c.dim))
			dtable := ke.upload(nans(len(table)))
			ke.must(ke.seq().EmbeddingGrad(c.n, c.vocab, c.dim, idb, ke.upload(w), dtable))
			numeric := numericGrad(table, 0.1, func(tp []float32) float64 {
				ke.must(ke.dev.Upload(tb, tp))
				ke.must(ke.seq().Embedding(c.n, c.vocab, c.dim, idb, tb, y))
				return dot(w, ke.download(y))
			})
			checkGrad(ke.t, "dtable", ke.download(dtable), numeric)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const n, vocab, dim = 4, 3, 2
		ids, dy, dtable := ke.upload(make([]float32, n)), ke.upload(make([]float32, n*dim)), ke.upload(ones(vocab*dim))
		call := func(n, vocab, dim int, dy, dtable device.Buffer) func(device.SequenceKernels) error {
			return func(sk device.SequenceKernels) error { return sk.EmbeddingGrad(n, vocab, dim, ids, dy, dtable) }
		}
		ke.checkMisuse([]misuseCase{
			seqMisuse("n=0", dtable, call(0, vocab, dim, dy, dtable)),
			seqMisuse("dim=0", dtable, call(n, vocab, 0, dy, dtable)),
			seqMisuse("dy too short", dtable, call(n, vocab, dim, dy.Slice(0, n*dim-1), dtable)),
			seqMisuse("dtable too short", dtable.Slice(0, vocab*dim-1), call(n, vocab, dim, dy, dtable.Slice(0, vocab*dim-1))),
			seqMisuse("zero dtable", dtable, call(n, vocab, dim, dy, device.Buffer{})),
		})
	})
}

// lnCase is a layer-normalisation shape; its rows have means around
// offset and spreads of their own around 0.5.
type lnCase struct {
	rows, cols int
	offset     float32
}

var lnCases = []lnCase{{1, 1, 0}, {1, 7, 0}, {3, 5, 2}, {7, 33, -1}, {64, 70, 0.5}, {5, 257, 3}, {2, 1000, 0}}

func (c lnCase) String() string { return fmt.Sprintf("%dx%d_mean%g", c.rows, c.cols, c.offset) }

const lnEps = 1e-5

// inputs returns x and params (gamma, then beta) for c.
func (c lnCase) inputs(seed int) (x, params []float32) {
	rng := newRand("LayerNorm", seed)
	x = uniform(rng, c.rows*c.cols, -1, 1)
	for i := range c.rows {
		spread := 0.2 + rng.Float32()
		for j := range c.cols {
			x[i*c.cols+j] = c.offset + spread*x[i*c.cols+j]
		}
	}
	params = slices.Concat(uniform(rng, c.cols, 0.5, 1.5), uniform(rng, c.cols, -0.5, 0.5))
	return x, params
}

func testLayerNorm(ke *kernelEnv) {
	for i, c := range lnCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x, params := c.inputs(i)
			n := c.rows * c.cols
			out := ke.seqOutputs(seqCall{ins: [][]float32{x, params, nans(2 * c.rows), nans(n), nans(n)}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.LayerNorm(c.rows, c.cols, lnEps, b[0], b[1], b[2], b[3], b[4])
			}})
			want := RefLayerNorm(c.rows, c.cols, lnEps, x, params)
			// A mean's rounding scales with the mean of |x|; invstd is a
			// quotient and has its own magnitude.
			statMag := RefLayerNorm(c.rows, c.cols, lnEps, absAll(x), params).Stats
			for r := c.rows; r < 2*c.rows; r++ {
				statMag[r] = math.Abs(want.Stats[r])
			}
			mh, my := bnMagnitudes(c.cols, want.Xhat, params)
			checkClose(ke.t, "stats", out[2], want.Stats, statMag, elemTol)
			checkClose(ke.t, "xhat", out[3], want.Xhat, mh, elemTol)
			checkClose(ke.t, "y", out[4], want.Y, my, elemTol)
			checkSameBits(ke.t, "x", out[0], x)
			checkSameBits(ke.t, "params", out[1], params)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const rows, cols = 4, 3
		n := rows * cols
		m, pc := func() device.Buffer { return ke.upload(make([]float32, n)) }, func() device.Buffer { return ke.upload(ones(2 * cols)) }
		x, params, stats, xhat, y := m(), pc(), ke.upload(ones(2*rows)), m(), ke.upload(ones(n))
		shared := ke.upload(ones(3 * n)) // x, xhat and y cut from one allocation
		call := func(rows, cols int, eps float32, x, params, stats, xhat, y device.Buffer) func(device.SequenceKernels) error {
			return func(sk device.SequenceKernels) error { return sk.LayerNorm(rows, cols, eps, x, params, stats, xhat, y) }
		}
		ke.checkMisuse([]misuseCase{
			seqMisuse("rows=0", y, call(0, cols, lnEps, x, params, stats, xhat, y)),
			seqMisuse("cols=0", y, call(rows, 0, lnEps, x, params, stats, xhat, y)),
			seqMisuse("eps=0", y, call(rows, cols, 0, x, params, stats, xhat, y)),
			seqMisuse("negative eps", y, call(rows, cols, -1e-5, x, params, stats, xhat, y)),
			seqMisuse("eps NaN", y, call(rows, cols, float32(math.NaN()), x, params, stats, xhat, y)),
			seqMisuse("x too short", y, call(rows, cols, lnEps, x.Slice(0, n-1), params, stats, xhat, y)),
			seqMisuse("params too short", y, call(rows, cols, lnEps, x, params.Slice(0, 2*cols-1), stats, xhat, y)),
			seqMisuse("stats too short", y, call(rows, cols, lnEps, x, params, stats.Slice(0, 2*rows-1), xhat, y)),
			seqMisuse("xhat too short", y, call(rows, cols, lnEps, x, params, stats, xhat.Slice(0, n-1), y)),
			seqMisuse("y too short", y.Slice(0, n-1), call(rows, cols, lnEps, x, params, stats, xhat, y.Slice(0, n-1))),
			seqMisuse("zero params", y, call(rows, cols, lnEps, x, device.Buffer{}, stats, xhat, y)),
			seqMisuse("y is x", shared, call(rows, cols, lnEps, shared.Slice(0, n), params, stats, xhat, shared.Slice(0, n))),
			seqMisuse("y overlaps x", shared, call(rows, cols, lnEps, shared.Slice(0, n), params, stats, xhat, shared.Slice(n-1, n))),
			seqMisuse("xhat overlaps x", shared, call(rows, cols, lnEps, shared.Slice(1, n), params, stats, shared.Slice(0, n), y)),
			seqMisuse("xhat overlaps y", shared, call(rows, cols, lnEps, x, params, stats, shared.Slice(2*n-3, n), shared.Slice(n+1, n))),
		})
	})
}

// lnForward returns stats and xhat of LayerNorm on x from the reference,
// rounded to float32 as a device stores them.
func lnForward(c lnCase, x, params []float32) (stats, xhat []float32) {
	r := RefLayerNorm(c.rows, c.cols, lnEps, x, params)
	return float32s(r.Stats), float32s(r.Xhat)
}

func testLayerNormGrad(ke *kernelEnv) {
	for i, c := range lnCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x, params := c.inputs(i)
			stats, xhat := lnForward(c, x, params)
			dy := uniform(newRand("LayerNormGrad", i), c.rows*c.cols, -1, 1)
			out := ke.seqOutputs(seqCall{ins: [][]float32{dy, xhat, params, stats, nans(len(dy)), nans(2 * c.cols)}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.LayerNormGrad(c.rows, c.cols, b[0], b[1], b[2], b[3], b[4], b[5])
			}})
			wantDx, wantDp := RefLayerNormGrad(c.rows, c.cols, dy, xhat, params, stats)
			_, absDp := RefLayerNormGrad(c.rows, c.cols, absAll(dy), absAll(xhat), absAll(params), stats)
			checkSum(ke.t, "dparams", out[5], wantDp, absDp)
			checkClose(ke.t, "dx", out[4], wantDx, lnGradMagnitudes(c, dy, xhat, params, stats), elemTol)
		})
	}
	for i, c := range []lnCase{{3, 6, 0}, {2, 5, 2}, {1, 4, 0}, {3, 1, 0}, {4, 9, -1}} {
		ke.run("finite_differences_"+c.String(), func(ke *kernelEnv) { lnFiniteDifferences(ke, c, i) })
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const rows, cols = 4, 3
		n := rows * cols
		m, pc := func() device.Buffer { return ke.upload(make([]float32, n)) }, func() device.Buffer { return ke.upload(ones(2 * cols)) }
		dy, xhat, params, stats, dx, dparams := m(), m(), pc(), ke.upload(ones(2*rows)), ke.upload(ones(n)), pc()
		call := func(rows, cols int, xhat, stats, dx, dparams device.Buffer) func(device.SequenceKernels) error {
			return func(sk device.SequenceKernels) error {
				return sk.LayerNormGrad(rows, cols, dy, xhat, params, stats, dx, dparams)
			}
		}
		ke.checkMisuse([]misuseCase{
			seqMisuse("rows=0", dx, call(0, cols, xhat, stats, dx, dparams)),
			seqMisuse("cols=0", dx, call(rows, 0, xhat, stats, dx, dparams)),
			seqMisuse("xhat too short", dx, call(rows, cols, xhat.Slice(0, n-1), stats, dx, dparams)),
			seqMisuse("stats too short", dx, call(rows, cols, xhat, stats.Slice(0, 2*rows-1), dx, dparams)),
			seqMisuse("dx too short", dx.Slice(0, n-1), call(rows, cols, xhat, stats, dx.Slice(0, n-1), dparams)),
			seqMisuse("dparams too short", dx, call(rows, cols, xhat, stats, dx, dparams.Slice(0, 2*cols-1))),
			seqMisuse("zero stats", dx, call(rows, cols, xhat, device.Buffer{}, dx, dparams)),
		})
	})
}

// lnGradMagnitudes returns the magnitudes dx's rounding errors scale with:
// invstd·(|g| + mean|g| + |xhat|·mean|g·xhat|), g = gamma·dy, per row.
func lnGradMagnitudes(c lnCase, dy, xhat, params, stats []float32) []float64 {
	mag := make([]float64, len(dy))
	for i := range c.rows {
		var mg, mgx float64
		for j := range c.cols {
			g := math.Abs(float64(params[j]) * float64(dy[i*c.cols+j]))
			mg += g
			mgx += g * math.Abs(float64(xhat[i*c.cols+j]))
		}
		mg, mgx = mg/float64(c.cols), mgx/float64(c.cols)
		inv := math.Abs(float64(stats[c.rows+i]))
		for j := range c.cols {
			k := i*c.cols + j
			mag[k] = inv * (math.Abs(float64(params[j])*float64(dy[k])) + mg + math.Abs(float64(xhat[k]))*mgx)
		}
	}
	return mag
}

// lnFiniteDifferences checks LayerNormGrad's dx and dparams against the
// numerical gradient of L = Σ w·y through LayerNorm, with dy = w.
func lnFiniteDifferences(ke *kernelEnv, c lnCase, seed int) {
	x, params := c.inputs(100 + seed)
	w := uniform(newRand("LayerNormGrad fd", seed), c.rows*c.cols, -1, 1)
	n := c.rows * c.cols
	xb, pb, stats, xhat, y := ke.upload(x), ke.upload(params), ke.upload(nans(2*c.rows)), ke.upload(nans(n)), ke.upload(nans(n))
	sk := ke.seq()
	ke.must(sk.LayerNorm(c.rows, c.cols, lnEps, xb, pb, stats, xhat, y))
	dx, dparams := ke.upload(nans(n)), ke.upload(nans(2*c.cols))
	ke.must(sk.LayerNormGrad(c.rows, c.cols, ke.upload(w), xhat, pb, stats, dx, dparams))
	gotDx, gotDp := ke.download(dx), ke.download(dparams)
	loss := func(x, params []float32) float64 {
		ke.must(ke.dev.Upload(xb, x))
		ke.must(ke.dev.Upload(pb, params))
		ke.must(sk.LayerNorm(c.rows, c.cols, lnEps, xb, pb, stats, xhat, y))
		return dot(w, ke.download(y))
	}
	checkGrad(ke.t, "dx", gotDx, numericGrad(x, 1e-2, func(xp []float32) float64 { return loss(xp, params) }))
	checkGrad(ke.t, "dparams", gotDp, numericGrad(params, 1e-2, func(pp []float32) float64 { return loss(x, pp) }))
}

type headCase struct{ batch, seq, heads, size int }

func (c headCase) String() string {
	return fmt.Sprintf("b%d_t%d_h%d_d%d", c.batch, c.seq, c.heads, c.size)
}

func (c headCase) len() int { return c.batch * c.seq * c.heads * c.size }

var headCases = []headCase{{1, 1, 1, 1}, {2, 3, 1, 5}, {2, 5, 3, 4}, {3, 7, 4, 9}, {1, 1, 8, 3}, {2, 33, 2, 16}}

func testSplitHeads(ke *kernelEnv) {
	for i, c := range headCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x := uniform(newRand("SplitHeads", i), c.len(), -1, 1)
			out := ke.seqOutputs(seqCall{ins: [][]float32{x, nans(c.len())}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.SplitHeads(c.batch, c.seq, c.heads, c.size, b[0], b[1])
			}})
			exact(ke.t, "y", out[1], RefSplitHeads(c.batch, c.seq, c.heads, c.size, x))
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		headsMisuse(ke, func(sk device.SequenceKernels, c headCase, x, y device.Buffer) error {
			return sk.SplitHeads(c.batch, c.seq, c.heads, c.size, x, y)
		})
	})
}

func testMergeHeads(ke *kernelEnv) {
	for i, c := range headCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x := uniform(newRand("MergeHeads", i), c.len(), -1, 1)
			out := ke.seqOutputs(seqCall{ins: [][]float32{x, nans(c.len())}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.MergeHeads(c.batch, c.seq, c.heads, c.size, b[0], b[1])
			}})
			exact(ke.t, "y", out[1], RefMergeHeads(c.batch, c.seq, c.heads, c.size, x))
			// MergeHeads undoes SplitHeads.
			b := ke.uploadAll([][]float32{x, nans(c.len()), nans(c.len())})
			ke.must(ke.seq().SplitHeads(c.batch, c.seq, c.heads, c.size, b[0], b[1]))
			ke.must(ke.seq().MergeHeads(c.batch, c.seq, c.heads, c.size, b[1], b[2]))
			checkSameBits(ke.t, "MergeHeads(SplitHeads(x))", ke.download(b[2]), x)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		headsMisuse(ke, func(sk device.SequenceKernels, c headCase, x, y device.Buffer) error {
			return sk.MergeHeads(c.batch, c.seq, c.heads, c.size, x, y)
		})
	})
}

func headsMisuse(ke *kernelEnv, call func(sk device.SequenceKernels, c headCase, x, y device.Buffer) error) {
	c := headCase{2, 3, 2, 2}
	n := c.len()
	x, y, shared := ke.upload(make([]float32, n)), ke.upload(ones(n)), ke.upload(ones(2*n))
	with := func(c headCase, x, y device.Buffer) func(device.SequenceKernels) error {
		return func(sk device.SequenceKernels) error { return call(sk, c, x, y) }
	}
	ke.checkMisuse([]misuseCase{
		seqMisuse("batch=0", y, with(headCase{0, 3, 2, 2}, x, y)),
		seqMisuse("heads=0", y, with(headCase{2, 3, 0, 2}, x, y)),
		seqMisuse("negative size", y, with(headCase{2, 3, 2, -2}, x, y)),
		seqMisuse("x too short", y, with(c, x.Slice(0, n-1), y)),
		seqMisuse("y too short", y.Slice(0, n-1), with(c, x, y.Slice(0, n-1))),
		seqMisuse("zero y", y, with(c, x, device.Buffer{})),
		seqMisuse("y is x", shared, with(c, shared.Slice(0, n), shared.Slice(0, n))),
		seqMisuse("y overlaps x", shared, with(c, shared.Slice(0, n), shared.Slice(n-1, n))),
	})
}

// bgCase is a batched product: count products of op(A) m×k by op(B) k×n,
// each operand's matrices pad elements apart beyond their size (stride 0,
// the same matrix for every product, when the pad is negative).
type bgCase struct {
	transA, transB   bool
	count, m, n, k   int
	alpha, beta      float32
	padA, padB, padC int
}

func (c bgCase) String() string {
	op := func(t bool) string {
		if t {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s_count%d_%dx%dx%d_alpha%g_beta%g_pad%d,%d,%d", op(c.transA), op(c.transB),
		c.count, c.m, c.n, c.k, c.alpha, c.beta, c.padA, c.padB, c.padC)
}

func bgStride(size, pad int) int {
	if pad < 0 {
		return 0
	}
	return size + pad
}

func (c bgCase) strides() (a, b, cs int) {
	return bgStride(c.m*c.k, c.padA), bgStride(c.k*c.n, c.padB), bgStride(c.m*c.n, c.padC)
}

// lens returns the lengths of the three operands: up to the last matrix.
func (c bgCase) lens() (a, b, cl int) {
	sa, sb, sc := c.strides()
	last := c.count - 1
	return last*sa + c.m*c.k, last*sb + c.k*c.n, last*sc + c.m*c.n
}

var bgCases = []bgCase{
	{false, false, 1, 1, 1, 1, 1, 0, 0, 0, 0},
	{false, true, 3, 5, 5, 4, 1, 0, 0, 0, 0},  // attention scores, Q·Kᵀ
	{false, false, 3, 5, 4, 5, 1, 0, 0, 0, 0}, // probabilities times V
	{true, false, 2, 7, 3, 9, 1, 1, 3, 1, 2},
	{true, true, 4, 6, 7, 3, 0.5, 0.5, -1, 2, 5},
	{false, true, 2, 33, 33, 16, 1, 0, 0, 0, 0},
	{true, false, 2, 40, 24, 70, 1, 1, 0, 7, 0},
	{false, false, 5, 17, 70, 3, 1, 0, 1, -1, 3},
	{false, true, 1, 9, 37, 65, 1, 1, 0, 0, 0},
	{true, true, 3, 36, 40, 20, 1, 0, 2, 0, 1},
}

// inputs returns a, b and c for the case: C's matrices hold values (NaN
// when beta is 0: they must not be read), the gaps between them 7.5.
func (c bgCase) inputs(seed int) (a, b, cv []float32) {
	la, lb, lc := c.lens()
	rng := newRand("BatchedGemm", seed)
	a, b = uniform(rng, la, -1, 1), uniform(rng, lb, -1, 1)
	cv = make([]float32, lc)
	fill32(cv, 7.5)
	_, _, sc := c.strides()
	for i := range c.count {
		m := cv[i*sc : i*sc+c.m*c.n]
		if c.beta == 0 {
			fill32(m, float32(math.NaN()))
		} else {
			copy(m, uniform(rng, len(m), -1, 1))
		}
	}
	return a, b, cv
}

func (c bgCase) call(a, b, cv device.Buffer) func(device.SequenceKernels) error {
	sa, sb, sc := c.strides()
	return func(sk device.SequenceKernels) error {
		return sk.BatchedGemm(c.transA, c.transB, c.count, c.m, c.n, c.k, c.alpha, a, sa, b, sb, c.beta, cv, sc)
	}
}

func testBatchedGemm(ke *kernelEnv) {
	for i, c := range bgCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			a, b, cv := c.inputs(i)
			sa, sb, sc := c.strides()
			out := ke.seqOutputs(seqCall{ins: [][]float32{a, b, cv}, call: func(sk device.SequenceKernels, bufs []device.Buffer) error {
				return c.call(bufs[0], bufs[1], bufs[2])(sk)
			}})
			want := RefBatchedGemm(c.transA, c.transB, c.count, c.m, c.n, c.k, c.alpha, a, sa, b, sb, c.beta, cv, sc)
			abs := RefBatchedGemm(c.transA, c.transB, c.count, c.m, c.n, c.k, absf(c.alpha), absAll(a), sa, absAll(b), sb, absf(c.beta), absAll(cv), sc)
			checkSum(ke.t, "c", out[2], want, abs)
			for j, v := range out[2] {
				if inside := j%max(sc, 1) < c.m*c.n || sc == 0; !inside && v != 7.5 {
					ke.t.Fatalf("c[%d], between C's matrices, = %g, want it kept at 7.5", j, v)
				}
			}
			// Each product has the bits Gemm gives it.
			for p := range c.count {
				ops := ke.uploadAll([][]float32{a[p*sa : p*sa+c.m*c.k], b[p*sb : p*sb+c.k*c.n], cv[p*sc : p*sc+c.m*c.n]})
				ke.must(ke.s.Gemm(c.transA, c.transB, c.m, c.n, c.k, c.alpha, ops[0], ops[1], c.beta, ops[2]))
				checkSameBits(ke.t, fmt.Sprintf("C_%d against Gemm's", p), out[2][p*sc:p*sc+c.m*c.n], ke.download(ops[2]))
			}
		})
	}
	for i, c := range bgCases[1:6] {
		ke.run("adjoint_"+c.String(), func(ke *kernelEnv) { bgAdjoint(ke, c, i) })
	}
	ke.run("misuse", func(ke *kernelEnv) {
		c := bgCase{false, true, 3, 4, 5, 2, 1, 0, 0, 0, 0}
		la, lb, lc := c.lens()
		a, b, cv := ke.upload(make([]float32, la)), ke.upload(make([]float32, lb)), ke.upload(ones(lc))
		with := func(f func(*bgCase)) bgCase { d := c; f(&d); return d }
		raw := func(count, strideA, strideB, strideC int) func(device.SequenceKernels) error {
			return func(sk device.SequenceKernels) error {
				return sk.BatchedGemm(false, true, count, c.m, c.n, c.k, 1, a, strideA, b, strideB, 0, cv, strideC)
			}
		}
		ke.checkMisuse([]misuseCase{
			seqMisuse("count=0", cv, with(func(d *bgCase) { d.count = 0 }).call(a, b, cv)),
			seqMisuse("m=0", cv, with(func(d *bgCase) { d.m = 0 }).call(a, b, cv)),
			seqMisuse("k=0", cv, with(func(d *bgCase) { d.k = 0 }).call(a, b, cv)),
			seqMisuse("negative strideA", cv, raw(3, -8, 10, 20)),
			seqMisuse("negative strideC", cv, raw(1, 8, 10, -1)),
			seqMisuse("C's matrices overlap", cv, raw(3, 8, 10, 19)),
			seqMisuse("C's matrices the same", cv, raw(2, 8, 10, 0)),
			seqMisuse("A too short", cv, c.call(a.Slice(0, la-1), b, cv)),
			seqMisuse("B too short", cv, c.call(a, b.Slice(1, lb-1), cv)),
			seqMisuse("C too short", cv.Slice(0, lc-1), c.call(a, b, cv.Slice(0, lc-1))),
			seqMisuse("zero B", cv, c.call(a, device.Buffer{}, cv)),
		})
	})
}

// bgAdjoint checks the transposed products attention's backward pass
// takes, through <op(A)·op(B), W> = <op(A), W·op(B)ᵀ> = <op(B), op(A)ᵀ·W>
// for each of the count products: the gradients of C = op(A)·op(B).
func bgAdjoint(ke *kernelEnv, c bgCase, seed int) {
	a, b, _ := c.inputs(100 + seed)
	sa, sb, _ := c.strides()
	mn, mk, kn := c.m*c.n, c.m*c.k, c.k*c.n
	w := uniform(newRand("BatchedGemm adjoint", seed), c.count*mn, -1, 1)
	ab, bb, wb := ke.upload(a), ke.upload(b), ke.upload(w)
	cb, da, db := ke.upload(nans(c.count*mn)), ke.upload(nans(c.count*mk)), ke.upload(nans(c.count*kn))
	sk := ke.seq()
	ke.must(sk.BatchedGemm(c.transA, c.transB, c.count, c.m, c.n, c.k, 1, ab, sa, bb, sb, 0, cb, mn))
	ke.must(sk.BatchedGemm(false, !c.transB, c.count, c.m, c.k, c.n, 1, wb, mn, bb, sb, 0, da, mk))
	ke.must(sk.BatchedGemm(!c.transA, false, c.count, c.k, c.n, c.m, 1, ab, sa, wb, mn, 0, db, kn))
	cv, dav, dbv := ke.download(cb), ke.download(da), ke.download(db)
	for p := range c.count {
		ap, bp, wp := a[p*sa:], b[p*sb:], w[p*mn:(p+1)*mn]
		var lhs, viaA, viaB, bound float64
		for i := range c.m {
			for j := range c.n {
				lhs += float64(wp[i*c.n+j]) * float64(cv[p*mn+i*c.n+j])
				for l := range c.k {
					bound += math.Abs(float64(wp[i*c.n+j]) * float64(at(ap, c.transA, i, l, c.m, c.k)) * float64(at(bp, c.transB, l, j, c.k, c.n)))
				}
			}
		}
		for i := range c.m {
			for l := range c.k {
				viaA += float64(at(ap, c.transA, i, l, c.m, c.k)) * float64(dav[p*mk+i*c.k+l])
			}
		}
		for l := range c.k {
			for j := range c.n {
				viaB += float64(at(bp, c.transB, l, j, c.k, c.n)) * float64(dbv[p*kn+l*c.n+j])
			}
		}
		if math.Abs(lhs-viaA) > sumTol*bound || math.Abs(lhs-viaB) > sumTol*bound {
			ke.t.Errorf("product %d: <op(A)·op(B), W> = %.9g, <op(A), W·op(B)ᵀ> = %.9g, <op(B), op(A)ᵀ·W> = %.9g: differ by more than %.2g",
				p, lhs, viaA, viaB, sumTol*bound)
		}
	}
}

// smCase is a causal softmax's shape and scale, on scores drawn from
// [-spread, spread); with nanAbove, the scores above the diagonal (and
// the gradient's dy there) are NaN, which the mask must keep out.
type smCase struct {
	groups, seq   int
	scale, spread float32
	nanAbove      bool
}

func (c smCase) String() string {
	s := fmt.Sprintf("g%d_t%d_scale%g_spread%g", c.groups, c.seq, c.scale, c.spread)
	if c.nanAbove {
		s += "_nan_above"
	}
	return s
}

func (c smCase) len() int { return c.groups * c.seq * c.seq }

var smCases = []smCase{
	{1, 1, 1, 3, false},
	{1, 2, 1, 3, false},
	{3, 5, 0.5, 3, false},
	{2, 17, 1, 3, true},
	{4, 33, 0.125, 10, false},
	{1, 100, 1, 3, false},
	{2, 7, 2, 400, false}, // exp(scale·x) overflows unless the maximum goes first
	{3, 9, 0.25, 2, true},
}

// scores returns the case's x, with NaN above the diagonal when asked.
func (c smCase) scores(seed int, what string) []float32 {
	x := uniform(newRand(what, seed), c.len(), -c.spread, c.spread)
	if c.nanAbove {
		nanAbove(c.seq, x)
	}
	return x
}

func nanAbove(seq int, m []float32) {
	for i := range m {
		if (i/seq)%seq < i%seq {
			m[i] = float32(math.NaN())
		}
	}
}

func testCausalSoftmax(ke *kernelEnv) {
	for i, c := range smCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			x := c.scores(i, "CausalSoftmax")
			out := ke.seqOutputs(seqCall{ins: [][]float32{x, nans(c.len())}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.CausalSoftmax(c.groups, c.seq, c.scale, b[0], b[1])
			}})
			checkElems(ke.t, "y", out[1], RefCausalSoftmax(c.groups, c.seq, c.scale, x))
			exactZeroAbove(ke.t, "y", c.seq, out[1])
			// x may be y, with the same bits.
			b := ke.upload(x)
			ke.must(ke.seq().CausalSoftmax(c.groups, c.seq, c.scale, b, b))
			checkSameBits(ke.t, "y computed in place", ke.download(b), out[1])
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const groups, seq = 2, 3
		n := groups * seq * seq
		x, y := ke.upload(make([]float32, n)), ke.upload(ones(n))
		call := func(groups, seq int, scale float32, x, y device.Buffer) func(device.SequenceKernels) error {
			return func(sk device.SequenceKernels) error { return sk.CausalSoftmax(groups, seq, scale, x, y) }
		}
		ke.checkMisuse([]misuseCase{
			seqMisuse("groups=0", y, call(0, seq, 1, x, y)),
			seqMisuse("seq=0", y, call(groups, 0, 1, x, y)),
			seqMisuse("scale=0", y, call(groups, seq, 0, x, y)),
			seqMisuse("negative scale", y, call(groups, seq, -1, x, y)),
			seqMisuse("scale NaN", y, call(groups, seq, float32(math.NaN()), x, y)),
			seqMisuse("x too short", y, call(groups, seq, 1, x.Slice(0, n-1), y)),
			seqMisuse("y too short", y.Slice(0, n-1), call(groups, seq, 1, x, y.Slice(0, n-1))),
			seqMisuse("zero x", y, call(groups, seq, 1, device.Buffer{}, y)),
		})
	})
}

// smGradInputs returns y, the reference softmax of the case's scores
// rounded to float32, and dy.
func smGradInputs(c smCase, seed int) (y, dy []float32) {
	y = float32s(RefCausalSoftmax(c.groups, c.seq, c.scale, c.scores(seed, "CausalSoftmaxGrad x")))
	dy = c.scores(seed, "CausalSoftmaxGrad dy")
	return y, dy
}

func testCausalSoftmaxGrad(ke *kernelEnv) {
	for i, c := range smCases {
		ke.run(c.String(), func(ke *kernelEnv) {
			y, dy := smGradInputs(c, i)
			out := ke.seqOutputs(seqCall{ins: [][]float32{y, dy, nans(c.len())}, call: func(sk device.SequenceKernels, b []device.Buffer) error {
				return sk.CausalSoftmaxGrad(c.groups, c.seq, c.scale, b[0], b[1], b[2])
			}})
			// dx's rounding scales with scale·|y|·(|dy| + Σ|dy·y|).
			mag := RefCausalSoftmaxGrad(c.groups, c.seq, c.scale, y, absAll(dy))
			for r := range c.groups * c.seq {
				t := r % c.seq
				var s float64
				for j := 0; j <= t; j++ {
					s += math.Abs(float64(dy[r*c.seq+j]) * float64(y[r*c.seq+j]))
				}
				for j := 0; j <= t; j++ {
					k := r*c.seq + j
					mag[k] = math.Max(float64(c.scale)*float64(y[k])*(math.Abs(float64(dy[k]))+s), 1e-30)
				}
			}
			checkClose(ke.t, "dx", out[2], RefCausalSoftmaxGrad(c.groups, c.seq, c.scale, y, dy), mag, elemTol)
			exactZeroAbove(ke.t, "dx", c.seq, out[2])
			// dx may be dy, with the same bits.
			b := ke.uploadAll([][]float32{y, dy})
			ke.must(ke.seq().CausalSoftmaxGrad(c.groups, c.seq, c.scale, b[0], b[1], b[1]))
			checkSameBits(ke.t, "dx computed in place", ke.download(b[1]), out[2])
		})
	}
	for i, c := range []smCase{{1, 1, 1, 1, false}, {2, 4, 1, 1, false}, {1, 6, 0.5, 2, false}, {2, 5, 2, 1, false}} {
		ke.run("finite_differences_"+c.String(), func(ke *kernelEnv) {
			rng := newRand("CausalSoftmaxGrad fd", i)
			x, w := uniform(rng, c.len(), -c.spread, c.spread), uniform(rng, c.len(), -1, 1)
			xb, yb, dx := ke.upload(x), ke.upload(nans(c.len())), ke.upload(nans(c.len()))
			sk := ke.seq()
			ke.must(sk.CausalSoftmax(c.groups, c.seq, c.scale, xb, yb))
			ke.must(sk.CausalSoftmaxGrad(c.groups, c.seq, c.scale, yb, ke.upload(w), dx))
			numeric := numericGrad(x, 0.05, func(xp []float32) float64 {
				ke.must(ke.dev.Upload(xb, xp))
				ke.must(sk.CausalSoftmax(c.groups, c.seq, c.scale, xb, yb))
				return dot(w, ke.download(yb))
			})
			checkGrad(ke.t, "dx", ke.download(dx), numeric)
		})
	}
	ke.run("misuse", func(ke *kernelEnv) {
		const groups, seq = 2, 3
		n := groups * seq * seq
		y, dy, dx := ke.upload(make([]float32, n)), ke.upload(make([]float32, n)), ke.upload(ones(n))
		call := func(groups, seq int, scale float32, dy, dx device.Buffer) func(device.SequenceKernels) error {
			return func(sk device.SequenceKernels) error { return sk.CausalSoftmaxGrad(groups, seq, scale, y, dy, dx) }
		}
		ke.checkMisuse([]misuseCase{
			seqMisuse("groups=0", dx, call(0, seq, 1, dy, dx)),
			seqMisuse("scale=0", dx, call(groups, seq, 0, dy, dx)),
			seqMisuse("negative scale", dx, call(groups, seq, -0.5, dy, dx)),
			seqMisuse("scale NaN", dx, call(groups, seq, float32(math.NaN()), dy, dx)),
			seqMisuse("dy too short", dx, call(groups, seq, 1, dy.Slice(0, n-1), dx)),
			seqMisuse("dx too short", dx.Slice(0, n-1), call(groups, seq, 1, dy, dx.Slice(0, n-1))),
			seqMisuse("zero dy", dx, call(groups, seq, 1, device.Buffer{}, dx)),
		})
	})
}

// attention is the buffers of one causal self-attention layer's kernels:
// token embedding, layer normalisation, a single projection shared by
// queries, keys and values (the heads of the normalised input), the
// causal softmax of the scaled scores, the heads merged, and the backward
// kernels of the softmax, the normalisation and the embedding.
type attention struct {
	batch, seq, heads, size, vocab int
	names                          []string
	vals                           [][]float32
}

var attentionNames = []string{"ids", "table", "h", "params", "stats", "xhat", "y", "q", "scores", "probs",
	"ctx", "merged", "dscores", "dx", "dparams", "dtable"}

func newAttention(batch, seq, heads, size, vocab int) *attention {
	a := &attention{batch: batch, seq: seq, heads: heads, size: size, vocab: vocab, names: attentionNames}
	rng := newRand("attention", 0)
	n, width, groups := batch*seq, heads*size, batch*heads
	a.vals = [][]float32{
		tokenIDs(7, n, vocab, 0), uniform(rng, vocab*width, -1, 1), nans(n * width),
		slices.Concat(uniform(rng, width, 0.5, 1.5), uniform(rng, width, -0.5, 0.5)),
		nans(2 * n), nans(n * width), nans(n * width), nans(n * width), nans(groups * seq * seq), nans(groups * seq * seq),
		nans(n * width), nans(n * width), nans(groups * seq * seq), nans(n * width), nans(2 * width), nans(vocab * width),
	}
	return a
}

// step enqueues the layer's kernels on the buffers b (in names' order).
func (a *attention) step(sk device.SequenceKernels, b []device.Buffer) error {
	n, width, groups, tt := a.batch*a.seq, a.heads*a.size, a.batch*a.heads, a.seq*a.seq
	scale := float32(1 / math.Sqrt(float64(a.size)))
	ids, table, h, params, stats, xhat, y, q := b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
	scores, probs, ctx, merged, dscores, dx, dparams, dtable := b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]
	return first(
		sk.Embedding(n, a.vocab, width, ids, table, h),
		sk.LayerNorm(n, width, lnEps, h, params, stats, xhat, y),
		sk.SplitHeads(a.batch, a.seq, a.heads, a.size, y, q),
		sk.BatchedGemm(false, true, groups, a.seq, a.seq, a.size, 1, q, a.seq*a.size, q, a.seq*a.size, 0, scores, tt),
		sk.CausalSoftmax(groups, a.seq, scale, scores, probs),
		sk.BatchedGemm(false, false, groups, a.seq, a.size, a.seq, 1, probs, tt, q, a.seq*a.size, 0, ctx, a.seq*a.size),
		sk.MergeHeads(a.batch, a.seq, a.heads, a.size, ctx, merged),
		sk.CausalSoftmaxGrad(groups, a.seq, scale, probs, scores, dscores),
		sk.LayerNormGrad(n, width, merged, xhat, params, stats, dx, dparams),
		sk.EmbeddingGrad(n, a.vocab, width, ids, dx, dtable),
	)
}

// testAttentionCapture: the layer's kernels captured as one graph and
// launched twice leave every buffer with the bits of the same kernels run
// eagerly (the step only reads its inputs, so a second launch repeats the
// first).
func testAttentionCapture(ke *kernelEnv) {
	for _, shape := range []headCase{{2, 5, 3, 4}, {3, 17, 2, 8}, {1, 1, 1, 1}} {
		ke.run(shape.String(), func(ke *kernelEnv) {
			a := newAttention(shape.batch, shape.seq, shape.heads, shape.size, 13)
			eager := ke.uploadAll(a.vals)
			ke.must(a.step(ke.seq(), eager))
			want := ke.downloadAll(eager)
			b := ke.uploadAll(a.vals)
			ke.must(ke.s.Synchronize())
			got := ke.downloadAll(ke.replay(func(ik device.ImageKernels) error { return a.step(ik.(device.SequenceKernels), b) }, b, 2))
			for i, name := range a.names {
				checkSameBits(ke.t, name+" after two replays", got[i], want[i])
			}
			// Every output was written over its NaN: the token ids are
			// valid, so the step computes numbers throughout.
			for i, name := range a.names {
				if slices.ContainsFunc(want[i], func(v float32) bool { return math.IsNaN(float64(v)) }) {
					ke.t.Errorf("%s holds NaN after the step", name)
				}
			}
		})
	}
}

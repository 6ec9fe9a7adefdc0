//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// identicalBits fails unless got holds want's bits, both computed on the
// GPU.
func identicalBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%s: element %d: %g (%#08x), want %g (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			return
		}
	}
}

// tokenIDs draws n ids below vocab; with n > 10, four of them are not ids.
func tokenIDs(rng *rand.Rand, n, vocab int) []float32 {
	ids := make([]float32, n)
	for i := range ids {
		ids[i] = float32(rng.IntN(vocab))
	}
	if n > 10 {
		ids[3], ids[7], ids[8], ids[9] = -1, float32(vocab), 2.5, float32(math.NaN())
	}
	return ids
}

// The embedding, its gradient (gathered in the CPU device's scatter order,
// float32 from zero) and the head moves give the CPU device's bits. Layer
// normalisation sums its rows in a tree over lanes, not in column order,
// and the softmax's exponentials are the GPU's, so those agree to within
// rounding (and give the same bits on most elements: the log says how
// many differ); BatchedGemm sums in double where the CPU device sums in
// float32, as Gemm does.
func TestSequenceKernelsMatchCPUDevice(t *testing.T) {
	p := newDevicePair(t)
	rng := rand.New(rand.NewPCG(29, 3))

	for _, sh := range [][3]int{{1, 1, 1}, {37, 11, 40}, {70, 5, 33}} {
		n, vocab, dim := sh[0], sh[1], sh[2]
		name := fmt.Sprintf("n=%d vocab=%d dim=%d", n, vocab, dim)
		ids := tokenIDs(rng, n, vocab)
		table, dy := randFloats(rng, vocab*dim, -1, 1), randFloats(rng, n*dim, -1, 1)
		g, c := p.run([][]float32{ids, table, nanFloats(n * dim)}, func(sk device.Stream, b []device.Buffer) error {
			return sk.Embedding(n, vocab, dim, b[0], b[1], b[2])
		})
		sameBitsNaNAsNaN(t, "Embedding "+name, g, c)
		g, c = p.run([][]float32{ids, dy, nanFloats(vocab * dim)}, func(sk device.Stream, b []device.Buffer) error {
			return sk.EmbeddingGrad(n, vocab, dim, b[0], b[1], b[2])
		})
		sameBitsNaNAsNaN(t, "EmbeddingGrad "+name, g, c)
	}

	for _, sh := range [][2]int{{1, 1}, {5, 7}, {19, 70}, {70, 37}} {
		rows, cols := sh[0], sh[1]
		name := fmt.Sprintf("%dx%d", rows, cols)
		const eps = 1e-5
		x, params := randFloats(rng, rows*cols, -2, 3), randFloats(rng, 2*cols, 0.5, 1.5)
		g, c := p.run([][]float32{x, params, nanFloats(2 * rows), nanFloats(rows * cols), nanFloats(rows * cols)},
			func(sk device.Stream, b []device.Buffer) error {
				return sk.LayerNorm(rows, cols, eps, b[0], b[1], b[2], b[3], b[4])
			})
		within(t, "LayerNorm "+name, g, c, 1e-5)
		stats, xhat := c[2], c[3]
		dy := randFloats(rng, rows*cols, -1, 1)
		g, c = p.run([][]float32{dy, xhat, params, stats, nanFloats(rows * cols), nanFloats(2 * cols)},
			func(sk device.Stream, b []device.Buffer) error {
				return sk.LayerNormGrad(rows, cols, b[0], b[1], b[2], b[3], b[4], b[5])
			})
		within(t, "LayerNormGrad "+name, g, c, 1e-5)
		dx := g[4]
		g, _ = p.run([][]float32{dy, xhat, params, stats, nanFloats(2 * cols)},
			func(sk device.Stream, b []device.Buffer) error {
				return sk.LayerNormGrad(rows, cols, b[0], b[1], b[2], b[3], b[0], b[4])
			})
		sameBitsAs(t, "LayerNormGrad with dx = dy, against dx apart "+name, g[:1], [][]float32{dx})
	}

	for _, sh := range [][4]int{{1, 1, 1, 1}, {2, 3, 4, 5}, {3, 7, 2, 16}} {
		batch, seq, heads, size := sh[0], sh[1], sh[2], sh[3]
		name := fmt.Sprintf("%v", sh)
		x := randFloats(rng, batch*seq*heads*size, -1, 1)
		g, c := p.run([][]float32{x, nanFloats(len(x)), nanFloats(len(x))}, func(sk device.Stream, b []device.Buffer) error {
			if err := sk.SplitHeads(batch, seq, heads, size, b[0], b[1]); err != nil {
				return err
			}
			return sk.MergeHeads(batch, seq, heads, size, b[1], b[2])
		})
		sameBitsAs(t, "SplitHeads and MergeHeads "+name, g, c)
		sameBitsAs(t, "MergeHeads after SplitHeads "+name, g[2:], [][]float32{x})
	}

	for _, sh := range [][2]int{{3, 1}, {2, 7}, {3, 40}} {
		groups, seq := sh[0], sh[1]
		name := fmt.Sprintf("groups=%d seq=%d", groups, seq)
		const scale = 0.35
		x, dy := randFloats(rng, groups*seq*seq, -4, 4), randFloats(rng, groups*seq*seq, -1, 1)
		g, c := p.run([][]float32{x, nanFloats(len(x)), x}, func(sk device.Stream, b []device.Buffer) error {
			if err := sk.CausalSoftmax(groups, seq, scale, b[0], b[1]); err != nil {
				return err
			}
			return sk.CausalSoftmax(groups, seq, scale, b[2], b[2])
		})
		within(t, "CausalSoftmax "+name, g, c, 1e-6)
		sameBitsAs(t, "CausalSoftmax in place "+name, g[2:], g[1:2])
		y := c[1]
		g, c = p.run([][]float32{y, dy, nanFloats(len(y)), dy}, func(sk device.Stream, b []device.Buffer) error {
			if err := sk.CausalSoftmaxGrad(groups, seq, scale, b[0], b[1], b[2]); err != nil {
				return err
			}
			return sk.CausalSoftmaxGrad(groups, seq, scale, b[0], b[3], b[3])
		})
		sameBitsAs(t, "CausalSoftmaxGrad "+name, g, c)
	}

	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		const count, m, n, k = 3, 9, 33, 40
		sA, sB, sC := m*k+1, k*n+2, m*n+3
		a, b, cv := randFloats(rng, sA*count, -1, 1), randFloats(rng, sB*count, -1, 1), randFloats(rng, sC*count, -1, 1)
		g, c := p.run([][]float32{a, b, cv}, func(sk device.Stream, bufs []device.Buffer) error {
			return sk.BatchedGemm(tr[0], tr[1], count, m, n, k, 0.5, bufs[0], sA, bufs[1], sB, 0.25, bufs[2], sC)
		})
		within(t, fmt.Sprintf("BatchedGemm trans %v", tr), g, c, 1e-5)
	}
}

// Each product of BatchedGemm has the bits of the same device's Gemm on
// the same operands (both tl_gemm's tiles), whatever the transposes, with
// gaps between the matrices (left as they were) and a shared B (stride 0).
func TestBatchedGemmMatchesGemm(t *testing.T) {
	d := openTest(t)
	s := mustStream(t, d)
	rng := rand.New(rand.NewPCG(31, 4))
	for _, sh := range [][3]int{{5, 7, 9}, {33, 40, 35}} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			m, n, k := sh[0], sh[1], sh[2]
			const count = 3
			sA, sB, sC := m*k+3, k*n+1, m*n+2
			if tr[0] != tr[1] {
				sB = 0
			}
			alpha, beta := float32(1.25), float32(0)
			if tr[1] {
				beta = 0.5
			}
			name := fmt.Sprintf("%dx%dx%d trans %v", m, n, k, tr)
			a := randFloats(rng, sA*count, -1, 1)
			b := randFloats(rng, sB*(count-1)+k*n, -1, 1)
			c := randFloats(rng, sC*count, -1, 1)
			out := runOn(t, d, s, [][]float32{a, b, c}, func(sk device.Stream, bufs []device.Buffer) error {
				return sk.BatchedGemm(tr[0], tr[1], count, m, n, k, alpha, bufs[0], sA, bufs[1], sB, beta, bufs[2], sC)
			})
			got := out[2]
			for i := range count {
				ab, bb := mustUpload(t, d, a[i*sA:i*sA+m*k]), mustUpload(t, d, b[i*sB:i*sB+k*n])
				cb := mustUpload(t, d, c[i*sC:i*sC+m*n])
				check(t, "Gemm", s.Gemm(tr[0], tr[1], m, n, k, alpha, ab, bb, beta, cb))
				check(t, "Synchronize", s.Synchronize())
				want := mustDownload(t, d, cb)
				for _, buf := range []device.Buffer{ab, bb, cb} {
					check(t, "Free", d.Free(buf))
				}
				identicalBits(t, fmt.Sprintf("BatchedGemm %s product %d", name, i), got[i*sC:i*sC+m*n], want)
				identicalBits(t, fmt.Sprintf("BatchedGemm %s gap after product %d", name, i), got[i*sC+m*n:(i+1)*sC], c[i*sC+m*n:(i+1)*sC])
			}
		}
	}
}

// attentionStep is a chain through every sequence kernel: an embedding,
// layer normalisation, the head split, the score product, the causal
// softmax and its gradient, the head merge and the backward kernels.
type attentionStep struct {
	n, vocab, dim, heads, size, seq, batch          int
	ids, table, params, stats, xhat, h, q, scores   device.Buffer
	probs, dscores, dq, merged, dh, dparams, dtable device.Buffer
}

func newAttentionStep(t *testing.T, d device.Device, rng *rand.Rand) *attentionStep {
	a := &attentionStep{vocab: 13, heads: 2, size: 8, seq: 6, batch: 2}
	a.dim = a.heads * a.size
	a.n = a.batch * a.seq
	ids := make([]float32, a.n)
	for i := range ids {
		ids[i] = float32(rng.IntN(a.vocab))
	}
	groups := a.batch * a.heads
	a.ids, a.table = mustUpload(t, d, ids), mustUpload(t, d, randFloats(rng, a.vocab*a.dim, -1, 1))
	a.params = mustUpload(t, d, randFloats(rng, 2*a.dim, 0.5, 1.5))
	a.stats, a.xhat, a.h = mustUpload(t, d, nanFloats(2*a.n)), mustUpload(t, d, nanFloats(a.n*a.dim)), mustUpload(t, d, nanFloats(a.n*a.dim))
	a.q = mustUpload(t, d, nanFloats(a.n*a.dim))
	a.scores, a.probs = mustUpload(t, d, nanFloats(groups*a.seq*a.seq)), mustUpload(t, d, nanFloats(groups*a.seq*a.seq))
	a.dscores, a.dq = mustUpload(t, d, nanFloats(groups*a.seq*a.seq)), mustUpload(t, d, nanFloats(a.n*a.dim))
	a.merged, a.dh = mustUpload(t, d, nanFloats(a.n*a.dim)), mustUpload(t, d, nanFloats(a.n*a.dim))
	a.dparams, a.dtable = mustUpload(t, d, nanFloats(2*a.dim)), mustUpload(t, d, nanFloats(a.vocab*a.dim))
	return a
}

// attentionStepKernels is the number of launches (graph nodes) of run:
// LayerNormGrad is two.
const attentionStepKernels = 11

func (a *attentionStep) run(s device.Stream) error {
	sk := s.(device.SequenceKernels)
	groups, sz := a.batch*a.heads, a.seq*a.size
	scale := float32(1 / math.Sqrt(float64(a.size)))
	return first(
		sk.Embedding(a.n, a.vocab, a.dim, a.ids, a.table, a.h),
		sk.LayerNorm(a.n, a.dim, 1e-5, a.h, a.params, a.stats, a.xhat, a.merged),
		sk.SplitHeads(a.batch, a.seq, a.heads, a.size, a.merged, a.q),
		sk.BatchedGemm(false, true, groups, a.seq, a.seq, a.size, 1, a.q, sz, a.q, sz, 0, a.scores, a.seq*a.seq),
		sk.CausalSoftmax(groups, a.seq, scale, a.scores, a.probs),
		sk.CausalSoftmaxGrad(groups, a.seq, scale, a.probs, a.probs, a.dscores),
		sk.BatchedGemm(false, false, groups, a.seq, a.size, a.seq, 1, a.dscores, a.seq*a.seq, a.q, sz, 0, a.dq, sz),
		sk.MergeHeads(a.batch, a.seq, a.heads, a.size, a.dq, a.merged),
		sk.LayerNormGrad(a.n, a.dim, a.merged, a.xhat, a.params, a.stats, a.dh, a.dparams),
		sk.EmbeddingGrad(a.n, a.vocab, a.dim, a.ids, a.dh, a.dtable),
	)
}

func (a *attentionStep) outputs() map[string]device.Buffer {
	return map[string]device.Buffer{"stats": a.stats, "xhat": a.xhat, "scores": a.scores, "probs": a.probs,
		"dscores": a.dscores, "dq": a.dq, "dh": a.dh, "dparams": a.dparams, "dtable": a.dtable}
}

// A captured chain of every sequence kernel replays with eager execution's
// bits, as one graph node per launch.
func TestSequenceReplayMatchesEager(t *testing.T) {
	d := openTest(t)
	eager := newAttentionStep(t, d, rand.New(rand.NewPCG(37, 5)))
	replay := newAttentionStep(t, d, rand.New(rand.NewPCG(37, 5)))
	se, sr := mustStream(t, d), mustStream(t, d)
	check(t, "eager", eager.run(se))
	check(t, "Synchronize", se.Synchronize())

	check(t, "BeginCapture", sr.BeginCapture(device.CaptureGlobal))
	check(t, "captured", replay.run(sr))
	g, err := sr.EndCapture()
	check(t, "EndCapture", err)
	if g.Nodes() != attentionStepKernels {
		t.Errorf("captured chain has %d nodes, want %d", g.Nodes(), attentionStepKernels)
	}
	x, err := d.Instantiate(g)
	check(t, "Instantiate", err)
	check(t, "Launch", sr.Launch(x))
	check(t, "Synchronize", sr.Synchronize())
	check(t, "Exec.Destroy", x.Destroy())
	check(t, "Graph.Destroy", g.Destroy())

	got := replay.outputs()
	for name, b := range eager.outputs() {
		identicalBits(t, "replayed "+name, mustDownload(t, d, got[name]), mustDownload(t, d, b))
	}
}

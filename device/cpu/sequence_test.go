package cpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/device/devicetest"
)

// TestSequenceConformance runs the sequence kernels' suite
// (device.SequenceKernels).
func TestSequenceConformance(t *testing.T) {
	devicetest.RunSequence(t, open)
}

// seqShape is an attention layer's geometry for the sequence rig: sizes
// large enough to split across threads and not multiples of any part's
// alignment.
type seqShape struct {
	batch, seq, heads, size int
	vocab, tokens, dim      int // the embedding's, apart from the layer's
}

func (s seqShape) rows() int   { return s.batch * s.seq }
func (s seqShape) width() int  { return s.heads * s.size }
func (s seqShape) groups() int { return s.batch * s.heads }
func (s seqShape) scores() int { return s.groups() * s.seq * s.seq }

var rigSeq = seqShape{batch: 4, seq: 67, heads: 3, size: 24, vocab: 301, tokens: 2003, dim: 80}

// The small products of the rig's BatchedGemm split over the products.
const smallCount, smallM, smallN, smallK = 97, 9, 11, 13

// seqRig holds every sequence kernel's buffers on one device.
type seqRig struct {
	d     device.Device
	s     device.Stream
	shape seqShape
	bufs  map[string]device.Buffer
	names []string // bufs in a fixed order
}

func newSeqRig(t testing.TB, threads int, sh seqShape) *seqRig {
	t.Helper()
	d := openWith(t, cpu.Config{Threads: threads})
	s, err := d.NewStream()
	must(t, err)
	t.Cleanup(func() { _ = s.Destroy() })
	r := &seqRig{d: d, s: s, shape: sh, bufs: map[string]device.Buffer{}}
	rng := rand.New(rand.NewPCG(29, 3))
	put := func(name string, v []float32) {
		b, err := d.Alloc(len(v))
		must(t, err)
		must(t, d.Upload(b, v))
		r.bufs[name] = b
		r.names = append(r.names, name)
	}
	add := func(name string, n int, lo, hi float32) {
		v := make([]float32, n)
		for i := range v {
			v[i] = lo + (hi-lo)*rng.Float32()
		}
		put(name, v)
	}
	ids := make([]float32, sh.tokens)
	for i := range ids {
		ids[i] = float32(rng.IntN(sh.vocab))
	}
	ids[7], ids[100] = -1, float32(math.NaN()) // rows of NaN; nothing added
	put("ids", ids)
	add("table", sh.vocab*sh.dim, -1, 1)
	add("emb", sh.tokens*sh.dim, 0, 0)
	add("demb", sh.tokens*sh.dim, -1, 1)
	add("dtable", sh.vocab*sh.dim, 0, 0)
	n, w := sh.rows(), sh.width()
	add("x", n*w, -2, 3)
	add("params", 2*w, 0.5, 1.5)
	add("stats", 2*n, 0, 0)
	add("xhat", n*w, 0, 0)
	add("y", n*w, 0, 0)
	add("dy", n*w, -1, 1)
	add("dx", n*w, 0, 0)
	add("dparams", 2*w, 0, 0)
	add("q", n*w, 0, 0)
	add("scores", sh.scores(), 0, 0)
	add("probs", sh.scores(), 0, 0)
	add("ctx", n*w, 0, 0)
	add("merged", n*w, 0, 0)
	add("dprobs", sh.scores(), -1, 1)
	add("dscores", sh.scores(), 0, 0)
	add("sa", smallCount*smallM*smallK, -1, 1)
	add("sb", smallN*smallK, -1, 1)
	add("sc", smallCount*smallM*smallN, -1, 1)
	return r
}

// step enqueues every sequence kernel once, in the order of an attention
// layer's forward and backward passes.
func (r *seqRig) step(s device.Stream) error {
	sk := s.(device.SequenceKernels)
	b, sh := r.bufs, r.shape
	n, w, g, tt, hs := sh.rows(), sh.width(), sh.groups(), sh.seq*sh.seq, sh.seq*sh.size
	scale := float32(1 / math.Sqrt(float64(sh.size)))
	return first(
		sk.Embedding(sh.tokens, sh.vocab, sh.dim, b["ids"], b["table"], b["emb"]),
		sk.EmbeddingGrad(sh.tokens, sh.vocab, sh.dim, b["ids"], b["demb"], b["dtable"]),
		sk.LayerNorm(n, w, 1e-5, b["x"], b["params"], b["stats"], b["xhat"], b["y"]),
		sk.LayerNormGrad(n, w, b["dy"], b["xhat"], b["params"], b["stats"], b["dx"], b["dparams"]),
		sk.SplitHeads(sh.batch, sh.seq, sh.heads, sh.size, b["y"], b["q"]),
		sk.BatchedGemm(false, true, g, sh.seq, sh.seq, sh.size, 1, b["q"], hs, b["q"], hs, 0, b["scores"], tt),
		sk.CausalSoftmax(g, sh.seq, scale, b["scores"], b["probs"]),
		sk.BatchedGemm(false, false, g, sh.seq, sh.size, sh.seq, 1, b["probs"], tt, b["q"], hs, 0, b["ctx"], hs),
		sk.MergeHeads(sh.batch, sh.seq, sh.heads, sh.size, b["ctx"], b["merged"]),
		sk.CausalSoftmaxGrad(g, sh.seq, scale, b["probs"], b["dprobs"], b["dscores"]),
		sk.BatchedGemm(false, true, smallCount, smallM, smallN, smallK, 1, b["sa"], smallM*smallK, b["sb"], 0, 0.5, b["sc"], smallM*smallN),
	)
}

func (r *seqRig) contents(t testing.TB) [][]float32 {
	t.Helper()
	must(t, r.s.Synchronize())
	out := make([][]float32, len(r.names))
	for i, name := range r.names {
		out[i] = make([]float32, r.bufs[name].Len())
		must(t, r.d.Download(out[i], r.bufs[name]))
	}
	return out
}

// TestSequenceKernelsSameBitsAtAnyThreadCount: the sequence kernels split
// only over rows, columns or products whose results do not depend on
// each other, so one thread and several give the same bits.
func TestSequenceKernelsSameBitsAtAnyThreadCount(t *testing.T) {
	run := func(threads int) ([]string, [][]float32) {
		r := newSeqRig(t, threads, rigSeq)
		for range 2 { // the second step's small products see the first's C
			must(t, r.step(r.s))
		}
		return r.names, r.contents(t)
	}
	sameBitsAtAnyThreadCount(t, run)
}

// TestReplayedSequenceKernelsAllocateNothing: a captured graph of every
// sequence kernel, launched and waited for, allocates nothing in Go.
func TestReplayedSequenceKernelsAllocateNothing(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		r := newSeqRig(t, threads, rigSeq)
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
			t.Errorf("%d threads: a replay of the sequence kernels allocates %.1f times, want 0", threads, allocs)
		}
		must(t, x.Destroy())
		must(t, g.Destroy())
	}
}

// benchSeq is a small GPT's attention layer at batch 8: 128 positions,
// 4 heads of 32, a vocabulary of 1000 embedded in 128.
var benchSeq = seqShape{batch: 8, seq: 128, heads: 4, size: 32, vocab: 1000, tokens: 1024, dim: 128}

// BenchmarkSequenceKernels times each sequence kernel of benchSeq's layer
// at the machine's thread count, enqueued and waited for.
func BenchmarkSequenceKernels(b *testing.B) {
	r := newSeqRig(b, 0, benchSeq)
	sk := r.s.(device.SequenceKernels)
	bf, sh := r.bufs, r.shape
	n, w, g, tt, hs := sh.rows(), sh.width(), sh.groups(), sh.seq*sh.seq, sh.seq*sh.size
	kernels := []struct {
		name string
		run  func() error
	}{
		{"Embedding", func() error { return sk.Embedding(sh.tokens, sh.vocab, sh.dim, bf["ids"], bf["table"], bf["emb"]) }},
		{"EmbeddingGrad", func() error {
			return sk.EmbeddingGrad(sh.tokens, sh.vocab, sh.dim, bf["ids"], bf["demb"], bf["dtable"])
		}},
		{"LayerNorm", func() error { return sk.LayerNorm(n, w, 1e-5, bf["x"], bf["params"], bf["stats"], bf["xhat"], bf["y"]) }},
		{"LayerNormGrad", func() error {
			return sk.LayerNormGrad(n, w, bf["dy"], bf["xhat"], bf["params"], bf["stats"], bf["dx"], bf["dparams"])
		}},
		{"SplitHeads", func() error { return sk.SplitHeads(sh.batch, sh.seq, sh.heads, sh.size, bf["y"], bf["q"]) }},
		{"MergeHeads", func() error { return sk.MergeHeads(sh.batch, sh.seq, sh.heads, sh.size, bf["ctx"], bf["merged"]) }},
		{"BatchedGemm/scores", func() error {
			return sk.BatchedGemm(false, true, g, sh.seq, sh.seq, sh.size, 1, bf["q"], hs, bf["q"], hs, 0, bf["scores"], tt)
		}},
		{"BatchedGemm/context", func() error {
			return sk.BatchedGemm(false, false, g, sh.seq, sh.size, sh.seq, 1, bf["probs"], tt, bf["q"], hs, 0, bf["ctx"], hs)
		}},
		{"CausalSoftmax", func() error { return sk.CausalSoftmax(g, sh.seq, 0.17, bf["scores"], bf["probs"]) }},
		{"CausalSoftmaxGrad", func() error { return sk.CausalSoftmaxGrad(g, sh.seq, 0.17, bf["probs"], bf["dprobs"], bf["dscores"]) }},
	}
	for _, k := range kernels {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				must(b, k.run())
				must(b, r.s.Synchronize())
			}
		})
	}
}

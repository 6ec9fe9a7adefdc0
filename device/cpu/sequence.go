package cpu

import (
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// The sequence kernels of the device contract (device.SequenceKernels):
// token embedding, layer normalisation, and the pieces of causal
// multi-head self-attention.
//
// As the image kernels, every kernel splits only over outputs that do not
// depend on each other, so its bits never depend on the thread count:
// the embedding, layer normalisation, the head moves and the softmax split
// over rows (a row's sums run whole, in column order, in one part); the
// column sums of EmbeddingGrad and LayerNormGrad split over columns, each
// summed in row order by one part. Where the contract leaves an
// element's last steps open (the softmax, its gradient, the layer
// normalisation's dx) they run in float64 from the float64 sums and are
// rounded once.

var _ device.SequenceKernels = (*stream)(nil)

// seqColBlock is how many column sums a part keeps at once, in float64 on
// the stack.
const seqColBlock = 64

// tokenRow returns the table row a float32 token id names, if it names
// one: an integer in [0, vocab).
func tokenRow(id float32, vocab int) (int, bool) {
	v := float64(id)
	if !(v >= 0 && v < float64(vocab)) {
		return 0, false
	}
	r := int(v)
	return r, float64(r) == v
}

// embed writes the rows lo..hi of y: each its token's row of table, or
// NaN for an id that names none.
func embed(vocab, dim, lo, hi int, ids, table, y []float32) {
	nan := float32(math.NaN())
	for i := lo; i < hi; i++ {
		out := y[i*dim : (i+1)*dim]
		if v, ok := tokenRow(ids[i], vocab); ok {
			copy(out, table[v*dim:(v+1)*dim])
			continue
		}
		for j := range out {
			out[j] = nan
		}
	}
}

// embedGrad adds the columns lo..hi of each row of dy to its token's row
// of dtable, in increasing row order; dtable was cleared before.
func embedGrad(n, vocab, dim, lo, hi int, ids, dy, dtable []float32) {
	for i := range n {
		v, ok := tokenRow(ids[i], vocab)
		if !ok {
			continue
		}
		dst, src := dtable[v*dim+lo:v*dim+hi], dy[i*dim+lo:i*dim+hi]
		for j, d := range src {
			dst[j] += d
		}
	}
}

func (s *stream) Embedding(n, vocab, dim int, ids, table, y device.Buffer) error {
	return s.launch("Embedding", device.CheckEmbedding(n, vocab, dim, ids, y, table), func(v [][]float32) func(*team) {
		ids, table, y := v[0], v[1], v[2]
		r := &rangeTask{total: n, align: 1, cost: dim, grain: elemGrain, fn: func(lo, hi int) { embed(vocab, dim, lo, hi, ids, table, y) }}
		return r.run
	}, ids, table, y)
}

// EmbeddingGrad clears dtable, split over its elements, then adds the rows
// of dy split over the columns: each part walks every row in order, so
// each element gets its terms in increasing row order, from zero.
func (s *stream) EmbeddingGrad(n, vocab, dim int, ids, dy, dtable device.Buffer) error {
	return s.launch("EmbeddingGrad", device.CheckEmbedding(n, vocab, dim, ids, dy, dtable), func(v [][]float32) func(*team) {
		ids, dy, dtable := v[0], v[1], v[2]
		zero := &rangeTask{total: vocab * dim, align: 16, cost: 1, grain: elemGrain, fn: func(lo, hi int) { clear(dtable[lo:hi]) }}
		add := &rangeTask{total: dim, align: 16, cost: n, grain: elemGrain, fn: func(lo, hi int) {
			embedGrad(n, vocab, dim, lo, hi, ids, dy, dtable)
		}}
		return inTurn(zero, add)
	}, ids, dy, dtable)
}

// layerNorm normalises the rows lo..hi of x: each row's mean, then its
// biased variance around the float64 mean, summed in float64 in column
// order; the statistics stored rounded to float32; xhat and y computed in
// float32 from the stored statistics.
func layerNorm(rows, cols, lo, hi int, eps float32, x, params, stats, xhat, y []float32) {
	gamma, beta := params[:cols], params[cols:2*cols]
	for r := lo; r < hi; r++ {
		xr := x[r*cols : (r+1)*cols]
		var sum, sq float64
		for _, v := range xr {
			sum += float64(v)
		}
		m := sum / float64(cols)
		for _, v := range xr {
			d := float64(v) - m
			sq += d * d
		}
		mean, inv := float32(m), float32(1/math.Sqrt(sq/float64(cols)+float64(eps)))
		stats[r], stats[rows+r] = mean, inv
		xh, yr := xhat[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		for j, v := range xr {
			h := float32((v - mean) * inv)
			xh[j] = h
			yr[j] = float32(gamma[j]*h) + beta[j]
		}
	}
}

// layerNormParamGrad writes dgamma = Σ dy·xhat and dbeta = Σ dy for the
// columns lo..hi, each summed in float64 in row order.
func layerNormParamGrad(rows, cols, lo, hi int, dy, xhat, dparams []float32) {
	var dg, db [seqColBlock]float64
	for j0 := lo; j0 < hi; j0 += seqColBlock {
		w := min(seqColBlock, hi-j0)
		g, b := dg[:w], db[:w]
		clear(g)
		clear(b)
		for r := range rows {
			xh := xhat[r*cols+j0:][:w]
			for j, d := range dy[r*cols+j0:][:w] {
				b[j] += float64(d)
				g[j] += float64(d) * float64(xh[j])
			}
		}
		for j := range g {
			dparams[j0+j] = float32(g[j])
			dparams[cols+j0+j] = float32(b[j])
		}
	}
}

// layerNormInputGrad writes the rows lo..hi of dx: with g = gamma·dy,
// invstd·(g - mean(g) - xhat·mean(g·xhat)), the means summed in float64
// in column order and each element computed in float64 and rounded once.
func layerNormInputGrad(rows, cols, lo, hi int, dy, xhat, params, stats, dx []float32) {
	gamma := params[:cols]
	n := float64(cols)
	for r := lo; r < hi; r++ {
		dr, xh, out := dy[r*cols:(r+1)*cols], xhat[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
		var sg, sgx float64
		for j, d := range dr {
			g := float64(gamma[j]) * float64(d)
			sg += g
			sgx += g * float64(xh[j])
		}
		mg, mgx, inv := sg/n, sgx/n, float64(stats[rows+r])
		for j, d := range dr {
			g := float64(gamma[j]) * float64(d)
			out[j] = float32(inv * (g - mg - float64(xh[j])*mgx))
		}
	}
}

func (s *stream) LayerNorm(rows, cols int, eps float32, x, params, stats, xhat, y device.Buffer) error {
	check := device.CheckLayerNormTrain(rows, cols, eps, x, params, stats, xhat, y)
	return s.launch("LayerNorm", check, func(v [][]float32) func(*team) {
		x, params, stats, xhat, y := v[0], v[1], v[2], v[3], v[4]
		r := &rangeTask{total: rows, align: 1, cost: 4 * cols, grain: elemGrain, fn: func(lo, hi int) {
			layerNorm(rows, cols, lo, hi, eps, x, params, stats, xhat, y)
		}}
		return r.run
	}, x, params, stats, xhat, y)
}

// LayerNormGrad sums dparams over the rows first, then writes dx row by
// row: dy is read whole before any of dx is written.
func (s *stream) LayerNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams device.Buffer) error {
	check := device.CheckLayerNorm(rows, cols, []device.Buffer{dy, xhat, dx}, stats, []device.Buffer{params, dparams})
	return s.launch("LayerNormGrad", check, func(v [][]float32) func(*team) {
		dy, xhat, params, stats, dx, dparams := v[0], v[1], v[2], v[3], v[4], v[5]
		// Parts of 16 columns: a cache line of each row.
		sums := &rangeTask{total: cols, align: 16, cost: 2 * rows, grain: elemGrain, fn: func(lo, hi int) {
			layerNormParamGrad(rows, cols, lo, hi, dy, xhat, dparams)
		}}
		return inTurn(sums, &rangeTask{total: rows, align: 1, cost: 4 * cols, grain: elemGrain, fn: func(lo, hi int) {
			layerNormInputGrad(rows, cols, lo, hi, dy, xhat, params, stats, dx)
		}})
	}, dy, xhat, params, stats, dx, dparams)
}

// heads is the geometry of SplitHeads and MergeHeads.
type heads struct{ seq, heads, size int }

// move copies the positions lo..hi (batch·seq units) of x (batch, seq,
// width) to y (batch, heads, seq, size); with merge, the other way.
func (h heads) move(merge bool, lo, hi int, x, y []float32) {
	width := h.heads * h.size
	for u := lo; u < hi; u++ {
		b, t := u/h.seq, u%h.seq
		wide := u * width // (b, t) in the (batch, seq, width) layout
		for k := range h.heads {
			split := ((b*h.heads+k)*h.seq + t) * h.size
			if merge {
				copy(y[wide+k*h.size:wide+(k+1)*h.size], x[split:split+h.size])
			} else {
				copy(y[split:split+h.size], x[wide+k*h.size:wide+(k+1)*h.size])
			}
		}
	}
}

func (s *stream) moveHeads(op string, merge bool, batch, seq, nh, size int, x, y device.Buffer) error {
	return s.launch(op, device.CheckHeads(batch, seq, nh, size, x, y), func(v [][]float32) func(*team) {
		h, x, y := heads{seq: seq, heads: nh, size: size}, v[0], v[1]
		r := &rangeTask{total: batch * seq, align: 1, cost: nh * size, grain: elemGrain, fn: func(lo, hi int) { h.move(merge, lo, hi, x, y) }}
		return r.run
	}, x, y)
}

func (s *stream) SplitHeads(batch, seq, heads, size int, x, y device.Buffer) error {
	return s.moveHeads("SplitHeads", false, batch, seq, heads, size, x, y)
}

func (s *stream) MergeHeads(batch, seq, heads, size int, x, y device.Buffer) error {
	return s.moveHeads("MergeHeads", true, batch, seq, heads, size, x, y)
}

// batchedSmall is the largest product (m·n·k) that BatchedGemm computes
// whole in one part, with the plain loop, splitting over the products
// instead: attention's products of a short sequence are many and small.
// The loop keeps its row of A on the stack up to k = 256, so a longer k
// takes the Gemm path.
const (
	batchedSmall = 1 << 14
	batchedLoopK = 256
)

// batchedGemm is BatchedGemm's products: small ones split over the
// products, each computed by gemmLoop; larger ones run one after another,
// each split as Gemm splits it. Every path gives an element the bits of
// Gemm's definition (gemm.go), so the choice changes no result.
type batchedGemm struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        [][]float32 // each product's operands
	large          []*gemmTask // the products when they are not small
}

func newBatchedGemm(transA, transB bool, count, m, n, k int, alpha float32, a []float32, strideA int, b []float32, strideB int,
	beta float32, c []float32, strideC int) *batchedGemm {
	bg := &batchedGemm{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta,
		a: make([][]float32, count), b: make([][]float32, count), c: make([][]float32, count)}
	for i := range count {
		bg.a[i] = a[i*strideA : i*strideA+m*k]
		bg.b[i] = b[i*strideB : i*strideB+k*n]
		bg.c[i] = c[i*strideC : i*strideC+m*n]
	}
	if m*n*k > batchedSmall || k > batchedLoopK {
		bg.large = make([]*gemmTask, count)
		for i := range count {
			bg.large[i] = newGemmTask(transA, transB, m, n, k, alpha, bg.a[i], bg.b[i], beta, bg.c[i])
		}
	}
	return bg
}

func (bg *batchedGemm) run(t *team) {
	if bg.large != nil {
		for _, g := range bg.large {
			g.run(t)
		}
		return
	}
	count := len(bg.c)
	t.run(bg, min(count, t.parts(count*bg.m*bg.n*bg.k, gemmGrain)))
}

func (bg *batchedGemm) part(i, parts int, _ *scratch) {
	lo, hi := span(i, parts, len(bg.c), 1)
	for p := lo; p < hi; p++ {
		gemmLoop(bg.transA, bg.transB, bg.m, bg.n, bg.k, bg.alpha, bg.a[p], bg.b[p], bg.beta, bg.c[p])
	}
}

func (s *stream) BatchedGemm(transA, transB bool, count, m, n, k int, alpha float32, a device.Buffer, strideA int, b device.Buffer, strideB int,
	beta float32, c device.Buffer, strideC int) error {
	check := device.CheckBatchedGemm(count, m, n, k, a, strideA, b, strideB, c, strideC)
	return s.launch("BatchedGemm", check, func(v [][]float32) func(*team) {
		return newBatchedGemm(transA, transB, count, m, n, k, alpha, v[0], strideA, v[1], strideB, beta, v[2], strideC).run
	}, a, b, c)
}

// softmaxStack is the longest row whose exponentials causalSoftmax keeps
// on the stack; a longer row computes each twice (the same bits).
const softmaxStack = 512

// causalSoftmax writes the rows lo..hi (groups·seq units) of y: row t is
// the softmax of scale·x over the columns 0..t, the maximum taken first,
// the exponentials of scale·(x - max) in float64 summed in increasing
// column order, each output their quotient rounded once; the columns
// beyond t are 0. Each row of x is read before its row of y is written,
// so y may be x.
func causalSoftmax(seq, lo, hi int, scale float32, x, y []float32) {
	var buf [softmaxStack]float64
	sc := float64(scale)
	for r := lo; r < hi; r++ {
		t := r % seq
		xr, yr := x[r*seq:r*seq+t+1], y[r*seq:(r+1)*seq]
		top := xr[0]
		for _, v := range xr[1:] {
			if v > top {
				top = v
			}
		}
		tf := float64(top)
		var sum float64
		for c := 0; c < len(xr); c += softmaxStack {
			e := buf[:min(len(xr)-c, softmaxStack)]
			expShifted(xr[c:c+len(e)], tf, sc, 0, e)
			for _, v := range e {
				sum += v
			}
		}
		// A row longer than the stack's exponentials has them made again,
		// a chunk at a time, each chunk read before it is written.
		for c := 0; c < len(xr); c += softmaxStack {
			e := buf[:min(len(xr)-c, softmaxStack)]
			if len(xr) > softmaxStack {
				expShifted(xr[c:c+len(e)], tf, sc, 0, e)
			}
			for j, v := range e {
				yr[c+j] = float32(v / sum)
			}
		}
		clear(yr[t+1:])
	}
}

// causalSoftmaxGrad writes the rows lo..hi of dx: for j <= t,
// scale·y·(dy - Σ dy·y), the sum in float64 in increasing column order
// and each element in float64 rounded once; 0 beyond t. Each row of dy is
// read before its row of dx is written, so dx may be dy.
func causalSoftmaxGrad(seq, lo, hi int, scale float32, y, dy, dx []float32) {
	sc := float64(scale)
	for r := lo; r < hi; r++ {
		t := r % seq
		yr, dr, out := y[r*seq:r*seq+t+1], dy[r*seq:r*seq+t+1], dx[r*seq:(r+1)*seq]
		var s float64
		for j, v := range yr {
			s += float64(dr[j]) * float64(v)
		}
		for j, v := range yr {
			out[j] = float32(sc * float64(v) * (float64(dr[j]) - s))
		}
		clear(out[t+1:])
	}
}

// inTurn runs first, then second, as one kernel: team.run returns once
// every part of first is done.
func inTurn(first, second *rangeTask) func(*team) {
	return func(t *team) {
		first.run(t)
		second.run(t)
	}
}

// overScoreRows makes a kernel split over the groups·seq rows of seq×seq
// score matrices.
func overScoreRows(groups, seq, cost int, fn func(lo, hi int)) func(*team) {
	r := &rangeTask{total: groups * seq, align: 1, cost: cost * seq, grain: elemGrain, fn: fn}
	return r.run
}

func (s *stream) CausalSoftmax(groups, seq int, scale float32, x, y device.Buffer) error {
	return s.launch("CausalSoftmax", device.CheckCausalSoftmax(groups, seq, scale, x, y), func(v [][]float32) func(*team) {
		x, y := v[0], v[1]
		return overScoreRows(groups, seq, 16, func(lo, hi int) { causalSoftmax(seq, lo, hi, scale, x, y) })
	}, x, y)
}

func (s *stream) CausalSoftmaxGrad(groups, seq int, scale float32, y, dy, dx device.Buffer) error {
	return s.launch("CausalSoftmaxGrad", device.CheckCausalSoftmax(groups, seq, scale, y, dy, dx), func(v [][]float32) func(*team) {
		y, dy, dx := v[0], v[1], v[2]
		return overScoreRows(groups, seq, 2, func(lo, hi int) { causalSoftmaxGrad(seq, lo, hi, scale, y, dy, dx) })
	}, y, dy, dx)
}

package cpu

// gemm computes c = alpha*op(a)*op(b) + beta*c as device.Kernels.Gemm does,
// on the team's threads.
//
// A product is split into parts along the larger of C's two dimensions, in
// multiples of gemmAlign, one part per thread at most and only when each
// part has at least gemmGrain multiply-adds: splitting the rows of C makes
// every part pack all of op(B), splitting the columns all of op(A), so the
// larger dimension is the one whose split repeats the smaller packing. Each
// element of C is computed by one BLAS call over the whole k, so the
// result depends on the shape and the thread count only.
type gemmTask struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32
	byRows         bool
}

// gemmGrain is the least work (multiply-adds) worth a part of its own:
// below it, handing the part to another thread costs more than it saves
// (TestGemmRatio's table, docs/cpu-results.md).
const gemmGrain = 1 << 17

// gemmAlign keeps the parts' edges on multiples of the BLAS kernels' row
// and column blocking, so no part ends in a ragged block but the last.
const gemmAlign = 16

func newGemmTask(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) *gemmTask {
	return &gemmTask{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta, a: a, b: b, c: c, byRows: m >= n}
}

func (g *gemmTask) run(t *team) {
	if g.m*g.n*g.k <= smallGemm {
		gemmLoop(g.transA, g.transB, g.m, g.n, g.k, g.alpha, g.a, g.b, g.beta, g.c)
		return
	}
	parts := 1
	if gemmSplits {
		dim := g.n
		if g.byRows {
			dim = g.m
		}
		parts = min(t.parts(g.m*g.n*g.k, gemmGrain), (dim+gemmAlign-1)/gemmAlign)
	}
	t.run(g, parts)
}

func (g *gemmTask) part(i, parts int) {
	m, n, k := g.m, g.n, g.k
	lda, ldb := k, n
	if g.transA {
		lda = m
	}
	if g.transB {
		ldb = k
	}
	if parts == 1 {
		sgemmStrided(g.transA, g.transB, m, n, k, g.alpha, g.a, lda, g.b, ldb, g.beta, g.c, n)
		return
	}
	a, b, c := g.a, g.b, g.c
	if g.byRows {
		lo, hi := span(i, parts, m, gemmAlign)
		if lo == hi {
			return
		}
		if g.transA { // op(A) row i is column i of the k×m A
			a = a[lo:]
		} else {
			a = a[lo*k:]
		}
		c = c[lo*n:]
		m = hi - lo
	} else {
		lo, hi := span(i, parts, n, gemmAlign)
		if lo == hi {
			return
		}
		if g.transB { // op(B) column j is row j of the n×k B
			b = b[lo*k:]
		} else {
			b = b[lo:]
		}
		c = c[lo:]
		n = hi - lo
	}
	sgemmStrided(g.transA, g.transB, m, n, k, g.alpha, a, lda, b, ldb, g.beta, c, g.n)
}

// smallGemm is the size (multiply-adds) up to which the plain loop beats a
// BLAS call (BenchmarkGemm: 8x16x2 takes 0.28 µs looped, 0.79 µs through
// gonum).
const smallGemm = 4096

// gemmLoop is the plain triple loop, for products too small to be worth a
// BLAS call: which of the two runs depends only on the shape, so a shape
// always gives the same bits. It adds in the same order as gonum's kernels,
// so with the pure-Go BLAS both give the same bits (TestGemmMatchesNaive).
func gemmLoop(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	// t holds alpha*A[i,:] for the row being computed.
	var tBuf [256]float32
	var t []float32
	if k <= len(tBuf) {
		t = tBuf[:k]
	} else {
		t = make([]float32, k)
	}
	for i := 0; i < m; i++ {
		ci := c[i*n : (i+1)*n]
		switch beta {
		case 0:
			clear(ci)
		case 1:
		default:
			scale(ci, beta)
		}
		if transA {
			for l := range t {
				t[l] = alpha * a[l*m+i]
			}
		} else {
			for l, v := range a[i*k : (i+1)*k] {
				t[l] = alpha * v
			}
		}
		// Each C[i,j] is summed in a register, adding the products in l
		// order, as gonum does; four columns at a time, so that four
		// independent sums hide the latency of each addition. The float32
		// conversions keep each product rounded on its own (no fused
		// multiply-add), as gonum's assembly kernels on amd64 do at every
		// GOAMD64 level. (Where gonum falls back to Go, as on arm64, the
		// compiler may fuse its additions; TestGemmMatchesNaive then tells.) Operands this
		// small sit in L1, so B's stride when it is not transposed costs
		// little.
		bs, bl := k, 1 // B[l,j] = b[j*bs+l*bl]
		if !transB {
			bs, bl = 1, n
		}
		j := 0
		for ; j+4 <= n; j += 4 {
			a0, a1, a2, a3 := ci[j], ci[j+1], ci[j+2], ci[j+3]
			o := j * bs
			for l, tl := range t {
				if tl == 0 { // gonum skips zero products
					continue
				}
				p := o + l*bl
				a0 += float32(tl * b[p])
				a1 += float32(tl * b[p+bs])
				a2 += float32(tl * b[p+2*bs])
				a3 += float32(tl * b[p+3*bs])
			}
			ci[j], ci[j+1], ci[j+2], ci[j+3] = a0, a1, a2, a3
		}
		for ; j+2 <= n; j += 2 {
			a0, a1 := ci[j], ci[j+1]
			o := j * bs
			for l, tl := range t {
				if tl == 0 {
					continue
				}
				p := o + l*bl
				a0 += float32(tl * b[p])
				a1 += float32(tl * b[p+bs])
			}
			ci[j], ci[j+1] = a0, a1
		}
		for ; j < n; j++ {
			a0 := ci[j]
			o := j * bs
			for l, tl := range t {
				if tl != 0 {
					a0 += float32(tl * b[o+l*bl])
				}
			}
			ci[j] = a0
		}
	}
}

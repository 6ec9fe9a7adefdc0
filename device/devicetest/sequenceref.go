package devicetest

import (
	"math"
)

// Float64 references for the kernels of device.SequenceKernels, in the
// manner of ref.go: each output evaluated from its definition in float64
// from the float32 inputs, with no care for speed and no code shared with
// any backend.

// refTokenID returns the table row a float32 token id names, if it names
// one: an integer in [0, vocab).
func refTokenID(id float32, vocab int) (int, bool) {
	v := float64(id)
	if !(v >= 0 && v < float64(vocab)) || v != math.Trunc(v) {
		return 0, false
	}
	return int(v), true
}

// RefEmbedding returns y (n×dim): row i is row ids[i] of table, or NaN
// where ids[i] names no row.
func RefEmbedding(n, vocab, dim int, ids, table []float32) []float64 {
	y := make([]float64, n*dim)
	for i := range n {
		v, ok := refTokenID(ids[i], vocab)
		for d := range dim {
			if ok {
				y[i*dim+d] = float64(table[v*dim+d])
			} else {
				y[i*dim+d] = math.NaN()
			}
		}
	}
	return y
}

// RefEmbeddingGrad returns dtable (vocab×dim): row v is the sum of the rows
// of dy whose id is v; invalid ids add nothing.
func RefEmbeddingGrad(n, vocab, dim int, ids, dy []float32) []float64 {
	dt := make([]float64, vocab*dim)
	for v := range vocab {
		for d := range dim {
			var sum float64
			for i := range n {
				if id, ok := refTokenID(ids[i], vocab); ok && id == v {
					sum += float64(dy[i*dim+d])
				}
			}
			dt[v*dim+d] = sum
		}
	}
	return dt
}

// LayerNormResult is what RefLayerNorm computes: the row statistics
// (means, then invstd), xhat and y.
type LayerNormResult struct {
	Stats, Xhat, Y []float64
}

// RefLayerNorm normalises each row of x (rows×cols) with its mean and
// biased variance, then scales by gamma and shifts by beta (params).
func RefLayerNorm(rows, cols int, eps float32, x, params []float32) LayerNormResult {
	r := LayerNormResult{Stats: make([]float64, 2*rows), Xhat: make([]float64, rows*cols), Y: make([]float64, rows*cols)}
	for i := range rows {
		row := x[i*cols : (i+1)*cols]
		var mean, variance float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(cols)
		for _, v := range row {
			variance += (float64(v) - mean) * (float64(v) - mean)
		}
		variance /= float64(cols)
		inv := 1 / math.Sqrt(variance+float64(eps))
		r.Stats[i], r.Stats[rows+i] = mean, inv
		for j, v := range row {
			h := (float64(v) - mean) * inv
			r.Xhat[i*cols+j] = h
			r.Y[i*cols+j] = float64(params[j])*h + float64(params[cols+j])
		}
	}
	return r
}

// RefLayerNormGrad returns dx and dparams (dgamma, then dbeta) from dy and
// the forward pass's xhat, stats and params: with g = gamma·dy,
// dx = invstd·(g - mean(g) - xhat·mean(g·xhat)) per row.
func RefLayerNormGrad(rows, cols int, dy, xhat, params, stats []float32) (dx, dparams []float64) {
	dx, dparams = make([]float64, rows*cols), make([]float64, 2*cols)
	for i := range rows {
		var mg, mgx float64
		for j := range cols {
			g := float64(params[j]) * float64(dy[i*cols+j])
			mg += g
			mgx += g * float64(xhat[i*cols+j])
		}
		mg /= float64(cols)
		mgx /= float64(cols)
		inv := float64(stats[rows+i])
		for j := range cols {
			g := float64(params[j]) * float64(dy[i*cols+j])
			dx[i*cols+j] = inv * (g - mg - float64(xhat[i*cols+j])*mgx)
		}
	}
	for j := range cols {
		for i := range rows {
			dparams[j] += float64(dy[i*cols+j]) * float64(xhat[i*cols+j])
			dparams[cols+j] += float64(dy[i*cols+j])
		}
	}
	return dx, dparams
}

// RefSplitHeads returns y (batch×heads×seq×size) with y[b, h, t, d] =
// x[b, t, h·size+d].
func RefSplitHeads(batch, seq, heads, size int, x []float32) []float64 {
	y := make([]float64, batch*seq*heads*size)
	for b := range batch {
		for h := range heads {
			for t := range seq {
				for d := range size {
					y[((b*heads+h)*seq+t)*size+d] = float64(x[(b*seq+t)*heads*size+h*size+d])
				}
			}
		}
	}
	return y
}

// RefMergeHeads returns y (batch×seq×heads·size) with y[b, t, h·size+d] =
// x[b, h, t, d].
func RefMergeHeads(batch, seq, heads, size int, x []float32) []float64 {
	y := make([]float64, batch*seq*heads*size)
	for b := range batch {
		for t := range seq {
			for h := range heads {
				for d := range size {
					y[(b*seq+t)*heads*size+h*size+d] = float64(x[((b*heads+h)*seq+t)*size+d])
				}
			}
		}
	}
	return y
}

// RefBatchedGemm returns c after count products C_i = alpha·op(A_i)·op(B_i)
// + beta·C_i, the matrices at the given strides; the elements of c that no
// C_i covers keep their values.
func RefBatchedGemm(transA, transB bool, count, m, n, k int, alpha float32, a []float32, strideA int, b []float32, strideB int,
	beta float32, c []float32, strideC int) []float64 {
	out := float64s(c)
	for i := range count {
		ci := RefGemm(transA, transB, m, n, k, alpha, a[i*strideA:], b[i*strideB:], beta, c[i*strideC:])
		copy(out[i*strideC:], ci)
	}
	return out
}

// RefCausalSoftmax returns y (groups×seq×seq): row t of each group is the
// softmax of scale·x over the columns j <= t, and 0 beyond.
func RefCausalSoftmax(groups, seq int, scale float32, x []float32) []float64 {
	y := make([]float64, groups*seq*seq)
	for r := range groups * seq {
		t := r % seq
		row := x[r*seq : r*seq+t+1]
		top := math.Inf(-1)
		for _, v := range row {
			top = math.Max(top, float64(scale)*float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(scale)*float64(v) - top)
		}
		for j, v := range row {
			y[r*seq+j] = math.Exp(float64(scale)*float64(v)-top) / sum
		}
	}
	return y
}

// RefCausalSoftmaxGrad returns dx (groups×seq×seq): for j <= t,
// scale·y·(dy - Σ_{j'<=t} dy·y), and 0 beyond.
func RefCausalSoftmaxGrad(groups, seq int, scale float32, y, dy []float32) []float64 {
	dx := make([]float64, groups*seq*seq)
	for r := range groups * seq {
		t := r % seq
		var s float64
		for j := 0; j <= t; j++ {
			s += float64(dy[r*seq+j]) * float64(y[r*seq+j])
		}
		for j := 0; j <= t; j++ {
			dx[r*seq+j] = float64(scale) * float64(y[r*seq+j]) * (float64(dy[r*seq+j]) - s)
		}
	}
	return dx
}

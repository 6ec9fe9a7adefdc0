//go:build cuda

package cuda

import (
	"github.com/tolaria-ml/tolaria/device"
)

// The sequence kernels of the device contract (device.SequenceKernels), in
// kernels/sequence.cuh, and the batched product, tl_gemm_batched in
// kernels/gemm.cuh.

var _ device.SequenceKernels = (*Stream)(nil)

// Embedding gathers rows of table by token id (tl_embedding, one thread per
// element of y).
func (s *Stream) Embedding(n, vocab, dim int, ids, table, y device.Buffer) error {
	const op = "Stream.Embedding"
	if err := first(device.CheckEmbedding(n, vocab, dim, ids, y, table), fitInt32(n, vocab, dim)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(n).i32(vocab).i32(dim).buf("ids", ids).buf("table", table).buf("y", y)
	return s.launch(op, kEmbedding, strideDims(int64(n)*int64(dim)), args)
}

// EmbeddingGrad writes dtable (tl_embedding_grad: the thread of each
// element of dtable gathers dy over the ids in increasing position, so the
// bits are the CPU device's scatter's).
func (s *Stream) EmbeddingGrad(n, vocab, dim int, ids, dy, dtable device.Buffer) error {
	const op = "Stream.EmbeddingGrad"
	if err := first(device.CheckEmbedding(n, vocab, dim, ids, dy, dtable), fitInt32(n, vocab, dim)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(n).i32(vocab).i32(dim).buf("ids", ids).buf("dy", dy).buf("dtable", dtable)
	return s.launch(op, kEmbeddingGrad, strideDims(int64(vocab)*int64(dim)), args)
}

// LayerNorm normalises each row of x (tl_layernorm: tileEdge lanes a row,
// the lanes' double sums added in a fixed tree).
func (s *Stream) LayerNorm(rows, cols int, eps float32, x, params, stats, xhat, y device.Buffer) error {
	const op = "Stream.LayerNorm"
	if err := first(device.CheckLayerNormTrain(rows, cols, eps, x, params, stats, xhat, y), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(rows).i32(cols).f32(eps).buf("x", x).buf("params", params).buf("stats", stats).
		buf("xhat", xhat).buf("y", y)
	return s.launch(op, kLayerNorm, rowLaneDims(rows), args)
}

// LayerNormGrad writes dparams (tl_layernorm_param_grad, a block per
// tileEdge columns) and then dx (tl_layernorm_grad, rows as LayerNorm's).
// The column sums read dy and xhat before dx is written, so dx may be
// either of them.
func (s *Stream) LayerNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams device.Buffer) error {
	const op = "Stream.LayerNormGrad"
	rowOps, colOps := [3]device.Buffer{dy, xhat, dx}, [2]device.Buffer{params, dparams}
	if err := first(device.CheckLayerNorm(rows, cols, rowOps[:], stats, colOps[:]), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	sums := s.args(op).i32(rows).i32(cols).buf("dy", dy).buf("xhat", xhat).buf("dparams", dparams)
	if err := s.launch(op, kLayerNormParamGrad, batchNormDims(cols, 1), sums); err != nil {
		return err
	}
	args := s.args(op).i32(rows).i32(cols).buf("dy", dy).buf("xhat", xhat).buf("params", params).
		buf("stats", stats).buf("dx", dx)
	return s.launch(op, kLayerNormGrad, rowLaneDims(rows), args)
}

// SplitHeads writes the (batch, heads, seq, size) blocks of x (tl_split_heads).
func (s *Stream) SplitHeads(batch, seq, heads, size int, x, y device.Buffer) error {
	return s.heads("Stream.SplitHeads", kSplitHeads, batch, seq, heads, size, x, y)
}

// MergeHeads is SplitHeads's inverse (tl_merge_heads).
func (s *Stream) MergeHeads(batch, seq, heads, size int, x, y device.Buffer) error {
	return s.heads("Stream.MergeHeads", kMergeHeads, batch, seq, heads, size, x, y)
}

// heads launches one of the head permutations, one thread per element of y.
func (s *Stream) heads(op string, k kernel, batch, seq, heads, size int, x, y device.Buffer) error {
	if err := first(device.CheckHeads(batch, seq, heads, size, x, y), fitInt32(batch, seq, heads, size)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(batch).i32(seq).i32(heads).i32(size).buf("x", x).buf("y", y)
	return s.launch(op, k, strideDims(int64(batch)*int64(seq)*int64(heads)*int64(size)), args)
}

// BatchedGemm runs count products in one launch (tl_gemm_batched: tl_gemm's
// tiles, so each product sums in double in increasing k as tl_gemm does;
// never tl_gemm_klanes, whatever the shape).
func (s *Stream) BatchedGemm(transA, transB bool, count, m, n, k int, alpha float32, a device.Buffer, strideA int,
	b device.Buffer, strideB int, beta float32, c device.Buffer, strideC int) error {
	const op = "Stream.BatchedGemm"
	if err := first(device.CheckBatchedGemm(count, m, n, k, a, strideA, b, strideB, c, strideC), fitInt32(m, n, k)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	g, err := batchedGemmDims(count, m, n)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	trans := 0
	if transA {
		trans |= 1
	}
	if transB {
		trans |= 2
	}
	args := s.args(op).i32(trans).i32(m).i32(n).i32(k).f32(alpha).buf("A", a).i64(strideA).
		buf("B", b).i64(strideB).f32(beta).buf("C", c).i64(strideC)
	return s.launch(op, kGemmBatched, g, args)
}

// CausalSoftmax writes the causal softmax of each row of the score
// matrices (tl_causal_softmax, one thread per row).
func (s *Stream) CausalSoftmax(groups, seq int, scale float32, x, y device.Buffer) error {
	const op = "Stream.CausalSoftmax"
	if err := first(device.CheckCausalSoftmax(groups, seq, scale, x, y), fitInt32(groups, seq)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(groups).i32(seq).f32(scale).buf("x", x).buf("y", y)
	return s.launch(op, kCausalSoftmax, strideDims(int64(groups)*int64(seq)), args)
}

// CausalSoftmaxGrad writes the gradient of CausalSoftmax's input
// (tl_causal_softmax_grad, one thread per row).
func (s *Stream) CausalSoftmaxGrad(groups, seq int, scale float32, y, dy, dx device.Buffer) error {
	const op = "Stream.CausalSoftmaxGrad"
	if err := first(device.CheckCausalSoftmax(groups, seq, scale, y, dy, dx), fitInt32(groups, seq)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(groups).i32(seq).f32(scale).buf("y", y).buf("dy", dy).buf("dx", dx)
	return s.launch(op, kCausalSoftmaxGrad, strideDims(int64(groups)*int64(seq)), args)
}

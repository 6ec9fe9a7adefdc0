package device

import "fmt"

// Sequence activations are row-major (batch, seq, features): a batch of
// sequences of seq positions, each a vector, features fastest. A position's
// vector is a row, so a linear layer, layer normalisation and the
// position-wise MLP see a (batch·seq)×features matrix, and a token-level
// loss is SoftmaxXent over batch·seq rows with one label and one mask
// value per position. Attention splits the features into heads of size
// features/heads and works on (batch, heads, seq, size) blocks
// (SplitHeads), one seq×seq score matrix per (batch, head).

// SequenceKernels are the computations of sequence models: token
// embedding, layer normalisation, and causal multi-head self-attention
// (head split and merge, batched products, the causal softmax). As the
// other kernel sets, every method validates its sizes (ErrMisuse), is
// deterministic (the same inputs give the same bits on every run and at
// every thread count; sums in a fixed order, no atomics), allocates nothing
// and may be captured.
type SequenceKernels interface {
	// Embedding writes y (n×dim): row i is row ids[i] of table (vocab×dim).
	// ids holds n token ids as float32 integers; an id that is not an
	// integer in [0, vocab) gives a row of NaN, so a bad id reaches the loss
	// instead of reading outside the table.
	Embedding(n, vocab, dim int, ids, table, y Buffer) error
	// EmbeddingGrad writes dtable (vocab×dim, overwritten): row v is the
	// sum of the rows i of dy whose ids[i] is v, added in float32 from zero
	// in increasing i (rows of ids no position names are zero; invalid ids
	// add nothing).
	EmbeddingGrad(n, vocab, dim int, ids, dy, dtable Buffer) error

	// LayerNorm normalises each row of x (rows×cols) with its own
	// statistics: the mean and then the biased variance around that
	// (double) mean, each summed in double in a fixed order (column order
	// on the CPU device, a fixed tree over a row's lanes on CUDA); stats (2·rows) receives the means,
	// then invstd = 1/sqrt(var+eps), each rounded to float32; xhat =
	// (x-mean)·invstd and y = gamma·xhat + beta in float32 from the stored
	// statistics, params (2·cols) holding gamma then beta. y and xhat may
	// not alias x.
	LayerNorm(rows, cols int, eps float32, x, params, stats, xhat, y Buffer) error
	// LayerNormGrad writes dx (rows×cols) and dparams (2·cols, overwritten:
	// dgamma = Σ_rows dy·xhat, then dbeta = Σ_rows dy, column sums in double
	// in a fixed order) from dy and the forward pass's xhat, stats and
	// params: with g = gamma·dy, dx = invstd·(g - mean_cols(g) -
	// xhat·mean_cols(g·xhat)), the row means summed in double in a fixed
	// order as LayerNorm's, every product and
	// the difference in double, dx rounded to float32 once.
	LayerNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams Buffer) error

	// SplitHeads writes y (batch×heads×seq×size) from x (batch×seq×width,
	// width = heads·size): y[b, h, t, d] = x[b, t, h·size+d].
	SplitHeads(batch, seq, heads, size int, x, y Buffer) error
	// MergeHeads is SplitHeads's inverse: y (batch×seq×width) from x
	// (batch×heads×seq×size), y[b, t, h·size+d] = x[b, h, t, d].
	MergeHeads(batch, seq, heads, size int, x, y Buffer) error
	// BatchedGemm is count independent Gemms: for i < count, C_i =
	// alpha·op(A_i)·op(B_i) + beta·C_i, where A_i, B_i and C_i start at
	// elements i·strideA, i·strideB and i·strideC of a, b and c and are laid
	// out as Gemm's operands. Each product has the bits Gemm gives the same
	// matrices on the same device, except where CUDA's Gemm splits a long k
	// over blocks (a small output over k >= 2048): BatchedGemm never
	// splits. The C_i may not overlap.
	BatchedGemm(transA, transB bool, count, m, n, k int, alpha float32, a Buffer, strideA int, b Buffer, strideB int,
		beta float32, c Buffer, strideC int) error
	// CausalSoftmax writes y (groups×seq×seq) from the score matrices x:
	// row t of group g is softmax over j <= t of scale·x[g, t, j], computed
	// as exp(scale·(x - max)) in double with max the row's largest x over
	// j <= t, the exponentials summed in double in increasing j and y
	// rounded to float32 once; 0 for j > t, so position t attends to itself
	// and the positions before it. x may be y (the same view).
	CausalSoftmax(groups, seq int, scale float32, x, y Buffer) error
	// CausalSoftmaxGrad writes dx, the gradient of CausalSoftmax's input
	// from its output y and dy: for j <= t, dx[g, t, j] = scale·y·(dy -
	// Σ_{j'<=t} dy·y) (the sum in double in increasing j'), and 0 for j > t.
	// dx may be dy.
	CausalSoftmaxGrad(groups, seq int, scale float32, y, dy, dx Buffer) error
}

// CheckEmbedding validates Embedding's and EmbeddingGrad's arguments: ids
// n, rows (y or dy) n×dim, table vocab×dim.
func CheckEmbedding(n, vocab, dim int, ids, rows, table Buffer) error {
	return first(positive(n, vocab, dim), need("ids", ids, n), need("rows", rows, n*dim), need("table", table, vocab*dim))
}

// CheckLayerNorm validates the layer-normalisation kernels' sizes: the
// row operands rows×cols, stats 2·rows, params (and dparams) 2·cols.
func CheckLayerNorm(rows, cols int, xs []Buffer, stats Buffer, perCol []Buffer) error {
	if err := positive(rows, cols); err != nil {
		return err
	}
	for i, b := range xs {
		if err := need(fmt.Sprintf("operand %d", i+1), b, rows*cols); err != nil {
			return err
		}
	}
	if err := need("stats", stats, 2*rows); err != nil {
		return err
	}
	for i, b := range perCol {
		if err := need(fmt.Sprintf("per-column operand %d", i+1), b, 2*cols); err != nil {
			return err
		}
	}
	return nil
}

// CheckLayerNormTrain also wants eps > 0 and y and xhat apart from x.
func CheckLayerNormTrain(rows, cols int, eps float32, x, params, stats, xhat, y Buffer) error {
	if !(eps > 0) {
		return fmt.Errorf("layer normalisation wants eps > 0, got %v", eps)
	}
	if err := CheckLayerNorm(rows, cols, []Buffer{x, xhat, y}, stats, []Buffer{params}); err != nil {
		return err
	}
	if overlaps(x, y) || overlaps(x, xhat) || overlaps(xhat, y) {
		return fmt.Errorf("layer normalisation's x, xhat and y must not overlap")
	}
	return nil
}

// CheckHeads validates SplitHeads's and MergeHeads's arguments: both
// buffers batch·seq·heads·size, and apart.
func CheckHeads(batch, seq, heads, size int, x, y Buffer) error {
	n := batch * seq * heads * size
	if err := first(positive(batch, seq, heads, size), need("x", x, n), need("y", y, n)); err != nil {
		return err
	}
	if overlaps(x, y) {
		return fmt.Errorf("the head split's input and output must not overlap")
	}
	return nil
}

// CheckBatchedGemm validates BatchedGemm's arguments: each operand holds
// its last matrix, the strides are non-negative, and C's matrices do not
// overlap (strideC >= m·n, or count 1).
func CheckBatchedGemm(count, m, n, k int, a Buffer, strideA int, b Buffer, strideB int, c Buffer, strideC int) error {
	if err := positive(count, m, n, k); err != nil {
		return err
	}
	if strideA < 0 || strideB < 0 || strideC < 0 {
		return fmt.Errorf("batched gemm strides must be non-negative, got %d, %d, %d", strideA, strideB, strideC)
	}
	if count > 1 && strideC < m*n {
		return fmt.Errorf("batched gemm: C's matrices overlap (strideC %d < m·n = %d)", strideC, m*n)
	}
	last := count - 1
	return first(need("A", a, last*strideA+m*k), need("B", b, last*strideB+k*n), need("C", c, last*strideC+m*n))
}

// CheckCausalSoftmax validates CausalSoftmax's (and its gradient's)
// buffers: each groups·seq·seq.
func CheckCausalSoftmax(groups, seq int, scale float32, bufs ...Buffer) error {
	if err := positive(groups, seq); err != nil {
		return err
	}
	if !(scale > 0) {
		return fmt.Errorf("the causal softmax's scale must be positive, got %v", scale)
	}
	for i, b := range bufs {
		if err := need(fmt.Sprintf("operand %d", i+1), b, groups*seq*seq); err != nil {
			return err
		}
	}
	return nil
}

// overlaps reports whether two views share any element of one allocation.
func overlaps(x, y Buffer) bool {
	if x.IsZero() || y.IsZero() || x.Allocation() != y.Allocation() {
		return false
	}
	return x.Offset() < y.Offset()+y.Len() && y.Offset() < x.Offset()+x.Len()
}

package device

// Activation selects the nonlinearity of BiasAct and ActGrad.
type Activation int

const (
	ActNone Activation = iota // identity
	ActReLU                   // max(0, z)
	ActGELU                   // 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3)))
	ActTanh                   // tanh(z); its derivative is 1 - tanh²(z)
)

func (a Activation) String() string {
	switch a {
	case ActNone:
		return "none"
	case ActReLU:
		return "relu"
	case ActGELU:
		return "gelu"
	case ActTanh:
		return "tanh"
	}
	return "unknown"
}

// Indices into the statistics buffer that the loss kernels accumulate into.
// A statistics buffer has StatsLen elements.
const (
	StatLossSum = 0 // sum over valid rows of the row loss
	StatCorrect = 1 // valid rows whose arg-max equals the label (cross-entropy only)
	StatCount   = 2 // number of valid rows (sum of the mask)
	StatsLen    = 3
)

// Indices into the hyper-parameter buffer that optimizer kernels read, so
// that a captured update stays valid while the schedule changes: the host
// writes new values into it each step (through the staging stream).
const (
	HyperLR    = 0 // learning rate
	HyperBias1 = 1 // AdamW: 1 - beta1^t
	HyperBias2 = 2 // AdamW: 1 - beta2^t
	HyperLen   = 3
)

// Kernels are the device computations a training step needs. All matrices
// are row-major float32. Each method validates its sizes (ErrMisuse) and
// enqueues one kernel on the stream. Kernels are deterministic: the same
// inputs give the same bits on every run (no atomics in reductions).
type Kernels interface {
	// Gemm computes C = alpha*op(A)*op(B) + beta*C where op(A) is m×k,
	// op(B) is k×n and C is m×n. A is stored k×m when transA, else m×k; B
	// is stored n×k when transB, else k×n. When beta is 0, C is not read.
	Gemm(transA, transB bool, m, n, k int, alpha float32, a, b Buffer, beta float32, c Buffer) error

	// BiasAct adds bias (cols) to every row of z (rows×cols) in place, then
	// writes act(z) to y. y may be z itself only for ActNone.
	BiasAct(act Activation, rows, cols int, z, bias, y Buffer) error
	// ActGrad writes dz = dy * act'(z). dz may be dy.
	ActGrad(act Activation, rows, cols int, z, dy, dz Buffer) error

	// SoftmaxXent writes probs = softmax(logits) row-wise and accumulates
	// into stats (StatsLen): the cross-entropy loss sum, the correct count
	// and the row count, over rows whose mask is non-zero. labels holds one
	// class index per row; mask holds 1 for valid rows and 0 for padding.
	SoftmaxXent(rows, cols int, logits, labels, mask, probs, stats Buffer) error
	// SoftmaxXentGrad writes dlogits = mask*(probs - onehot(labels))/n where
	// n = max(1, sum(mask)): the gradient of the mean loss over valid rows.
	SoftmaxXentGrad(rows, cols int, probs, labels, mask, dlogits Buffer) error
	// MSE accumulates into stats the squared-error sum over valid rows
	// (StatLossSum: sum over valid rows of mean_c (pred-target)^2) and the
	// row count (StatCount).
	MSE(rows, cols int, pred, target, mask, stats Buffer) error
	// MSEGrad writes dpred = mask*2*(pred-target)/(cols*n), the gradient of
	// the mean over valid rows of the row-mean squared error.
	MSEGrad(rows, cols int, pred, target, mask, dpred Buffer) error

	// ColSum writes out = beta*out + (sum over rows of x), x rows×cols.
	ColSum(rows, cols int, x Buffer, beta float32, out Buffer) error
	// Fill sets every element of x to v.
	Fill(x Buffer, v float32) error
	// Scale multiplies x by alpha in place.
	Scale(x Buffer, alpha float32) error
	// Axpy computes y += alpha*x.
	Axpy(alpha float32, x, y Buffer) error
	// ClipGlobalNorm writes the L2 norm of x to norm[0] and, when it
	// exceeds maxNorm, scales x by maxNorm/(norm+1e-6).
	ClipGlobalNorm(x Buffer, maxNorm float32, norm Buffer) error

	// SGDMomentum updates p in place with lr = hyper[HyperLR]:
	// g' = g + weightDecay*p; vel = momentum*vel + g';
	// p -= lr*(g' + momentum*vel) when nesterov, else p -= lr*vel.
	SGDMomentum(p, g, vel, hyper Buffer, momentum, weightDecay float32, nesterov bool) error
	// AdamW updates p in place with lr = hyper[HyperLR] and the bias
	// corrections hyper[HyperBias1], hyper[HyperBias2]:
	// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
	// p -= lr*(weightDecay*p + (m/bias1)/(sqrt(v/bias2)+eps)).
	AdamW(p, g, m, v, hyper Buffer, beta1, beta2, eps, weightDecay float32) error
}

package device

import "fmt"

// Image activations are NHWC: a batch of N images, each H rows of W pixels
// of C channels, channels fastest. In that layout a convolution is
// Im2Col, one Gemm and BiasAct with cols = output channels, its output is
// NHWC again with no transpose, and a per-channel statistic (batchnorm) is
// a column statistic of an (N·H·W)×C matrix.

// ConvShape is the geometry of a 2-D convolution's input and kernel: square
// stride and padding, dilation 1, one group.
type ConvShape struct {
	N, H, W, C  int // input batch, height, width, channels
	KH, KW      int // kernel height and width
	Stride, Pad int // stride (>= 1) and zero padding (>= 0) on every side
}

// OutH is the output height: (H + 2·Pad - KH)/Stride + 1.
func (s ConvShape) OutH() int { return (s.H+2*s.Pad-s.KH)/s.Stride + 1 }

// OutW is the output width: (W + 2·Pad - KW)/Stride + 1.
func (s ConvShape) OutW() int { return (s.W+2*s.Pad-s.KW)/s.Stride + 1 }

// Rows is the number of rows of the im2col matrix: N·OutH·OutW, one per
// output pixel.
func (s ConvShape) Rows() int { return s.N * s.OutH() * s.OutW() }

// Cols is the number of columns of the im2col matrix: KH·KW·C, ordered
// (kh, kw, c) with c fastest.
func (s ConvShape) Cols() int { return s.KH * s.KW * s.C }

// InLen is the number of input elements, N·H·W·C.
func (s ConvShape) InLen() int { return s.N * s.H * s.W * s.C }

// PoolShape is the geometry of a pooling window over NHWC input: a K×K
// window moved by Stride, over the input padded by Pad on every side.
type PoolShape struct {
	N, H, W, C     int
	K, Stride, Pad int
}

// OutH is the output height: (H + 2·Pad - K)/Stride + 1.
func (s PoolShape) OutH() int { return (s.H+2*s.Pad-s.K)/s.Stride + 1 }

// OutW is the output width: (W + 2·Pad - K)/Stride + 1.
func (s PoolShape) OutW() int { return (s.W+2*s.Pad-s.K)/s.Stride + 1 }

// InLen is N·H·W·C; OutLen is N·OutH·OutW·C.
func (s PoolShape) InLen() int  { return s.N * s.H * s.W * s.C }
func (s PoolShape) OutLen() int { return s.N * s.OutH() * s.OutW() * s.C }

// Indices into a dropout generator's state buffer (RNGLen elements). The
// words are uint32 bit patterns stored in float32 elements (read and
// written with math.Float32bits/Float32frombits, never as numbers): the
// Philox key is the 64-bit seed, the counter base the 64-bit offset.
const (
	RNGSeedLo   = 0
	RNGSeedHi   = 1
	RNGOffsetLo = 2
	RNGOffsetHi = 3
	RNGLen      = 4
)

// ImageKernels are the computations of image models: convolution through
// im2col, pooling, batch normalisation and dropout. Like Kernels, every
// method validates its sizes (ErrMisuse), enqueues one kernel, and is
// deterministic: the same inputs give the same bits on every run and at
// every thread count; sums run in a fixed order (no atomics), in double
// where they reduce over more than a window.
type ImageKernels interface {
	// Im2Col writes cols (s.Rows()×s.Cols()): the row of output pixel
	// (n, oh, ow) holds, at column (kh, kw, c), x[n, oh·Stride-Pad+kh,
	// ow·Stride-Pad+kw, c], or 0 where that falls outside the image.
	Im2Col(s ConvShape, x, cols Buffer) error
	// Col2Im writes dx (N×H×W×C), the adjoint of Im2Col applied to dcols:
	// each element of dx is the sum of the dcols entries Im2Col copied it
	// to, added in increasing (oh, ow) order. dx is overwritten.
	Col2Im(s ConvShape, dcols, dx Buffer) error

	// MaxPool writes y (N×OutH×OutW×C), the maximum of each window over the
	// pixels inside the image (padding never wins), and arg (the same
	// size), the window position kh·K+kw of the first maximum in (kh, kw)
	// order, as a float32 integer.
	MaxPool(s PoolShape, x, y, arg Buffer) error
	// MaxPoolGrad writes dx (N×H×W×C): each element is the sum of dy over
	// the windows whose maximum it was (by arg), added in increasing
	// (oh, ow) order. dx is overwritten.
	MaxPoolGrad(s PoolShape, dy, arg, dx Buffer) error
	// AvgPool writes y, the sum of each window's pixels inside the image
	// divided by K·K (padding counts as zeros, as PyTorch's default
	// count_include_pad). A global average pool is K = H = W, Pad 0.
	AvgPool(s PoolShape, x, y Buffer) error
	// AvgPoolGrad writes dx: each element is the sum of dy/(K·K) over the
	// windows that hold it, in increasing (oh, ow) order. dx is
	// overwritten.
	AvgPoolGrad(s PoolShape, dy, dx Buffer) error

	// BatchNormTrain normalises x (rows×cols, a column per channel) with
	// its batch statistics: per column the mean and the biased variance,
	// summed in double in a fixed order (row order on the CPU device, a
	// fixed split over row lanes and a fixed tree on CUDA); stats (2·cols)
	// receives the means and then invstd = 1/sqrt(var+eps); xhat =
	// (x-mean)·invstd; y = gamma·xhat + beta, with params (2·cols) holding
	// gamma then beta. It also updates running (2·cols: running means,
	// then running variances): r = (1-momentum)·r + momentum·batch, the
	// variance taken unbiased (times rows/(rows-1); rows must be at least
	// 2), as PyTorch's BatchNorm does.
	BatchNormTrain(rows, cols int, eps, momentum float32, x, params, stats, xhat, y, running Buffer) error
	// BatchNormEval writes y = gamma·(x-rmean)/sqrt(rvar+eps) + beta with
	// the running statistics (running as BatchNormTrain's).
	BatchNormEval(rows, cols int, eps float32, x, params, running, y Buffer) error
	// BatchNormGrad writes dx and dparams (2·cols: dgamma, then dbeta,
	// overwritten) from dy, the forward pass's xhat and stats and params:
	// dbeta = Σ dy, dgamma = Σ dy·xhat (column sums in double, in a fixed
	// order as BatchNormTrain's),
	// dx = gamma·invstd·(dy - dbeta/rows - xhat·dgamma/rows).
	BatchNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams Buffer) error

	// Dropout writes y = x·mask and mask, where mask[i] is 1/(1-p) when
	// the uniform draw u_i >= p and 0 otherwise. u_i comes from Philox
	// 4x32-10 keyed by the seed in rng (RNGLen words), counter (offset +
	// i/4 as a 64-bit sum in the first two words, 0 in the others), output
	// word i%4 as u = (word >> 8)·2^-24. rng is read on the device when
	// the kernel runs, so a captured dropout draws from the offset current
	// at each replay. 0 <= p < 1. Dropout does not advance the offset.
	Dropout(p float32, rng, x, y, mask Buffer) error
	// AdvanceRNG adds counters to rng's 64-bit offset, on the device: the
	// step that captured a Dropout of n elements advances it by
	// ceil(n/4) after the draw, so the next replay draws afresh and a run
	// resumed with the same rng draws exactly the same masks.
	AdvanceRNG(rng Buffer, counters int) error
	// Mul writes z = x·y elementwise (dropout's backward: dx = dy·mask). z
	// may be x or y.
	Mul(x, y, z Buffer) error
}

// CheckConvShape validates a convolution's geometry.
func CheckConvShape(s ConvShape) error {
	if err := positive(s.N, s.H, s.W, s.C, s.KH, s.KW, s.Stride); err != nil {
		return fmt.Errorf("conv shape %+v: %w", s, err)
	}
	if s.Pad < 0 || s.Pad >= s.KH || s.Pad >= s.KW {
		return fmt.Errorf("conv shape %+v: padding must be in 0..kernel-1", s)
	}
	if s.H+2*s.Pad < s.KH || s.W+2*s.Pad < s.KW {
		return fmt.Errorf("conv shape %+v: the kernel is larger than the padded image", s)
	}
	return nil
}

// CheckIm2Col validates Im2Col's (and Col2Im's) arguments. The shape comes
// first: the sizes divide by its stride.
func CheckIm2Col(s ConvShape, x, cols Buffer) error {
	if err := CheckConvShape(s); err != nil {
		return err
	}
	return first(need("x", x, s.InLen()), need("cols", cols, s.Rows()*s.Cols()))
}

// CheckPoolShape validates a pooling window's geometry.
func CheckPoolShape(s PoolShape) error {
	if err := positive(s.N, s.H, s.W, s.C, s.K, s.Stride); err != nil {
		return fmt.Errorf("pool shape %+v: %w", s, err)
	}
	if s.Pad < 0 || 2*s.Pad > s.K {
		return fmt.Errorf("pool shape %+v: padding must be in 0..K/2", s)
	}
	if s.H+2*s.Pad < s.K || s.W+2*s.Pad < s.K {
		return fmt.Errorf("pool shape %+v: the window is larger than the padded image", s)
	}
	return nil
}

// CheckPool validates a pooling kernel's input and output (and arg, when
// not the zero Buffer).
func CheckPool(s PoolShape, x, y, arg Buffer) error {
	if err := CheckPoolShape(s); err != nil {
		return err // before OutLen, which divides by the stride
	}
	if err := first(need("x", x, s.InLen()), need("y", y, s.OutLen())); err != nil {
		return err
	}
	if !arg.IsZero() {
		return need("arg", arg, s.OutLen())
	}
	return nil
}

// CheckBatchNorm validates the batch-normalisation kernels' common sizes:
// x (and y, xhat, dy, dx) rows×cols; params, stats, running 2·cols.
func CheckBatchNorm(rows, cols int, xs []Buffer, perCol []Buffer) error {
	if err := positive(rows, cols); err != nil {
		return err
	}
	for i, b := range xs {
		if err := need(fmt.Sprintf("operand %d", i+1), b, rows*cols); err != nil {
			return err
		}
	}
	for i, b := range perCol {
		if err := need(fmt.Sprintf("per-channel operand %d", i+1), b, 2*cols); err != nil {
			return err
		}
	}
	return nil
}

// CheckBatchNormTrain also wants at least two rows (the unbiased running
// variance divides by rows-1) and a momentum in [0, 1].
func CheckBatchNormTrain(rows, cols int, eps, momentum float32, x, params, stats, xhat, y, running Buffer) error {
	if rows < 2 {
		return fmt.Errorf("batch normalisation in training needs at least 2 rows, got %d", rows)
	}
	if !(eps > 0) || !(momentum >= 0 && momentum <= 1) {
		return fmt.Errorf("batch normalisation wants eps > 0 and momentum in [0, 1], got %v and %v", eps, momentum)
	}
	return CheckBatchNorm(rows, cols, []Buffer{x, xhat, y}, []Buffer{params, stats, running})
}

// CheckDropout validates Dropout's arguments.
func CheckDropout(p float32, rng, x, y, mask Buffer) error {
	if !(p >= 0 && p < 1) {
		return fmt.Errorf("dropout probability must be in [0, 1), got %v", p)
	}
	return first(need("rng", rng, RNGLen), need("x", x, 1), need("y", y, x.Len()), need("mask", mask, x.Len()))
}

// CheckAdvanceRNG validates AdvanceRNG's arguments.
func CheckAdvanceRNG(rng Buffer, counters int) error {
	return first(need("rng", rng, RNGLen), positive(counters))
}

// CheckMul validates Mul's arguments: three buffers of one length.
func CheckMul(x, y, z Buffer) error {
	if x.IsZero() || x.Len() == 0 {
		return fmt.Errorf("x is empty")
	}
	return first(need("y", y, x.Len()), need("z", z, x.Len()))
}

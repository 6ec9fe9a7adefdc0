//go:build cuda

package cuda

import (
	"github.com/tolaria-ml/tolaria/device"
)

// The image kernels of the device contract (device.ImageKernels), each one
// launch of a kernel in kernels/image.cuh.

var _ device.ImageKernels = (*Stream)(nil)

// convArgs checks that a convolution's geometry fits the kernels' int
// parameters and pushes it: N, H, W, C, KH, KW, stride, pad.
func convArgs(a *kargs, s device.ConvShape) (*kargs, error) {
	if err := fitInt32(s.N, s.H+2*s.Pad, s.W+2*s.Pad, s.C, s.Cols(), s.Stride); err != nil {
		return a, err
	}
	return a.i32(s.N).i32(s.H).i32(s.W).i32(s.C).i32(s.KH).i32(s.KW).i32(s.Stride).i32(s.Pad), nil
}

// poolArgs is convArgs for a pooling window: N, H, W, C, K, stride, pad.
func poolArgs(a *kargs, s device.PoolShape) (*kargs, error) {
	if err := fitInt32(s.N, s.H+2*s.Pad, s.W+2*s.Pad, s.C, s.K*s.K, s.Stride); err != nil {
		return a, err
	}
	return a.i32(s.N).i32(s.H).i32(s.W).i32(s.C).i32(s.K).i32(s.Stride).i32(s.Pad), nil
}

// Im2Col writes the im2col matrix of x (tl_im2col).
func (s *Stream) Im2Col(cs device.ConvShape, x, cols device.Buffer) error {
	const op = "Stream.Im2Col"
	if err := device.CheckIm2Col(cs, x, cols); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args, err := convArgs(s.args(op), cs)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args.buf("x", x).buf("cols", cols)
	return s.launch(op, kIm2Col, strideDims(int64(cs.Rows())*int64(cs.Cols())), args)
}

// Col2Im writes dx, the adjoint of Im2Col applied to dcols (tl_col2im, one
// thread per element of dx).
func (s *Stream) Col2Im(cs device.ConvShape, dcols, dx device.Buffer) error {
	const op = "Stream.Col2Im"
	if err := device.CheckIm2Col(cs, dx, dcols); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args, err := convArgs(s.args(op), cs)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args.buf("dcols", dcols).buf("dx", dx)
	return s.launch(op, kCol2Im, strideDims(int64(cs.InLen())), args)
}

// MaxPool writes each window's maximum and its position (tl_max_pool).
func (s *Stream) MaxPool(ps device.PoolShape, x, y, arg device.Buffer) error {
	const op = "Stream.MaxPool"
	if err := first(device.CheckPool(ps, x, y, arg), checkNonEmpty("arg", arg)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args, err := poolArgs(s.args(op), ps)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args.buf("x", x).buf("y", y).buf("arg", arg)
	return s.launch(op, kMaxPool, strideDims(int64(ps.OutLen())), args)
}

// MaxPoolGrad routes dy to the windows' maxima (tl_max_pool_grad, one
// thread per element of dx).
func (s *Stream) MaxPoolGrad(ps device.PoolShape, dy, arg, dx device.Buffer) error {
	const op = "Stream.MaxPoolGrad"
	if err := first(device.CheckPool(ps, dx, dy, arg), checkNonEmpty("arg", arg)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args, err := poolArgs(s.args(op), ps)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args.buf("dy", dy).buf("arg", arg).buf("dx", dx)
	return s.launch(op, kMaxPoolGrad, strideDims(int64(ps.InLen())), args)
}

// AvgPool writes each window's mean, padding counted as zeros (tl_avg_pool).
func (s *Stream) AvgPool(ps device.PoolShape, x, y device.Buffer) error {
	const op = "Stream.AvgPool"
	if err := device.CheckPool(ps, x, y, device.Buffer{}); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args, err := poolArgs(s.args(op), ps)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args.buf("x", x).buf("y", y)
	return s.launch(op, kAvgPool, strideDims(int64(ps.OutLen())), args)
}

// AvgPoolGrad spreads dy/(K·K) over each window (tl_avg_pool_grad, one
// thread per element of dx).
func (s *Stream) AvgPoolGrad(ps device.PoolShape, dy, dx device.Buffer) error {
	const op = "Stream.AvgPoolGrad"
	if err := device.CheckPool(ps, dx, dy, device.Buffer{}); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args, err := poolArgs(s.args(op), ps)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args.buf("dy", dy).buf("dx", dx)
	return s.launch(op, kAvgPoolGrad, strideDims(int64(ps.InLen())), args)
}

// BatchNormTrain normalises x with its batch statistics and updates the
// running ones (tl_batchnorm_train: a block per 32 columns computes their
// statistics, then normalises them, so the step is one graph node). Over
// many rows the statistics are split over blocks first (rowParts): the
// parts' sums of x, then of the squared deviations from the mean, go to
// the stream's scratch (tl_col_parts), and tl_batchnorm_train adds them in
// part order, each block normalising its part's rows.
func (s *Stream) BatchNormTrain(rows, cols int, eps, momentum float32, x, params, stats, xhat, y, running device.Buffer) error {
	const op = "Stream.BatchNormTrain"
	if err := first(device.CheckBatchNormTrain(rows, cols, eps, momentum, x, params, stats, xhat, y, running), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	parts, ws := s.rowParts(rows, cols, 2), x // ws is not read with one part
	if parts > 1 {
		ws = s.scratch
		for mode := range 2 {
			if err := s.colParts(op, mode, rows, cols, x, x, parts); err != nil {
				return err
			}
		}
	}
	args := s.args(op).i32(rows).i32(cols).f32(eps).f32(momentum).buf("x", x).buf("params", params).
		buf("stats", stats).buf("xhat", xhat).buf("y", y).buf("running", running).i32(parts).buf("ws", ws)
	return s.launch(op, kBatchNormTrain, batchNormDims(cols, parts), args)
}

// BatchNormEval normalises x with the running statistics (tl_batchnorm_eval).
func (s *Stream) BatchNormEval(rows, cols int, eps float32, x, params, running, y device.Buffer) error {
	const op = "Stream.BatchNormEval"
	if err := first(device.CheckBatchNorm(rows, cols, []device.Buffer{x, y}, []device.Buffer{params, running}), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(rows).i32(cols).f32(eps).buf("x", x).buf("params", params).buf("running", running).buf("y", y)
	return s.launch(op, kBatchNormEval, strideDims(int64(rows)*int64(cols)), args)
}

// BatchNormGrad writes dx and dparams (tl_batchnorm_grad, a block per 32
// columns, as BatchNormTrain; over many rows the parts' sums of dy and
// dy·xhat go to the scratch first, tl_col_parts mode 2).
func (s *Stream) BatchNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams device.Buffer) error {
	const op = "Stream.BatchNormGrad"
	if err := first(device.CheckBatchNorm(rows, cols, []device.Buffer{dy, xhat, dx}, []device.Buffer{params, stats, dparams}), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	parts, ws := s.rowParts(rows, cols, 2), dy // ws is not read with one part
	if parts > 1 {
		ws = s.scratch
		if err := s.colParts(op, 2, rows, cols, dy, xhat, parts); err != nil {
			return err
		}
	}
	args := s.args(op).i32(rows).i32(cols).buf("dy", dy).buf("xhat", xhat).buf("params", params).
		buf("stats", stats).buf("dx", dx).buf("dparams", dparams).i32(parts).buf("ws", ws)
	return s.launch(op, kBatchNormGrad, batchNormDims(cols, parts), args)
}

// Dropout draws the mask from Philox keyed and offset by rng, read when the
// kernel runs (tl_dropout, one Philox block per thread and four elements).
func (s *Stream) Dropout(p float32, rng, x, y, mask device.Buffer) error {
	const op = "Stream.Dropout"
	if err := device.CheckDropout(p, rng, x, y, mask); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	n := x.Len()
	args := s.args(op).i64(n).f32(p).buf("rng", rng).buf("x", x).buf("y", y).buf("mask", mask)
	return s.launch(op, kDropout, strideDims((int64(n)+3)/4), args)
}

// AdvanceRNG adds counters to rng's offset on the device (tl_advance_rng,
// one thread).
func (s *Stream) AdvanceRNG(rng device.Buffer, counters int) error {
	const op = "Stream.AdvanceRNG"
	if err := device.CheckAdvanceRNG(rng, counters); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).buf("rng", rng).i64(counters)
	return s.launch(op, kAdvanceRNG, oneBlock(1), args)
}

// Mul writes z = x·y (tl_mul).
func (s *Stream) Mul(x, y, z device.Buffer) error {
	const op = "Stream.Mul"
	if err := device.CheckMul(x, y, z); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i64(x.Len()).buf("x", x).buf("y", y).buf("z", z)
	return s.launch(op, kMul, strideDims(int64(x.Len())), args)
}

//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// kargs marshals kernel parameters. Every parameter occupies an 8-byte slot
// (launchKernel hands the driver a pointer to each); 4-byte int and float
// parameters sit in the low half, where a little-endian launch reads them.
type kargs struct {
	d     *Device
	s     *Stream
	op    string
	n     int
	slots [maxKernelParam]uint64
	err   error // the first bad buffer, as a *device.Error
}

func (a *kargs) push(v uint64) *kargs {
	a.slots[a.n] = v
	a.n++
	return a
}

func (a *kargs) i32(v int) *kargs     { return a.push(uint64(uint32(int32(v)))) }
func (a *kargs) i64(v int) *kargs     { return a.push(uint64(int64(v))) }
func (a *kargs) f32(v float32) *kargs { return a.push(uint64(math.Float32bits(v))) }

func (a *kargs) flag(v bool) *kargs {
	if v {
		return a.i32(1)
	}
	return a.i32(0)
}

func (a *kargs) buf(name string, b device.Buffer) *kargs {
	p, err := a.d.devPtr(a.op, name, b)
	if err != nil && a.err == nil {
		a.err = err
	}
	if err == nil {
		a.s.note(b.Allocation().(*deviceAlloc))
	}
	return a.push(uint64(p))
}

// launch enqueues kernel k on s with the marshalled arguments.
func (s *Stream) launch(op string, k kernel, g dims, a *kargs) error {
	if a.err != nil {
		return a.err
	}
	// The launch binds the context itself, in its one cgo call.
	return s.enqueueBinding(op, false, func() error {
		if p := s.dev.profile; p != nil && !s.legacy && s.capture.Load() == nil {
			if r := profiledLaunch(s.dev, p, s.dev.ctx, k, &s.dev.fns[k], g, s.cu, &a.slots, a.n); r != cuSuccess {
				return s.dev.driver(op, r)
			}
			return nil
		}
		if r := launchKernel(s.dev.ctx, &s.dev.fns[k], g, s.cu, &a.slots, a.n); r != cuSuccess {
			return s.dev.driver(op, r)
		}
		return nil
	})
}

func (s *Stream) args(op string) *kargs { return &kargs{d: s.dev, s: s, op: op} }

// Gemm computes C = alpha*op(A)*op(B) + beta*C (tl_gemm; tl_gemm_klanes for
// a small output over a long k, useKLanes).
func (s *Stream) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b device.Buffer, beta float32, c device.Buffer) error {
	const op = "Stream.Gemm"
	if err := first(device.CheckGemm(m, n, k, a, b, c), fitInt32(m, n, k)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	if useKLanes(m, n, k) {
		return s.gemmKLanes(transA, transB, m, n, k, alpha, a, b, beta, c)
	}
	g, err := gemmDims(m, n)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).flag(transA).flag(transB).i32(m).i32(n).i32(k).f32(alpha).
		buf("A", a).buf("B", b).f32(beta).buf("C", c)
	return s.launch(op, kGemm, g, args)
}

// gemmKLanes is Gemm through tl_gemm_klanes, its k split into parts over
// the stream's scratch (klanesParts) and finished by tl_gemm_parts_sum. The
// legacy stream has no scratch: it runs one part, so its bits for such a
// shape differ from another stream's.
func (s *Stream) gemmKLanes(transA, transB bool, m, n, k int, alpha float32, a, b device.Buffer, beta float32, c device.Buffer) error {
	const op = "Stream.Gemm"
	parts, ws := 1, c // ws is not written with one part
	if s.scratch.Len() > 0 {
		parts, ws = klanesParts(m, n, k), s.scratch
	}
	g, err := klanesDims(m, n, parts)
	if err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).flag(transA).flag(transB).i32(m).i32(n).i32(k).f32(alpha).
		buf("A", a).buf("B", b).f32(beta).buf("C", c).i32(parts).buf("ws", ws)
	if err := s.launch(op, kGemmKLanes, g, args); err != nil || parts == 1 {
		return err
	}
	sum := s.args(op).i32(m).i32(n).i32(parts).f32(alpha).buf("ws", ws).f32(beta).buf("C", c)
	return s.launch(op, kGemmPartsSum, strideDims(int64(m)*int64(n)), sum)
}

// BiasAct adds bias to every row of z, then writes act(z) to y (tl_bias_act).
func (s *Stream) BiasAct(act device.Activation, rows, cols int, z, bias, y device.Buffer) error {
	const op = "Stream.BiasAct"
	if err := first(device.CheckBiasAct(act, rows, cols, z, bias, y), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(int(act)).i32(rows).i32(cols).buf("z", z).buf("bias", bias).buf("y", y)
	return s.launch(op, kBiasAct, strideDims(int64(rows)*int64(cols)), args)
}

// ActGrad writes dz = dy * act'(z) (tl_act_grad).
func (s *Stream) ActGrad(act device.Activation, rows, cols int, z, dy, dz device.Buffer) error {
	const op = "Stream.ActGrad"
	if err := first(device.CheckActGrad(act, rows, cols, z, dy, dz), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(int(act)).i32(rows).i32(cols).buf("z", z).buf("dy", dy).buf("dz", dz)
	return s.launch(op, kActGrad, strideDims(int64(rows)*int64(cols)), args)
}

// SoftmaxXent writes row-wise softmax probabilities and accumulates the
// cross-entropy statistics (tl_softmax_xent: 32 lanes a row, groups of 8
// rows over up to xentMaxBlocks blocks, each block's sums in the stream's
// scratch, added in block order by tl_loss_parts_sum; one block, adding to
// stats itself, on the legacy stream, which has no scratch).
func (s *Stream) SoftmaxXent(rows, cols int, logits, labels, mask, probs, stats device.Buffer) error {
	const op = "Stream.SoftmaxXent"
	if err := first(device.CheckLoss(rows, cols, 1, logits, labels, mask, probs), device.CheckStats(stats), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	g, ws := xentDims(rows, s.scratch.Len() > 0), stats // ws is not written by one block
	if g.gridX > 1 {
		ws = s.scratch
	}
	args := s.args(op).i32(rows).i32(cols).buf("logits", logits).buf("labels", labels).buf("mask", mask).
		buf("probs", probs).buf("stats", stats).buf("ws", ws)
	if err := s.launch(op, kSoftmaxXent, g, args); err != nil || g.gridX == 1 {
		return err
	}
	sum := s.args(op).i32(g.gridX).buf("ws", ws).buf("stats", stats)
	return s.launch(op, kLossPartsSum, oneBlock(blockThreads), sum)
}

// SoftmaxXentGrad writes the gradient of the mean cross-entropy over valid
// rows (tl_softmax_xent_grad).
func (s *Stream) SoftmaxXentGrad(rows, cols int, probs, labels, mask, dlogits device.Buffer) error {
	const op = "Stream.SoftmaxXentGrad"
	if err := first(device.CheckLoss(rows, cols, 1, probs, labels, mask, dlogits), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(rows).i32(cols).buf("probs", probs).buf("labels", labels).buf("mask", mask).buf("dlogits", dlogits)
	return s.launch(op, kSoftmaxXentGrad, strideDims(int64(rows)*int64(cols)), args)
}

// MSE accumulates the squared-error statistics (tl_mse, one block).
func (s *Stream) MSE(rows, cols int, pred, target, mask, stats device.Buffer) error {
	const op = "Stream.MSE"
	if err := first(device.CheckLoss(rows, cols, cols, pred, target, mask, pred), device.CheckStats(stats), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(rows).i32(cols).buf("pred", pred).buf("target", target).buf("mask", mask).buf("stats", stats)
	return s.launch(op, kMSE, oneBlock(blockThreads), args)
}

// MSEGrad writes the gradient of the mean row-mean squared error (tl_mse_grad).
func (s *Stream) MSEGrad(rows, cols int, pred, target, mask, dpred device.Buffer) error {
	const op = "Stream.MSEGrad"
	if err := first(device.CheckLoss(rows, cols, cols, pred, target, mask, dpred), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i32(rows).i32(cols).buf("pred", pred).buf("target", target).buf("mask", mask).buf("dpred", dpred)
	return s.launch(op, kMSEGrad, strideDims(int64(rows)*int64(cols)), args)
}

// ColSum writes out = beta*out + column sums of x (tl_col_sum). Over many
// rows the sum is split into parts of consecutive rows (rowParts), each
// part's column sums in the stream's scratch (tl_col_parts mode 0), added
// in part order by tl_gemm_parts_sum.
func (s *Stream) ColSum(rows, cols int, x device.Buffer, beta float32, out device.Buffer) error {
	const op = "Stream.ColSum"
	if err := first(device.CheckColSum(rows, cols, x, out), fitInt32(rows, cols)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	if parts := s.rowParts(rows, cols, 1); parts > 1 {
		if err := s.colParts(op, 0, rows, cols, x, x, parts); err != nil {
			return err
		}
		sum := s.args(op).i32(1).i32(cols).i32(parts).f32(1).buf("ws", s.scratch).f32(beta).buf("out", out)
		return s.launch(op, kGemmPartsSum, strideDims(int64(cols)), sum)
	}
	args := s.args(op).i32(rows).i32(cols).buf("x", x).f32(beta).buf("out", out)
	return s.launch(op, kColSum, colSumDims(cols), args)
}

// rowParts is rowParts(rows, cols, sums) on a stream with a scratch, 1 on
// the legacy stream.
func (s *Stream) rowParts(rows, cols, sums int) int {
	if s.scratch.Len() == 0 {
		return 1
	}
	return rowParts(rows, cols, sums)
}

// colParts launches tl_col_parts (mode 0, 1 or 2) over parts ranges of
// rows, its sums into the stream's scratch.
func (s *Stream) colParts(op string, mode, rows, cols int, x, y device.Buffer, parts int) error {
	args := s.args(op).i32(mode).i32(rows).i32(cols).buf("x", x).buf("y", y).i32(parts).buf("ws", s.scratch)
	return s.launch(op, kColParts, colPartsDims(cols, parts), args)
}

// Fill sets every element of x to v (tl_fill).
func (s *Stream) Fill(x device.Buffer, v float32) error {
	const op = "Stream.Fill"
	if err := device.CheckSame(x, x); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i64(x.Len()).buf("x", x).f32(v)
	return s.launch(op, kFill, strideDims(int64(x.Len())), args)
}

// Scale multiplies x by alpha in place (tl_scale).
func (s *Stream) Scale(x device.Buffer, alpha float32) error {
	const op = "Stream.Scale"
	if err := device.CheckSame(x, x); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i64(x.Len()).buf("x", x).f32(alpha)
	return s.launch(op, kScale, strideDims(int64(x.Len())), args)
}

// Axpy computes y += alpha*x (tl_axpy).
func (s *Stream) Axpy(alpha float32, x, y device.Buffer) error {
	const op = "Stream.Axpy"
	if err := device.CheckSame(x, y); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i64(x.Len()).f32(alpha).buf("x", x).buf("y", y)
	return s.launch(op, kAxpy, strideDims(int64(x.Len())), args)
}

// ClipGlobalNorm writes ||x|| to norm[0] and scales x down to maxNorm when
// it is larger (tl_clip_global_norm, one block).
func (s *Stream) ClipGlobalNorm(x device.Buffer, maxNorm float32, norm device.Buffer) error {
	const op = "Stream.ClipGlobalNorm"
	if err := first(device.CheckSame(x, x), checkNonEmpty("norm", norm)); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i64(x.Len()).buf("x", x).f32(maxNorm).buf("norm", norm)
	return s.launch(op, kClipGlobalNorm, oneBlock(clipThreads), args)
}

// SGDMomentum updates p with momentum and weight decay (tl_sgd_momentum).
func (s *Stream) SGDMomentum(p, g, vel, hyper device.Buffer, momentum, weightDecay float32, nesterov bool) error {
	const op = "Stream.SGDMomentum"
	state := [1]device.Buffer{vel}
	if err := device.CheckOptimizer(p, g, state[:], hyper); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i64(p.Len()).buf("p", p).buf("g", g).buf("vel", vel).buf("hyper", hyper).
		f32(momentum).f32(weightDecay).flag(nesterov)
	return s.launch(op, kSGDMomentum, strideDims(int64(p.Len())), args)
}

// AdamW updates p with decoupled weight decay (tl_adamw).
func (s *Stream) AdamW(p, g, m, v, hyper device.Buffer, beta1, beta2, eps, weightDecay float32) error {
	const op = "Stream.AdamW"
	state := [2]device.Buffer{m, v}
	if err := device.CheckOptimizer(p, g, state[:], hyper); err != nil {
		return s.dev.misuse(op, "%v", err)
	}
	args := s.args(op).i64(p.Len()).buf("p", p).buf("g", g).buf("m", m).buf("v", v).buf("hyper", hyper).
		f32(beta1).f32(beta2).f32(eps).f32(weightDecay)
	return s.launch(op, kAdamW, strideDims(int64(p.Len())), args)
}

// first returns the first non-nil error.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkNonEmpty reports a zero or empty buffer.
func checkNonEmpty(name string, b device.Buffer) error {
	if b.IsZero() || b.Len() == 0 {
		return fmt.Errorf("%s is empty", name)
	}
	return nil
}

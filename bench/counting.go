package bench

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
)

// CountingStream is a device.Stream that counts what is enqueued through
// it and forwards everything to the stream it wraps. The bench counts the
// kernels of one eager step with it. It is not safe for concurrent use.
//
// Pass the wrapped stream, not the decorator, to code that hands the
// stream back to the backend (Exec.Upload, for instance): a backend may
// type-assert its own streams.
type CountingStream struct {
	device.Stream
	// Kernels counts device.Kernels, device.ImageKernels,
	// device.SequenceKernels and device.SampleKernels calls, Copies the three copy methods,
	// Launches graph launches, Syncs the events recorded and waited on.
	Kernels, Copies, Launches, Syncs int
}

// NewCountingStream wraps s.
func NewCountingStream(s device.Stream) *CountingStream { return &CountingStream{Stream: s} }

// Reset zeroes the counters.
func (c *CountingStream) Reset() { c.Kernels, c.Copies, c.Launches, c.Syncs = 0, 0, 0, 0 }

func (c *CountingStream) kernel(err error) error {
	c.Kernels++
	return err
}

func (c *CountingStream) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b device.Buffer, beta float32, out device.Buffer) error {
	return c.kernel(c.Stream.Gemm(transA, transB, m, n, k, alpha, a, b, beta, out))
}

func (c *CountingStream) BiasAct(act device.Activation, rows, cols int, z, bias, y device.Buffer) error {
	return c.kernel(c.Stream.BiasAct(act, rows, cols, z, bias, y))
}

func (c *CountingStream) ActGrad(act device.Activation, rows, cols int, z, dy, dz device.Buffer) error {
	return c.kernel(c.Stream.ActGrad(act, rows, cols, z, dy, dz))
}

func (c *CountingStream) SoftmaxXent(rows, cols int, logits, labels, mask, probs, stats device.Buffer) error {
	return c.kernel(c.Stream.SoftmaxXent(rows, cols, logits, labels, mask, probs, stats))
}

func (c *CountingStream) SoftmaxXentGrad(rows, cols int, probs, labels, mask, dlogits device.Buffer) error {
	return c.kernel(c.Stream.SoftmaxXentGrad(rows, cols, probs, labels, mask, dlogits))
}

func (c *CountingStream) MSE(rows, cols int, pred, target, mask, stats device.Buffer) error {
	return c.kernel(c.Stream.MSE(rows, cols, pred, target, mask, stats))
}

func (c *CountingStream) MSEGrad(rows, cols int, pred, target, mask, dpred device.Buffer) error {
	return c.kernel(c.Stream.MSEGrad(rows, cols, pred, target, mask, dpred))
}

func (c *CountingStream) ColSum(rows, cols int, x device.Buffer, beta float32, out device.Buffer) error {
	return c.kernel(c.Stream.ColSum(rows, cols, x, beta, out))
}

func (c *CountingStream) Fill(x device.Buffer, v float32) error { return c.kernel(c.Stream.Fill(x, v)) }

func (c *CountingStream) Scale(x device.Buffer, alpha float32) error {
	return c.kernel(c.Stream.Scale(x, alpha))
}

func (c *CountingStream) Axpy(alpha float32, x, y device.Buffer) error {
	return c.kernel(c.Stream.Axpy(alpha, x, y))
}

func (c *CountingStream) ClipGlobalNorm(x device.Buffer, maxNorm float32, norm device.Buffer) error {
	return c.kernel(c.Stream.ClipGlobalNorm(x, maxNorm, norm))
}

func (c *CountingStream) SGDMomentum(p, g, vel, hyper device.Buffer, momentum, weightDecay float32, nesterov bool) error {
	return c.kernel(c.Stream.SGDMomentum(p, g, vel, hyper, momentum, weightDecay, nesterov))
}

func (c *CountingStream) AdamW(p, g, m, v, hyper device.Buffer, beta1, beta2, eps, weightDecay float32) error {
	return c.kernel(c.Stream.AdamW(p, g, m, v, hyper, beta1, beta2, eps, weightDecay))
}

func (c *CountingStream) Im2Col(s device.ConvShape, x, cols device.Buffer) error {
	return c.kernel(c.Stream.Im2Col(s, x, cols))
}

func (c *CountingStream) Col2Im(s device.ConvShape, dcols, dx device.Buffer) error {
	return c.kernel(c.Stream.Col2Im(s, dcols, dx))
}

func (c *CountingStream) MaxPool(s device.PoolShape, x, y, arg device.Buffer) error {
	return c.kernel(c.Stream.MaxPool(s, x, y, arg))
}

func (c *CountingStream) MaxPoolGrad(s device.PoolShape, dy, arg, dx device.Buffer) error {
	return c.kernel(c.Stream.MaxPoolGrad(s, dy, arg, dx))
}

func (c *CountingStream) AvgPool(s device.PoolShape, x, y device.Buffer) error {
	return c.kernel(c.Stream.AvgPool(s, x, y))
}

func (c *CountingStream) AvgPoolGrad(s device.PoolShape, dy, dx device.Buffer) error {
	return c.kernel(c.Stream.AvgPoolGrad(s, dy, dx))
}

func (c *CountingStream) BatchNormTrain(rows, cols int, eps, momentum float32, x, params, stats, xhat, y, running device.Buffer) error {
	return c.kernel(c.Stream.BatchNormTrain(rows, cols, eps, momentum, x, params, stats, xhat, y, running))
}

func (c *CountingStream) BatchNormEval(rows, cols int, eps float32, x, params, running, y device.Buffer) error {
	return c.kernel(c.Stream.BatchNormEval(rows, cols, eps, x, params, running, y))
}

func (c *CountingStream) BatchNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams device.Buffer) error {
	return c.kernel(c.Stream.BatchNormGrad(rows, cols, dy, xhat, params, stats, dx, dparams))
}

func (c *CountingStream) Dropout(p float32, rng, x, y, mask device.Buffer) error {
	return c.kernel(c.Stream.Dropout(p, rng, x, y, mask))
}

func (c *CountingStream) AdvanceRNG(rng device.Buffer, counters int) error {
	return c.kernel(c.Stream.AdvanceRNG(rng, counters))
}

func (c *CountingStream) Mul(x, y, z device.Buffer) error { return c.kernel(c.Stream.Mul(x, y, z)) }

func (c *CountingStream) Embedding(n, vocab, dim int, ids, table, y device.Buffer) error {
	return c.kernel(c.Stream.Embedding(n, vocab, dim, ids, table, y))
}

func (c *CountingStream) EmbeddingGrad(n, vocab, dim int, ids, dy, dtable device.Buffer) error {
	return c.kernel(c.Stream.EmbeddingGrad(n, vocab, dim, ids, dy, dtable))
}

func (c *CountingStream) LayerNorm(rows, cols int, eps float32, x, params, stats, xhat, y device.Buffer) error {
	return c.kernel(c.Stream.LayerNorm(rows, cols, eps, x, params, stats, xhat, y))
}

func (c *CountingStream) LayerNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams device.Buffer) error {
	return c.kernel(c.Stream.LayerNormGrad(rows, cols, dy, xhat, params, stats, dx, dparams))
}

func (c *CountingStream) SplitHeads(batch, seq, heads, size int, x, y device.Buffer) error {
	return c.kernel(c.Stream.SplitHeads(batch, seq, heads, size, x, y))
}

func (c *CountingStream) MergeHeads(batch, seq, heads, size int, x, y device.Buffer) error {
	return c.kernel(c.Stream.MergeHeads(batch, seq, heads, size, x, y))
}

func (c *CountingStream) BatchedGemm(transA, transB bool, count, m, n, k int, alpha float32, a device.Buffer, strideA int,
	b device.Buffer, strideB int, beta float32, out device.Buffer, strideC int) error {
	return c.kernel(c.Stream.BatchedGemm(transA, transB, count, m, n, k, alpha, a, strideA, b, strideB, beta, out, strideC))
}

func (c *CountingStream) CausalSoftmax(groups, seq int, scale float32, x, y device.Buffer) error {
	return c.kernel(c.Stream.CausalSoftmax(groups, seq, scale, x, y))
}

func (c *CountingStream) CausalSoftmaxGrad(groups, seq int, scale float32, y, dy, dx device.Buffer) error {
	return c.kernel(c.Stream.CausalSoftmaxGrad(groups, seq, scale, y, dy, dx))
}

// SampleLast forwards to the wrapped stream's device.SampleKernels, and
// fails when it has none.
func (c *CountingStream) SampleLast(vocab int, temperature float32, logits, rng, id device.Buffer) error {
	sk, err := c.sampler()
	if err != nil {
		return err
	}
	return c.kernel(sk.SampleLast(vocab, temperature, logits, rng, id))
}

// ShiftAppend forwards like SampleLast.
func (c *CountingStream) ShiftAppend(n int, id, window device.Buffer) error {
	sk, err := c.sampler()
	if err != nil {
		return err
	}
	return c.kernel(sk.ShiftAppend(n, id, window))
}

func (c *CountingStream) sampler() (device.SampleKernels, error) {
	sk, ok := c.Stream.(device.SampleKernels)
	if !ok {
		return nil, fmt.Errorf("bench: the counted stream has no sampling kernels: %w", device.ErrMisuse)
	}
	return sk, nil
}

func (c *CountingStream) CopyHtoD(dst device.Buffer, src device.HostBuffer) error {
	c.Copies++
	return c.Stream.CopyHtoD(dst, src)
}

func (c *CountingStream) CopyDtoH(dst device.HostBuffer, src device.Buffer) error {
	c.Copies++
	return c.Stream.CopyDtoH(dst, src)
}

func (c *CountingStream) CopyDtoD(dst, src device.Buffer) error {
	c.Copies++
	return c.Stream.CopyDtoD(dst, src)
}

func (c *CountingStream) Record(e device.Event) error {
	c.Syncs++
	return c.Stream.Record(e)
}

func (c *CountingStream) Wait(e device.Event) error {
	c.Syncs++
	return c.Stream.Wait(e)
}

func (c *CountingStream) Launch(x device.Exec) error {
	c.Launches++
	return c.Stream.Launch(x)
}

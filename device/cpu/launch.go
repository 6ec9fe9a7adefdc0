package cpu

import "github.com/tolaria-ml/tolaria/device"

// This file turns the Kernels methods into queued nodes: validate the
// arguments, resolve buffers to memory, and enqueue a closure over the
// kernel functions of kernels.go.

// views resolves several buffers at once.
func (s *stream) views(op string, bs ...device.Buffer) ([][]float32, error) {
	out := make([][]float32, len(bs))
	for i, b := range bs {
		v, err := s.dev.view(op, b)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// launch validates with check, resolves bufs and enqueues run over them.
func (s *stream) launch(op string, check error, run func(v [][]float32), bufs ...device.Buffer) error {
	if check != nil {
		return s.misuse(op, check)
	}
	v, err := s.views(op, bufs...)
	if err != nil {
		return err
	}
	return s.enqueue(op, node{kind: op, run: func() { run(v) }})
}

func (s *stream) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b device.Buffer, beta float32, c device.Buffer) error {
	return s.launch("Gemm", device.CheckGemm(m, n, k, a, b, c), func(v [][]float32) {
		gemm(transA, transB, m, n, k, alpha, v[0], v[1], beta, v[2])
	}, a, b, c)
}

func (s *stream) BiasAct(act device.Activation, rows, cols int, z, bias, y device.Buffer) error {
	return s.launch("BiasAct", device.CheckBiasAct(act, rows, cols, z, bias, y), func(v [][]float32) {
		biasAct(act, rows, cols, v[0], v[1], v[2])
	}, z, bias, y)
}

func (s *stream) ActGrad(act device.Activation, rows, cols int, z, dy, dz device.Buffer) error {
	return s.launch("ActGrad", device.CheckActGrad(act, rows, cols, z, dy, dz), func(v [][]float32) {
		actGrad(act, rows, cols, v[0], v[1], v[2])
	}, z, dy, dz)
}

func (s *stream) SoftmaxXent(rows, cols int, logits, labels, mask, probs, stats device.Buffer) error {
	check := first(device.CheckLoss(rows, cols, 1, logits, labels, mask, probs), device.CheckStats(stats))
	return s.launch("SoftmaxXent", check, func(v [][]float32) {
		softmaxXent(rows, cols, v[0], v[1], v[2], v[3], v[4])
	}, logits, labels, mask, probs, stats)
}

func (s *stream) SoftmaxXentGrad(rows, cols int, probs, labels, mask, dlogits device.Buffer) error {
	return s.launch("SoftmaxXentGrad", device.CheckLoss(rows, cols, 1, probs, labels, mask, dlogits), func(v [][]float32) {
		softmaxXentGrad(rows, cols, v[0], v[1], v[2], v[3])
	}, probs, labels, mask, dlogits)
}

func (s *stream) MSE(rows, cols int, pred, target, mask, stats device.Buffer) error {
	check := first(device.CheckLoss(rows, cols, cols, pred, target, mask, pred), device.CheckStats(stats))
	return s.launch("MSE", check, func(v [][]float32) {
		mse(rows, cols, v[0], v[1], v[2], v[3])
	}, pred, target, mask, stats)
}

func (s *stream) MSEGrad(rows, cols int, pred, target, mask, dpred device.Buffer) error {
	return s.launch("MSEGrad", device.CheckLoss(rows, cols, cols, pred, target, mask, dpred), func(v [][]float32) {
		mseGrad(rows, cols, v[0], v[1], v[2], v[3])
	}, pred, target, mask, dpred)
}

func (s *stream) ColSum(rows, cols int, x device.Buffer, beta float32, out device.Buffer) error {
	return s.launch("ColSum", device.CheckColSum(rows, cols, x, out), func(v [][]float32) {
		colSum(rows, cols, v[0], beta, v[1])
	}, x, out)
}

func (s *stream) Fill(x device.Buffer, val float32) error {
	return s.launch("Fill", device.CheckSame(x, x), func(v [][]float32) { fill(v[0], val) }, x)
}

func (s *stream) Scale(x device.Buffer, alpha float32) error {
	return s.launch("Scale", device.CheckSame(x, x), func(v [][]float32) { scale(v[0], alpha) }, x)
}

func (s *stream) Axpy(alpha float32, x, y device.Buffer) error {
	return s.launch("Axpy", device.CheckSame(x, y), func(v [][]float32) { axpy(alpha, v[0], v[1]) }, x, y)
}

func (s *stream) ClipGlobalNorm(x device.Buffer, maxNorm float32, norm device.Buffer) error {
	check := first(device.CheckSame(x, x), device.CheckSame(norm, norm))
	if check == nil && !(maxNorm > 0) {
		check = errorf("maxNorm must be positive, got %g", maxNorm)
	}
	return s.launch("ClipGlobalNorm", check, func(v [][]float32) { clipGlobalNorm(v[0], maxNorm, v[1]) }, x, norm)
}

func (s *stream) SGDMomentum(p, g, vel, hyper device.Buffer, momentum, weightDecay float32, nesterov bool) error {
	return s.launch("SGDMomentum", device.CheckOptimizer(p, g, []device.Buffer{vel}, hyper), func(v [][]float32) {
		sgdMomentum(v[0], v[1], v[2], v[3], momentum, weightDecay, nesterov)
	}, p, g, vel, hyper)
}

func (s *stream) AdamW(p, g, m, v, hyper device.Buffer, beta1, beta2, eps, weightDecay float32) error {
	return s.launch("AdamW", device.CheckOptimizer(p, g, []device.Buffer{m, v}, hyper), func(x [][]float32) {
		adamW(x[0], x[1], x[2], x[3], x[4], beta1, beta2, eps, weightDecay)
	}, p, g, m, v, hyper)
}

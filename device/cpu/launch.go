package cpu

import "github.com/tolaria-ml/tolaria/device"

// This file turns the Kernels methods into queued nodes: validate the
// arguments, resolve buffers to memory, and enqueue a function over the
// kernel functions of kernels.go. Everything a kernel needs to run (its
// memory, its split into parts) is made here, once, when it is enqueued or
// captured, so that running it, and replaying it, allocates nothing.

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

// launch validates with check, resolves bufs and enqueues what build
// makes of their memory.
func (s *stream) launch(op string, check error, build func(v [][]float32) func(*team), bufs ...device.Buffer) error {
	if check != nil {
		return s.misuse(op, check)
	}
	v, err := s.views(op, bufs...)
	if err != nil {
		return err
	}
	return s.enqueue(op, node{kind: op, run: build(v)})
}

// serial makes a kernel that runs on the stream goroutine alone: the small
// ones (the loss over a batch's logits), where a split costs more than the
// work.
func serial(run func(v [][]float32)) func(v [][]float32) func(*team) {
	return func(v [][]float32) func(*team) { return func(*team) { run(v) } }
}

// rangeTask is a kernel over the units [0, total) (elements, rows or
// columns) that any split computes alike: fn(lo, hi) does units lo..hi,
// and no unit's result depends on the others.
type rangeTask struct {
	total, align int
	// cost is the work per unit, in element operations, and grain the
	// least work worth a part of its own.
	cost, grain int
	fn          func(lo, hi int)
}

// elemGrain is the least number of element operations worth a part of its
// own: a hand-off to a helper costs a few microseconds.
const elemGrain = 1 << 14

func (r *rangeTask) part(i, n int, _ *scratch) {
	lo, hi := span(i, n, r.total, r.align)
	if lo < hi {
		r.fn(lo, hi)
	}
}

func (r *rangeTask) run(t *team) { t.run(r, t.parts(r.total*r.cost, r.grain)) }

// elementwise makes a split kernel over n elements of cost operations each.
func elementwise(n, cost int, fn func(lo, hi int)) func(*team) {
	r := &rangeTask{total: n, align: 16, cost: cost, grain: elemGrain, fn: fn}
	return r.run
}

func (s *stream) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b device.Buffer, beta float32, c device.Buffer) error {
	return s.launch("Gemm", device.CheckGemm(m, n, k, a, b, c), func(v [][]float32) func(*team) {
		return newGemmTask(transA, transB, m, n, k, alpha, v[0], v[1], beta, v[2]).run
	}, a, b, c)
}

// activationCost is the work of one element of act, in element operations.
func activationCost(act device.Activation) int {
	if act == device.ActGELU {
		return 16
	}
	return 1
}

func (s *stream) BiasAct(act device.Activation, rows, cols int, z, bias, y device.Buffer) error {
	return s.launch("BiasAct", device.CheckBiasAct(act, rows, cols, z, bias, y), func(v [][]float32) func(*team) {
		z, b, y := v[0], v[1], v[2]
		r := &rangeTask{total: rows, align: 1, cost: cols * activationCost(act), grain: elemGrain, fn: func(lo, hi int) {
			biasAct(act, hi-lo, cols, z[lo*cols:hi*cols], b, y[lo*cols:hi*cols])
		}}
		return r.run
	}, z, bias, y)
}

func (s *stream) ActGrad(act device.Activation, rows, cols int, z, dy, dz device.Buffer) error {
	return s.launch("ActGrad", device.CheckActGrad(act, rows, cols, z, dy, dz), func(v [][]float32) func(*team) {
		z, dy, dz := v[0], v[1], v[2]
		return elementwise(rows*cols, activationCost(act), func(lo, hi int) {
			actGrad(act, 1, hi-lo, z[lo:hi], dy[lo:hi], dz[lo:hi])
		})
	}, z, dy, dz)
}

func (s *stream) SoftmaxXent(rows, cols int, logits, labels, mask, probs, stats device.Buffer) error {
	check := first(device.CheckLoss(rows, cols, 1, logits, labels, mask, probs), device.CheckStats(stats))
	return s.launch("SoftmaxXent", check, func(v [][]float32) func(*team) {
		logits, labels, mask, probs, stats := v[0], v[1], v[2], v[3], v[4]
		// The rows' losses are kept apart and summed in row order once
		// every part is done, so the split changes no bit of the sums.
		rs := new(xentRows)
		rs.init(rows)
		r := &rangeTask{total: rows, align: 1, cost: cols * xentCost, grain: elemGrain, fn: func(lo, hi int) {
			softmaxXentRows(cols, lo, hi, logits, labels, mask, probs, rs)
		}}
		return func(t *team) {
			r.run(t)
			rs.addTo(stats, mask)
		}
	}, logits, labels, mask, probs, stats)
}

// xentCost is the work of one logit of SoftmaxXent in element operations:
// two exponentials in float64.
const xentCost = 32

func (s *stream) SoftmaxXentGrad(rows, cols int, probs, labels, mask, dlogits device.Buffer) error {
	return s.launch("SoftmaxXentGrad", device.CheckLoss(rows, cols, 1, probs, labels, mask, dlogits), func(v [][]float32) func(*team) {
		probs, labels, mask, dlogits := v[0], v[1], v[2], v[3]
		// n, the divisor, sums the whole mask; it is read once per run.
		var n float64
		r := &rangeTask{total: rows, align: 1, cost: cols, grain: elemGrain, fn: func(lo, hi int) {
			softmaxXentGradRows(cols, lo, hi, n, probs, labels, mask, dlogits)
		}}
		return func(t *team) {
			n = validRows(rows, mask)
			r.run(t)
		}
	}, probs, labels, mask, dlogits)
}

func (s *stream) MSE(rows, cols int, pred, target, mask, stats device.Buffer) error {
	check := first(device.CheckLoss(rows, cols, cols, pred, target, mask, pred), device.CheckStats(stats))
	return s.launch("MSE", check, serial(func(v [][]float32) {
		mse(rows, cols, v[0], v[1], v[2], v[3])
	}), pred, target, mask, stats)
}

func (s *stream) MSEGrad(rows, cols int, pred, target, mask, dpred device.Buffer) error {
	return s.launch("MSEGrad", device.CheckLoss(rows, cols, cols, pred, target, mask, dpred), serial(func(v [][]float32) {
		mseGrad(rows, cols, v[0], v[1], v[2], v[3])
	}), pred, target, mask, dpred)
}

// ColSum splits the columns: each column's sum runs over all rows in one
// part, so the split does not change a result.
func (s *stream) ColSum(rows, cols int, x device.Buffer, beta float32, out device.Buffer) error {
	return s.launch("ColSum", device.CheckColSum(rows, cols, x, out), func(v [][]float32) func(*team) {
		x, out := v[0], v[1]
		// Parts of 16 columns: a cache line of each row, and a block of
		// the AVX-512 sums.
		r := &rangeTask{total: cols, align: 16, cost: rows, grain: elemGrain, fn: func(lo, hi int) {
			colSum(rows, cols, lo, hi, x, beta, out)
		}}
		return r.run
	}, x, out)
}

func (s *stream) Fill(x device.Buffer, val float32) error {
	return s.launch("Fill", device.CheckSame(x, x), func(v [][]float32) func(*team) {
		x := v[0]
		return elementwise(len(x), 1, func(lo, hi int) { fill(x[lo:hi], val) })
	}, x)
}

func (s *stream) Scale(x device.Buffer, alpha float32) error {
	return s.launch("Scale", device.CheckSame(x, x), func(v [][]float32) func(*team) {
		x := v[0]
		return elementwise(len(x), 1, func(lo, hi int) { scale(x[lo:hi], alpha) })
	}, x)
}

func (s *stream) Axpy(alpha float32, x, y device.Buffer) error {
	return s.launch("Axpy", device.CheckSame(x, y), func(v [][]float32) func(*team) {
		x, y := v[0], v[1]
		return elementwise(len(y), 1, func(lo, hi int) { axpy(alpha, x[lo:hi], y[lo:hi]) })
	}, x, y)
}

func (s *stream) ClipGlobalNorm(x device.Buffer, maxNorm float32, norm device.Buffer) error {
	check := first(device.CheckSame(x, x), device.CheckSame(norm, norm))
	if check == nil && !(maxNorm > 0) {
		check = errorf("maxNorm must be positive, got %g", maxNorm)
	}
	return s.launch("ClipGlobalNorm", check, func(v [][]float32) func(*team) {
		return newClipTask(v[0], maxNorm, v[1]).run
	}, x, norm)
}

func (s *stream) SGDMomentum(p, g, vel, hyper device.Buffer, momentum, weightDecay float32, nesterov bool) error {
	return s.launch("SGDMomentum", device.CheckOptimizer(p, g, []device.Buffer{vel}, hyper), func(v [][]float32) func(*team) {
		p, g, vel, hyper := v[0], v[1], v[2], v[3]
		return elementwise(len(p), 4, func(lo, hi int) {
			sgdMomentum(p[lo:hi], g[lo:hi], vel[lo:hi], hyper, momentum, weightDecay, nesterov)
		})
	}, p, g, vel, hyper)
}

func (s *stream) AdamW(p, g, m, v, hyper device.Buffer, beta1, beta2, eps, weightDecay float32) error {
	return s.launch("AdamW", device.CheckOptimizer(p, g, []device.Buffer{m, v}, hyper), func(x [][]float32) func(*team) {
		p, g, m, v, hyper := x[0], x[1], x[2], x[3], x[4]
		return elementwise(len(p), 8, func(lo, hi int) {
			adamW(p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi], hyper, beta1, beta2, eps, weightDecay)
		})
	}, p, g, m, v, hyper)
}

package nn

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
)

// Stepper is a model's training and evaluation step at one batch size, as
// a trainer replays it: Step for an MLP, NetStep for any other net.
type Stepper interface {
	// Train enqueues one training iteration on the staged batch: forward,
	// loss (accumulating the training metrics), backward, clipping, the
	// optimizer update, and the net's running state (batchnorm's running
	// statistics, the dropout generator's offset).
	Train(s device.Stream, in Batch) error
	// Eval enqueues the evaluation forward pass, accumulating the
	// evaluation metrics.
	Eval(s device.Stream, in Batch) error
	// Accumulators are the training and evaluation metric accumulators
	// (device.StatsLen values each).
	Accumulators() (train, eval device.Buffer)
	// WithBatch is the same step on the first n rows of a batch, n at most
	// the batch size it was made for (a short last batch run eagerly).
	WithBatch(n int) Stepper
}

// Accumulators are W.TrainStats and W.EvalStats.
func (st *Step) Accumulators() (train, eval device.Buffer) { return st.W.TrainStats, st.W.EvalStats }

// WithBatch is the step on the first n rows.
func (st *Step) WithBatch(n int) Stepper {
	c := *st
	c.Batch = n
	return &c
}

// NetWorkspace is a net's per-batch-size scratch memory, from the shared
// graph pool: the head (gradients, the gradient norm, the metric
// accumulators, the activation layers' zero bias) and every layer's
// activations, gradients and scratch.
type NetWorkspace struct {
	Grads      device.Buffer // flat, like Model.Params
	Norm       device.Buffer // 1 value: the last gradient norm
	TrainStats device.Buffer // device.StatsLen accumulators for training
	EvalStats  device.Buffer // device.StatsLen accumulators for evaluation
	Zero       device.Buffer // zeros, the bias of activation layers (filled by each step)
	Bufs       []device.Buffer
}

// NetWorkspaceHead is the number of NetWorkspaceSizes's leading entries
// that are not per-layer buffers: the gradients, the norm, the two
// accumulators and the zero bias, in that order.
const NetWorkspaceHead = netWorkspaceHead

// NetWorkspaceSizes lists the buffer sizes (float32 elements) a's step
// needs at batch b, in the order NewNetStep expects them: the head (see
// NetWorkspaceHead), then per layer its activation, its gradient and its
// scratch (a conv's im2col columns, a maxpool's arg-max, a batchnorm's
// normalised input and batch statistics, a dropout's mask). A flatten is
// a view and takes nothing; an activation after a linear or conv layer is
// fused into it, which keeps the pre-activation and its gradient too.
func NetWorkspaceSizes(a Arch, b int) ([]int, error) {
	p, err := planNet(a, b)
	if err != nil {
		return nil, err
	}
	return p.sizes, nil
}

// NetSignature identifies a net's step shape for the graph pool: equal
// signatures have equal workspace sizes and graph topology.
func NetSignature(a Arch, opt Optimizer, b int) string {
	return fmt.Sprintf("net %s batch %d %s clip=%t", a.Net, b, opt.Kind, opt.ClipNorm > 0)
}

// NetStep is the training and evaluation step of any resolved net at one
// batch size: every layer's forward and backward, the loss, clipping, the
// optimizer update and the metric accumulation, enqueued with no
// allocation and no host synchronisation, so the whole of it can be
// captured into one graph. Its buffers are the workspace's (see
// NetWorkspaceSizes) and the model's; the model's Running state (batchnorm's
// running statistics, the dropout generator) is updated by Train on the
// device.
type NetStep struct {
	M     *Model
	W     NetWorkspace
	Batch int
	plan  *netPlan
}

// NewNetStep binds m (made by NewNetModel) to a workspace of the sizes
// NetWorkspaceSizes gives for batch b.
func NewNetStep(m *Model, bufs []device.Buffer, b int) (*NetStep, error) {
	if m.Arch.Params == 0 {
		return nil, fmt.Errorf("nn: NewNetStep needs a model made by NewNetModel")
	}
	p, err := planNet(m.Arch, b)
	if err != nil {
		return nil, err
	}
	if len(bufs) != len(p.sizes) {
		return nil, fmt.Errorf("nn: the workspace of %s needs %d buffers, got %d", m.Arch.Net, len(p.sizes), len(bufs))
	}
	for i, n := range p.sizes {
		if bufs[i].Len() < n {
			return nil, fmt.Errorf("nn: workspace buffer %d holds %d values, the step needs %d", i, bufs[i].Len(), n)
		}
	}
	w := NetWorkspace{Grads: bufs[0].Slice(0, p.sizes[0]), Norm: bufs[1].Slice(0, 1),
		TrainStats: bufs[2].Slice(0, device.StatsLen), EvalStats: bufs[3].Slice(0, device.StatsLen),
		Zero: bufs[4].Slice(0, p.sizes[4]), Bufs: bufs}
	return &NetStep{M: m, W: w, Batch: b, plan: p}, nil
}

// Accumulators are W.TrainStats and W.EvalStats.
func (st *NetStep) Accumulators() (train, eval device.Buffer) { return st.W.TrainStats, st.W.EvalStats }

// WithBatch is the step on the first n rows (n at most the batch size the
// workspace was made for).
func (st *NetStep) WithBatch(n int) Stepper {
	c := *st
	c.Batch = n
	return &c
}

// Train enqueues one training iteration on the staged batch (see
// Stepper.Train). Every gradient is overwritten (beta 0), so nothing is
// zeroed first.
func (st *NetStep) Train(s device.Stream, in Batch) error {
	p, err := st.pass(s, in.X, true)
	if err != nil {
		return err
	}
	if err := p.forward(); err != nil {
		return err
	}
	if err := p.loss(in, st.W.TrainStats, true); err != nil {
		return err
	}
	if err := p.backward(); err != nil {
		return err
	}
	return update(s, st.M, st.W.Grads, st.W.Norm, in.Hyper)
}

// Eval enqueues the evaluation forward pass (batchnorm with its running
// statistics, dropout the identity), accumulating the evaluation metrics.
func (st *NetStep) Eval(s device.Stream, in Batch) error {
	p, err := st.pass(s, in.X, false)
	if err != nil {
		return err
	}
	if err := p.forward(); err != nil {
		return err
	}
	return p.loss(in, st.W.EvalStats, false)
}

// Logits is where Eval and Forward leave the logits: Batch×classes values
// at the start of the buffer.
func (st *NetStep) Logits() device.Buffer {
	v := st.plan.vals[len(st.plan.vals)-1]
	return st.W.Bufs[v.buf].Slice(0, st.Batch*v.per)
}

// Forward enqueues the evaluation forward pass of x (Batch examples) and
// returns the logits (Batch×classes), which the next pass overwrites.
func (st *NetStep) Forward(s device.Stream, x device.Buffer) (device.Buffer, error) {
	p, err := st.pass(s, x, false)
	if err != nil {
		return device.Buffer{}, err
	}
	return p.act(len(st.plan.vals) - 1), p.forward()
}

func (st *NetStep) pass(s device.Stream, x device.Buffer, train bool) (pass, error) {
	if st.Batch < 1 || st.Batch > st.plan.batch {
		return pass{}, fmt.Errorf("nn: a step of %s made for batch %d cannot run %d rows", st.M.Arch.Net, st.plan.batch, st.Batch)
	}
	if want := st.Batch * st.M.Arch.Net.Input.Size(); x.Len() < want {
		return pass{}, fmt.Errorf("nn: the input holds %d values, %d rows of %s need %d", x.Len(), st.Batch, st.M.Arch.Net.Input, want)
	}
	return pass{st: st, s: s, x: x, n: st.Batch, train: train}, nil
}

// pass is one forward (and backward) over n rows.
type pass struct {
	st    *NetStep
	s     device.Stream
	x     device.Buffer
	n     int
	train bool
}

// act is value v's activation for the pass's rows.
func (p *pass) act(v int) device.Buffer {
	val := p.st.plan.vals[v]
	if val.buf < 0 {
		return p.x.Slice(0, p.n*val.per)
	}
	return p.st.W.Bufs[val.buf].Slice(0, p.n*val.per)
}

// grad is value v's gradient; ok is false when it has none.
func (p *pass) grad(v int) (g device.Buffer, ok bool) {
	val := p.st.plan.vals[v]
	if val.grad < 0 {
		return device.Buffer{}, false
	}
	return p.st.W.Bufs[val.grad].Slice(0, p.n*val.per), true
}

// scratch is workspace buffer i's first n values.
func (p *pass) scratch(i, n int) device.Buffer { return p.st.W.Bufs[i].Slice(0, n) }

func (p *pass) weights(nd Node) (w, b device.Buffer) {
	return p.st.M.Params.Slice(nd.WeightAt, nd.WeightLen), p.st.M.Params.Slice(nd.BiasAt, nd.BiasLen)
}

func (p *pass) grads(nd Node) (w, b device.Buffer) {
	return p.st.W.Grads.Slice(nd.WeightAt, nd.WeightLen), p.st.W.Grads.Slice(nd.BiasAt, nd.BiasLen)
}

func (p *pass) forward() error {
	if p.st.plan.acts {
		if err := p.s.Fill(p.st.W.Zero, 0); err != nil {
			return err
		}
	}
	for i := range p.st.plan.ops {
		if err := p.forwardOp(&p.st.plan.ops[i]); err != nil {
			return fmt.Errorf("%s (%s): %w", p.st.plan.ops[i].nd.Path, p.st.plan.ops[i].nd.Layer.Kind, err)
		}
	}
	return nil
}

func (p *pass) forwardOp(o *op) error {
	nd, s, n := o.nd, p.s, p.n
	x, y := p.act(o.in), p.act(o.out)
	switch o.kind {
	case opLinear:
		w, b := p.weights(nd)
		z := p.act(o.z)
		rows, in := rowsCols(nd.In) // a sequence's positions are rows
		if err := s.Gemm(false, false, n*rows, nd.Layer.Out, in, 1, x, w, 0, z); err != nil {
			return err
		}
		return s.BiasAct(o.act, n*rows, nd.Layer.Out, z, b, y)
	case opConv:
		w, b := p.weights(nd)
		cs := nd.Conv(n)
		cols, z := p.scratch(o.scratch[0], cs.Rows()*cs.Cols()), p.act(o.z)
		if err := p.s.Im2Col(cs, x, cols); err != nil {
			return err
		}
		if err := s.Gemm(false, false, cs.Rows(), nd.Layer.Out, cs.Cols(), 1, cols, w, 0, z); err != nil {
			return err
		}
		return s.BiasAct(o.act, cs.Rows(), nd.Layer.Out, z, b, y)
	case opMaxPool:
		return p.s.MaxPool(nd.Pool(n), x, y, p.scratch(o.scratch[0], y.Len()))
	case opAvgPool:
		return p.s.AvgPool(nd.Pool(n), x, y)
	case opBatchNorm:
		rows, cols := rowsCols(nd.In)
		params := p.st.M.Params.Slice(nd.WeightAt, 2*cols)
		running := p.st.M.Running.Slice(nd.StateAt, nd.StateLen)
		eps := float32(nd.Layer.Eps)
		if !p.train {
			return p.s.BatchNormEval(n*rows, cols, eps, x, params, running, y)
		}
		xhat, stats := p.scratch(o.scratch[0], x.Len()), p.scratch(o.scratch[1], 2*cols)
		return p.s.BatchNormTrain(n*rows, cols, eps, float32(nd.Layer.Momentum), x, params, stats, xhat, y, running)
	case opAct:
		rows, cols := rowsCols(nd.In)
		return s.BiasAct(o.act, n*rows, cols, x, p.st.W.Zero.Slice(0, cols), y)
	case opDropout:
		if !p.train {
			return s.CopyDtoD(y, x)
		}
		rng := p.st.M.rng()
		if err := p.s.Dropout(float32(nd.Layer.P), rng, x, y, p.scratch(o.scratch[0], x.Len())); err != nil {
			return err
		}
		return p.s.AdvanceRNG(rng, (x.Len()+3)/4)
	case opSigmoid:
		// sigmoid(x) = 0.5 + 0.5·tanh(x/2): no kernel of its own. x/2 is
		// kept for the backward pass.
		rows, cols := rowsCols(nd.In)
		half, bias := p.scratch(o.scratch[0], x.Len()), p.scratch(o.scratch[1], cols)
		if err := s.CopyDtoD(half, x); err != nil {
			return err
		}
		if err := s.Scale(half, 0.5); err != nil {
			return err
		}
		if err := s.BiasAct(device.ActTanh, n*rows, cols, half, p.st.W.Zero.Slice(0, cols), y); err != nil {
			return err
		}
		if err := s.Scale(y, 0.5); err != nil {
			return err
		}
		if err := s.Fill(bias, 0.5); err != nil {
			return err
		}
		return s.BiasAct(device.ActNone, n*rows, cols, y, bias, y)
	case opResStart:
		return nil
	case opResAdd:
		return s.Axpy(1, x, y)
	case opCopy:
		return s.CopyDtoD(y, x)
	}
	return p.seqForward(o)
}

// loss accumulates the loss metrics and, when grad, writes the logits'
// gradient.
func (p *pass) loss(in Batch, stats device.Buffer, grad bool) error {
	last := len(p.st.plan.vals) - 1
	logits := p.act(last)
	dlogits, _ := p.grad(last)
	out, s, n := p.st.M.Arch.Out, p.s, p.n
	rows, classes := n, out.Size()
	y, mask := in.Y.Slice(0, n*p.st.M.Spec.LabelLen()), in.Mask.Slice(0, n)
	if out.Sequence() { // a label per position: the loss is over n·T rows
		rows, classes = n*out[0], out[1]
		var err error
		if mask, err = p.tokenMask(mask, out[0]); err != nil {
			return err
		}
	}
	if p.st.M.Arch.Net.Loss == LossMSE {
		if err := s.MSE(rows, classes, logits, y, mask, stats); err != nil || !grad {
			return err
		}
		return s.MSEGrad(rows, classes, logits, y, mask, dlogits)
	}
	// The probabilities go to the gradient, which overwrites them next.
	if err := s.SoftmaxXent(rows, classes, logits, y, mask, dlogits, stats); err != nil || !grad {
		return err
	}
	return s.SoftmaxXentGrad(rows, classes, dlogits, y, mask, dlogits)
}

func (p *pass) backward() error {
	ops := p.st.plan.ops
	for i := len(ops) - 1; i >= 0; i-- {
		if err := p.backwardOp(&ops[i]); err != nil {
			return fmt.Errorf("%s (%s) backward: %w", ops[i].nd.Path, ops[i].nd.Layer.Kind, err)
		}
	}
	return nil
}

func (p *pass) backwardOp(o *op) error {
	nd, s, n := o.nd, p.s, p.n
	x := p.act(o.in)
	dx, hasDx := p.grad(o.in)
	dy, _ := p.grad(o.out)
	switch o.kind {
	case opLinear:
		w, _ := p.weights(nd)
		gw, gb := p.grads(nd)
		rows, in := rowsCols(nd.In)
		rows, out := n*rows, nd.Layer.Out
		dz, err := p.preActGrad(o, rows, out, dy)
		if err != nil {
			return err
		}
		if err := s.Gemm(true, false, in, out, rows, 1, x, dz, 0, gw); err != nil {
			return err
		}
		if err := s.ColSum(rows, out, dz, 0, gb); err != nil {
			return err
		}
		if !hasDx {
			return nil
		}
		return s.Gemm(false, true, rows, in, out, 1, dz, w, 0, dx)
	case opConv:
		w, _ := p.weights(nd)
		gw, gb := p.grads(nd)
		cs := nd.Conv(n)
		rows, k, out := cs.Rows(), cs.Cols(), nd.Layer.Out
		cols := p.scratch(o.scratch[0], rows*k)
		dz, err := p.preActGrad(o, rows, out, dy)
		if err != nil {
			return err
		}
		if err := s.Gemm(true, false, k, out, rows, 1, cols, dz, 0, gw); err != nil {
			return err
		}
		if err := s.ColSum(rows, out, dz, 0, gb); err != nil {
			return err
		}
		if !hasDx {
			return nil
		}
		// The columns are read by the weights' gradient only: their
		// gradient takes their place.
		if err := s.Gemm(false, true, rows, k, out, 1, dz, w, 0, cols); err != nil {
			return err
		}
		return p.s.Col2Im(cs, cols, dx)
	case opMaxPool:
		return p.s.MaxPoolGrad(nd.Pool(n), dy, p.scratch(o.scratch[0], dy.Len()), dx)
	case opAvgPool:
		return p.s.AvgPoolGrad(nd.Pool(n), dy, dx)
	case opBatchNorm:
		rows, cols := rowsCols(nd.In)
		params := p.st.M.Params.Slice(nd.WeightAt, 2*cols)
		dparams := p.st.W.Grads.Slice(nd.WeightAt, 2*cols)
		xhat, stats := p.scratch(o.scratch[0], x.Len()), p.scratch(o.scratch[1], 2*cols)
		return p.s.BatchNormGrad(n*rows, cols, dy, xhat, params, stats, dx, dparams)
	case opAct:
		rows, cols := rowsCols(nd.In)
		return s.ActGrad(o.act, n*rows, cols, x, dy, dx)
	case opDropout:
		return p.s.Mul(dy, p.scratch(o.scratch[0], dy.Len()), dx)
	case opSigmoid:
		// d/dx (0.5 + 0.5·tanh(x/2)) = 0.25·(1 - tanh²(x/2)).
		rows, cols := rowsCols(nd.In)
		if err := s.ActGrad(device.ActTanh, n*rows, cols, p.scratch(o.scratch[0], x.Len()), dy, dx); err != nil {
			return err
		}
		return s.Scale(dx, 0.25)
	case opResStart:
		if !hasDx {
			return nil
		}
		return s.Axpy(1, dy, dx)
	case opResAdd:
		return nil
	case opCopy:
		return s.CopyDtoD(dx, dy)
	}
	return p.seqBackward(o)
}

// preActGrad is the gradient of a linear or conv layer's pre-activation:
// dy itself without a fused activation, else dy·act'(z) in z's gradient.
func (p *pass) preActGrad(o *op, rows, cols int, dy device.Buffer) (device.Buffer, error) {
	if o.z == o.out {
		return dy, nil
	}
	dz, _ := p.grad(o.z)
	return dz, p.s.ActGrad(o.act, rows, cols, p.act(o.z), dy, dz)
}

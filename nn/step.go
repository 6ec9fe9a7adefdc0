package nn

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
)

// Workspace is the per-batch-size scratch memory of a step: activations,
// gradients, the gradient norm and the metric accumulators. It comes from
// the shared graph pool, so a second trainer with the same signature
// reuses it.
type Workspace struct {
	Grads      device.Buffer   // flat, like Model.Params
	Norm       device.Buffer   // 1 value: the last gradient norm
	TrainStats device.Buffer   // device.StatsLen accumulators for training
	EvalStats  device.Buffer   // device.StatsLen accumulators for evaluation
	Z          []device.Buffer // pre-activations per layer, batch×out
	A          []device.Buffer // activations per hidden layer, batch×out
	D          []device.Buffer // gradients w.r.t. Z per layer, batch×out
}

// WorkspaceSizes lists the buffer sizes (float32 elements) Workspace needs
// for spec at batch b, in the order NewWorkspace expects them.
func WorkspaceSizes(spec Spec, b int) []int {
	sizes := []int{spec.ParamCount(), 1, device.StatsLen, device.StatsLen}
	layers := spec.Layers()
	for _, l := range layers {
		sizes = append(sizes, b*l.Out) // Z
	}
	for _, l := range layers[:len(layers)-1] {
		sizes = append(sizes, b*l.Out) // A
	}
	for _, l := range layers {
		sizes = append(sizes, b*l.Out) // D
	}
	return sizes
}

// Signature identifies the step's shape: equal signatures have equal
// workspace sizes and graph topology.
func Signature(spec Spec, opt Optimizer, b int) string {
	return fmt.Sprintf("mlp %s batch %d %s clip=%t", spec, b, opt.Kind, opt.ClipNorm > 0)
}

// NewWorkspace assigns buffers of the sizes from WorkspaceSizes.
func NewWorkspace(spec Spec, bufs []device.Buffer) (Workspace, error) {
	n := len(spec.Layers())
	if len(bufs) != 4+3*n-1 {
		return Workspace{}, fmt.Errorf("nn: workspace needs %d buffers, got %d", 4+3*n-1, len(bufs))
	}
	w := Workspace{Grads: bufs[0], Norm: bufs[1], TrainStats: bufs[2], EvalStats: bufs[3]}
	w.Z = bufs[4 : 4+n]
	w.A = bufs[4+n : 4+2*n-1]
	w.D = bufs[4+2*n-1:]
	return w, nil
}

// Step is one model's training and evaluation step at one batch size.
type Step struct {
	M     *Model
	W     Workspace
	Batch int
}

// act is the activation after layer i.
func (st *Step) act(i int) device.Activation {
	if i == len(st.M.Spec.Layers())-1 {
		return device.ActNone
	}
	return st.M.Spec.Act
}

func weights(params device.Buffer, l Layer) (device.Buffer, device.Buffer) {
	return params.Slice(l.WeightAt, l.In*l.Out), params.Slice(l.BiasAt, l.Out)
}

func (st *Step) grads(l Layer) (device.Buffer, device.Buffer) {
	return st.W.Grads.Slice(l.WeightAt, l.In*l.Out), st.W.Grads.Slice(l.BiasAt, l.Out)
}

// Forward enqueues the forward pass of x (Batch×Inputs) with params, the
// model's own parameters or another vector of the same spec (a target
// network's), and returns the logits: the last Z, Batch×Outputs, which
// the next Forward overwrites. Backward needs the activations of a Forward
// with the model's own parameters.
func (st *Step) Forward(s device.Stream, params, x device.Buffer) (device.Buffer, error) {
	if params.Len() != st.M.Spec.ParamCount() {
		return device.Buffer{}, fmt.Errorf("nn: forward with %d parameters, model %s has %d", params.Len(), st.M.Spec, st.M.Spec.ParamCount())
	}
	return st.W.Z[len(st.W.Z)-1], st.forward(s, params, x)
}

// forward computes the logits (the last Z) from x.
func (st *Step) forward(s device.Stream, params, x device.Buffer) error {
	b, in := st.Batch, x
	for i, l := range st.M.Spec.Layers() {
		w, bias := weights(params, l)
		out := st.W.Z[i]
		if i < len(st.W.A) {
			out = st.W.A[i]
		}
		if err := s.Gemm(false, false, b, l.Out, l.In, 1, in, w, 0, st.W.Z[i]); err != nil {
			return err
		}
		if err := s.BiasAct(st.act(i), b, l.Out, st.W.Z[i], bias, out); err != nil {
			return err
		}
		in = out
	}
	return nil
}

// loss accumulates the loss metrics and writes the logits' gradient into
// the last D when grad is set.
func (st *Step) loss(s device.Stream, in Batch, stats device.Buffer, grad bool) error {
	spec, b := st.M.Spec, st.Batch
	last := len(st.W.Z) - 1
	logits, dlogits := st.W.Z[last], st.W.D[last]
	if spec.Loss == LossMSE {
		if err := s.MSE(b, spec.Outputs, logits, in.Y, in.Mask, stats); err != nil || !grad {
			return err
		}
		return s.MSEGrad(b, spec.Outputs, logits, in.Y, in.Mask, dlogits)
	}
	// The probabilities go to D (it is overwritten by the gradient next).
	if err := s.SoftmaxXent(b, spec.Outputs, logits, in.Y, in.Mask, dlogits, stats); err != nil || !grad {
		return err
	}
	return s.SoftmaxXentGrad(b, spec.Outputs, dlogits, in.Y, in.Mask, dlogits)
}

// DLogits is the gradient of the loss with respect to the logits (the last
// D, Batch×Outputs), which Backward reads.
func (st *Step) DLogits() device.Buffer { return st.W.D[len(st.W.D)-1] }

// Backward enqueues the parameters' gradients (into W.Grads, overwritten)
// from DLogits, using the activations of the last Forward of x with the
// model's own parameters.
func (st *Step) Backward(s device.Stream, x device.Buffer) error { return st.backward(s, x) }

// Update enqueues the global-norm clipping of W.Grads, when the optimizer
// clips, and the optimizer's update of the parameters with the
// hyper-parameters in hyper (device.HyperLen values).
func (st *Step) Update(s device.Stream, hyper device.Buffer) error { return st.update(s, hyper) }

// backward computes all gradients from the last D.
func (st *Step) backward(s device.Stream, x device.Buffer) error {
	layers := st.M.Spec.Layers()
	b := st.Batch
	for i := len(layers) - 1; i >= 0; i-- {
		l := layers[i]
		in := x
		if i > 0 {
			in = st.W.A[i-1]
		}
		gw, gb := st.grads(l)
		if err := s.Gemm(true, false, l.In, l.Out, b, 1, in, st.W.D[i], 0, gw); err != nil {
			return err
		}
		if err := s.ColSum(b, l.Out, st.W.D[i], 0, gb); err != nil {
			return err
		}
		if i == 0 {
			break
		}
		w, _ := weights(st.M.Params, l)
		if err := s.Gemm(false, true, b, l.In, l.Out, 1, st.W.D[i], w, 0, st.W.D[i-1]); err != nil {
			return err
		}
		if err := s.ActGrad(st.act(i-1), b, l.In, st.W.Z[i-1], st.W.D[i-1], st.W.D[i-1]); err != nil {
			return err
		}
	}
	return nil
}

func (st *Step) update(s device.Stream, hyper device.Buffer) error {
	return update(s, st.M, st.W.Grads, st.W.Norm, hyper)
}

// update enqueues the global-norm clipping of g into norm, when m's
// optimizer clips, and its update of m's parameters.
func update(s device.Stream, m *Model, g, norm, hyper device.Buffer) error {
	o := m.Opt
	if o.ClipNorm > 0 {
		if err := s.ClipGlobalNorm(g, float32(o.ClipNorm), norm); err != nil {
			return err
		}
	}
	p := m.Params
	if o.Kind == AdamW {
		return s.AdamW(p, g, m.State[0], m.State[1], hyper,
			float32(o.Beta1), float32(o.Beta2), float32(o.Eps), float32(o.WeightDecay))
	}
	return s.SGDMomentum(p, g, m.State[0], hyper, float32(o.Momentum), float32(o.WeightDecay), o.Nesterov)
}

// Train enqueues one full training iteration reading the staged batch:
// forward, loss (accumulating the training metrics), backward, clipping
// and the optimizer update. Backward overwrites every gradient (its GEMMs
// and column sums run with beta 0, which reads nothing of their output),
// so the gradients are not zeroed first.
func (st *Step) Train(s device.Stream, in Batch) error {
	if err := st.forward(s, st.M.Params, in.X); err != nil {
		return err
	}
	if err := st.loss(s, in, st.W.TrainStats, true); err != nil {
		return err
	}
	if err := st.backward(s, in.X); err != nil {
		return err
	}
	return st.update(s, in.Hyper)
}

// Eval enqueues a forward pass accumulating the evaluation metrics.
func (st *Step) Eval(s device.Stream, in Batch) error {
	if err := st.forward(s, st.M.Params, in.X); err != nil {
		return err
	}
	return st.loss(s, in, st.W.EvalStats, false)
}

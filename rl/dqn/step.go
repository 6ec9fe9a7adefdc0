package dqn

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// Layout places a learner minibatch in one flat record, so that one copy
// stages all of it: observations, next observations, the taken actions as
// one-hot rows, rewards, not-terminated flags (1, or 0 where the next
// state is terminal) and the optimizer's hyper-parameters.
type Layout struct {
	Batch, ObsSize, Actions         int
	Obs, Next, Action, Reward, Live int // offsets
	Hyper, Len                      int
}

// NewLayout returns the record layout for spec at batch b.
func NewLayout(spec nn.Spec, b int) Layout {
	l := Layout{Batch: b, ObsSize: spec.Inputs, Actions: spec.Outputs}
	l.Next = b * l.ObsSize
	l.Action = l.Next + b*l.ObsSize
	l.Reward = l.Action + b*l.Actions
	l.Live = l.Reward + b
	l.Hyper = l.Live + b
	l.Len = l.Hyper + device.HyperLen
	return l
}

// Input is a staged record's views.
type Input struct {
	Obs, Next, Action, Reward, Live, Hyper device.Buffer
}

// Views splits a device buffer holding one record.
func (l Layout) Views(b device.Buffer) Input {
	o := l.Batch * l.ObsSize
	return Input{Obs: b.Slice(l.Obs, o), Next: b.Slice(l.Next, o), Action: b.Slice(l.Action, l.Batch*l.Actions),
		Reward: b.Slice(l.Reward, l.Batch), Live: b.Slice(l.Live, l.Batch), Hyper: b.Slice(l.Hyper, device.HyperLen)}
}

// Fill writes a minibatch into a host record: obs and next are
// Batch×ObsSize, actions, rewards and terminated Batch long.
func (l Layout) Fill(dst []float32, obs, next []float32, actions []int, rewards []float32, terminated []bool) error {
	if len(dst) != l.Len || len(obs) != l.Batch*l.ObsSize || len(next) != len(obs) || len(actions) != l.Batch ||
		len(rewards) != l.Batch || len(terminated) != l.Batch {
		return fmt.Errorf("dqn: a record of %d rows of %d observations needs matching slices", l.Batch, l.ObsSize)
	}
	copy(dst[l.Obs:], obs)
	copy(dst[l.Next:], next)
	onehot := dst[l.Action : l.Action+l.Batch*l.Actions]
	clear(onehot)
	for r, a := range actions {
		if a < 0 || a >= l.Actions {
			return fmt.Errorf("dqn: row %d has action %d, the network has %d", r, a, l.Actions)
		}
		onehot[r*l.Actions+a] = 1
	}
	copy(dst[l.Reward:], rewards)
	for r, t := range terminated {
		dst[l.Live+r] = 1
		if t {
			dst[l.Live+r] = 0
		}
	}
	return nil
}

// StepSizes lists the workspace sizes the learner's step needs for spec at
// batch b: the MLP step's, the Q operations', then its own.
func StepSizes(spec nn.Spec, b int) []int {
	sizes := append(nn.WorkspaceSizes(spec, b), nn.QOpsSizes(b, spec.Outputs)...)
	return append(sizes, b*spec.Outputs, b, b, b, b) // best, qnext, y, diff, grad
}

// Signature identifies the learner step's shape for the graph pool.
func Signature(spec nn.Spec, opt nn.Optimizer, b int) string {
	return fmt.Sprintf("dqn %s", nn.Signature(spec, opt, b))
}

// QStep is the learner's device state and its training step: the online
// network (with its optimizer state), the target network's parameters,
// and a step that enqueues one Double DQN update with no allocation, no
// synchronisation and no host read, so that it can be captured.
type QStep struct {
	Spec   nn.Spec
	Online *nn.Model
	Target device.Buffer
	Gamma  float32

	mlp               nn.Step
	q                 *nn.QOps
	best              device.Buffer // Batch×Actions: the online network's choice on the next observations
	qnext, y, diff, g device.Buffer // Batch each
}

// NewQStep builds the step over workspace buffers of the sizes from
// StepSizes, for online (whose spec it takes) and target (a parameter
// vector of the same spec) at batch b, and uploads its constants.
func NewQStep(dev device.Device, online *nn.Model, target device.Buffer, b int, gamma, huberDelta float32, bufs []device.Buffer) (*QStep, error) {
	spec := online.Spec
	if target.Len() != spec.ParamCount() {
		return nil, fmt.Errorf("dqn: target network has %d parameters, %s has %d", target.Len(), spec, spec.ParamCount())
	}
	sizes := StepSizes(spec, b)
	if len(bufs) != len(sizes) {
		return nil, fmt.Errorf("dqn: the learner step needs %d workspace buffers, got %d", len(sizes), len(bufs))
	}
	nw := len(nn.WorkspaceSizes(spec, b))
	nq := len(nn.QOpsSizes(b, spec.Outputs))
	w, err := nn.NewWorkspace(spec, bufs[:nw])
	if err != nil {
		return nil, err
	}
	q, err := nn.NewQOps(b, spec.Outputs, huberDelta, bufs[nw:nw+nq])
	if err != nil {
		return nil, err
	}
	if err := q.Upload(dev); err != nil {
		return nil, err
	}
	own := bufs[nw+nq:]
	return &QStep{Spec: spec, Online: online, Target: target, Gamma: gamma, mlp: nn.Step{M: online, W: w, Batch: b}, q: q,
		best: own[0], qnext: own[1], y: own[2], diff: own[3], g: own[4]}, nil
}

// Stats are the training statistics the step accumulates (loss sum and
// row count, device.StatsLen values); the host reads and clears them.
func (st *QStep) Stats() device.Buffer { return st.mlp.W.TrainStats }

// Norm is the last gradient norm before clipping (1 value).
func (st *QStep) Norm() device.Buffer { return st.mlp.W.Norm }

// Train enqueues one Double DQN update from the record in:
// y = r + gamma * live * Q_target(s', argmax_a Q_online(s', a)), the
// Huber loss of Q_online(s, a) - y averaged over the batch, its gradient
// through the online network, clipping and the optimizer's update. The
// target network is not changed (SyncTarget does that).
func (st *QStep) Train(s device.Stream, in Input) error {
	b := st.mlp.Batch
	ops := []func() error{
		func() error { return st.forward(s, st.Online.Params, in.Next) },
		func() error { return st.q.ArgMaxOneHot(s, st.logits(), st.best) },
		func() error { return st.forward(s, st.Target, in.Next) },
		func() error { return st.q.Gather(s, st.logits(), st.best, st.qnext) },
		// y = r + gamma * (live ? qnext : 0); live is 0 or 1, so the
		// masked copy multiplies by it exactly.
		func() error { return s.ActGrad(device.ActReLU, b, 1, in.Live, st.qnext, st.qnext) },
		func() error { return s.CopyDtoD(st.y, in.Reward) },
		func() error { return s.Axpy(st.Gamma, st.qnext, st.y) },
		func() error { return st.forward(s, st.Online.Params, in.Obs) },
		func() error { return st.q.Gather(s, st.logits(), in.Action, st.diff) },
		func() error { return s.Axpy(-1, st.y, st.diff) },
		func() error { return st.q.Huber(s, st.diff, st.Stats(), st.g, 1/float32(b)) },
		func() error { return st.q.Scatter(s, st.g, in.Action, st.mlp.DLogits()) },
		func() error { return st.mlp.Backward(s, in.Obs) },
		func() error { return st.mlp.Update(s, in.Hyper) },
	}
	for _, op := range ops {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

func (st *QStep) forward(s device.Stream, params, x device.Buffer) error {
	_, err := st.mlp.Forward(s, params, x)
	return err
}

func (st *QStep) logits() device.Buffer { return st.mlp.W.Z[len(st.mlp.W.Z)-1] }

// SoftUpdateTarget enqueues target = (1-tau)*target + tau*online.
func (st *QStep) SoftUpdateTarget(s device.Stream, tau float32) error {
	if err := s.Scale(st.Target, 1-tau); err != nil {
		return err
	}
	return s.Axpy(tau, st.Online.Params, st.Target)
}

// SyncTarget enqueues the copy of the online parameters into the target.
func (st *QStep) SyncTarget(s device.Stream) error { return s.CopyDtoD(st.Target, st.Online.Params) }

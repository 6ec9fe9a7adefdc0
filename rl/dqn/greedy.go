package dqn

import (
	"errors"
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
)

// greedy is the device side of a greedy policy over a batch of n
// observations, which the actor and the evaluator each have one of: the
// observations are copied in from obsHost, one forward pass and an argmax
// choose each row's action, and the actions are copied out to actHost,
// all of it one graph slot that Capture captures and act replays.
type greedy struct {
	dev    device.Device
	params device.Buffer // the weights the forward pass reads
	report *graphReport
	timer  *replayTimer // from the first capture on

	lease   *graphs.Lease
	engine  *graphs.Engine
	mlp     nn.Step
	q       *nn.QOps
	stream  device.Stream
	done    device.Event
	obsDev  device.Buffer
	onehot  device.Buffer
	actDev  device.Buffer // the greedy actions as floats
	obsHost device.HostBuffer
	actHost device.HostBuffer
}

// greedySizes: the MLP workspace at batch n, the Q operations', then the
// observations, the one-hot choices, the actions and, when the policy
// owns its weights, the parameters.
func greedySizes(spec nn.Spec, n int, ownWeights bool) []int {
	sizes := append(nn.WorkspaceSizes(spec, n), nn.QOpsSizes(n, spec.Outputs)...)
	sizes = append(sizes, n*spec.Inputs, n*spec.Outputs, n)
	if ownWeights {
		sizes = append(sizes, spec.ParamCount())
	}
	return sizes
}

// newGreedy makes a policy of spec over n observations on dev, its memory
// leased from shared's pool under the signature who (with spec and n).
// It reads params, a parameter vector of spec; a zero params gives it a
// weights buffer of its own (greedy.params) for the caller to fill. Its
// graph activity goes to report.
func newGreedy(dev device.Device, shared *Shared, who string, spec nn.Spec, n int, params device.Buffer, report *graphReport) (*greedy, error) {
	g := &greedy{dev: dev, params: params, report: report}
	if err := g.build(shared, who, spec, n); err != nil {
		return nil, errors.Join(err, g.close())
	}
	return g, nil
}

func (g *greedy) build(shared *Shared, who string, spec nn.Spec, n int) error {
	dev, own := g.dev, g.params.IsZero()
	var err error
	if g.lease, err = shared.Pool.Acquire(dev, fmt.Sprintf("%s %s batch %d", who, spec, n), greedySizes(spec, n, own)); err != nil {
		return err
	}
	ws := g.lease.Workspace()
	nw, nq := len(nn.WorkspaceSizes(spec, n)), len(nn.QOpsSizes(n, spec.Outputs))
	w, err := nn.NewWorkspace(spec, ws[:nw])
	if err != nil {
		return err
	}
	if g.q, err = nn.NewQOps(n, spec.Outputs, 1, ws[nw:nw+nq]); err != nil {
		return err
	}
	if err := g.q.Upload(dev); err != nil {
		return err
	}
	rest := ws[nw+nq:]
	g.obsDev, g.onehot, g.actDev = rest[0], rest[1], rest[2]
	if own {
		g.params = rest[3]
	}
	// The forward pass reads only the spec and the parameters of its model.
	g.mlp = nn.Step{M: &nn.Model{Spec: spec, Params: g.params}, W: w, Batch: n}
	if g.stream, err = dev.NewStream(); err != nil {
		return err
	}
	if g.done, err = dev.NewEvent(); err != nil {
		return err
	}
	if g.obsHost, err = dev.AllocHost(n * spec.Inputs); err != nil {
		return err
	}
	if g.actHost, err = dev.AllocHost(n); err != nil {
		return err
	}
	g.engine, err = graphs.NewEngine(graphs.EngineConfig{Lease: g.lease, Guard: shared.Guard, MaxCaptureFailures: 3,
		Slots: []graphs.Slot{{ID: 0, Step: g.policy}}})
	return err
}

// policy is the captured work of one batch: observations in, the greedy
// action of each row out.
func (g *greedy) policy(s device.Stream) error {
	if err := s.CopyHtoD(g.obsDev, g.obsHost); err != nil {
		return err
	}
	logits, err := g.mlp.Forward(s, g.params, g.obsDev)
	if err != nil {
		return err
	}
	if err := g.q.ArgMaxOneHot(s, logits, g.onehot); err != nil {
		return err
	}
	if err := g.q.Index(s, g.onehot, g.actDev); err != nil {
		return err
	}
	return s.CopyDtoH(g.actHost, g.actDev)
}

// capture captures the policy when the engine has not yet; a failed
// capture is a *graphs.CaptureError, reported as a fallback, and leaves
// the policy eager.
func (g *greedy) capture() error {
	if !g.engine.Due(false) {
		return nil
	}
	results, err := g.engine.Capture(g.stream)
	var failed *graphs.CaptureError
	switch {
	case errors.As(err, &failed):
		g.report.captureFailed(err)
		return err
	case err != nil:
		return err
	}
	g.report.captured(results)
	if g.timer == nil {
		// The policy waits for its actions at every step, so two pairs
		// never wait for a replay in flight.
		g.timer, err = newReplayTimer(g.dev, g.report.obs, 2)
	}
	return err
}

// act runs the policy on the observations in obsHost and returns the
// actions, as floats in actHost, once they are there.
func (g *greedy) act() ([]float32, error) {
	step := func() (graphs.Result, error) { return g.engine.Run(g.stream, 0) }
	var res graphs.Result
	var err error
	if g.timer != nil {
		res, err = g.timer.run(g.stream, g.engine.Replays(0), step)
	} else {
		res, err = step()
	}
	g.report.ran(res)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(g.stream.Record(g.done), g.done.Synchronize()); err != nil {
		return nil, err
	}
	return g.actHost.Data(), nil
}

// close frees what the policy allocated; weights it was given stay.
func (g *greedy) close() error {
	var errs []error
	if g.stream != nil {
		errs = append(errs, g.stream.Synchronize())
	}
	if g.timer != nil {
		errs = append(errs, g.timer.flush(), g.timer.destroy())
		g.timer = nil
	}
	if g.stream != nil {
		errs = append(errs, g.stream.Destroy())
	}
	if g.done != nil {
		errs = append(errs, g.done.Destroy())
	}
	for _, h := range []device.HostBuffer{g.obsHost, g.actHost} {
		if !h.IsZero() {
			errs = append(errs, g.dev.FreeHost(h))
		}
	}
	if g.lease != nil {
		errs = append(errs, g.lease.Release())
	}
	g.stream, g.done, g.lease = nil, nil, nil
	g.obsHost, g.actHost = device.HostBuffer{}, device.HostBuffer{}
	return errors.Join(errs...)
}

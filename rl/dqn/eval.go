package dqn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/env"
)

// EvalResult is one greedy evaluation of an actor's weights.
type EvalResult struct {
	EnvSteps   int    // the actor's environment steps when it ran
	Version    uint64 // the version of the weights evaluated
	MeanReturn float64
	Episodes   int       // complete episodes played, EvalEpisodes
	Returns    []float64 // each episode's return, in environment order
	Elapsed    time.Duration
}

// Evaluator measures a policy the way it will be used: it plays
// EvalEpisodes complete episodes of the greedy policy (no exploration),
// one per environment of its own vector, all of them through one batched
// forward pass per vector step. Every evaluation starts the same episodes
// (their seeds come from the agent's seed), so the result depends on the
// weights alone. It reads the weights from a device buffer it does not
// own and never writes them.
type Evaluator struct {
	dev    device.Device
	spec   nn.Spec
	n      int
	graphs bool
	seeds  []uint64
	envs   []env.Env
	params device.Buffer

	lease   *graphs.Lease
	engine  *graphs.Engine
	mlp     nn.Step
	q       *nn.QOps
	stream  device.Stream
	done    device.Event
	obsDev  device.Buffer
	onehot  device.Buffer
	actDev  device.Buffer
	obsHost device.HostBuffer
	actHost device.HostBuffer

	returns []float64
	live    []bool
}

// evalSeeds are the episode seeds of agent's evaluations: a stream of its
// own, apart from the training environments'.
func evalSeeds(cfg Config, agent, n int) []uint64 {
	rng := rand.New(rand.NewPCG(cfg.AgentSeed(agent), 0x6576616c)) // "eval"
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	return seeds
}

// NewEvaluator makes agent's evaluator of cfg.EvalEpisodes episodes over
// params, a parameter vector of cfg's network on dev. With useGraphs,
// Capture captures its forward pass.
func NewEvaluator(dev device.Device, shared *Shared, cfg Config, agent int, params device.Buffer, useGraphs bool) (*Evaluator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EvalEpisodes < 1 {
		return nil, fmt.Errorf("dqn: an evaluator needs eval_episodes of at least 1, got %d", cfg.EvalEpisodes)
	}
	spec, err := cfg.Spec()
	if err != nil {
		return nil, err
	}
	if params.Len() != spec.ParamCount() {
		return nil, fmt.Errorf("dqn: evaluator: the weights have %d parameters, %s has %d", params.Len(), spec, spec.ParamCount())
	}
	f, _ := env.New(cfg.Env)
	n := cfg.EvalEpisodes
	e := &Evaluator{dev: dev, spec: spec, n: n, graphs: useGraphs, seeds: evalSeeds(cfg, agent, n), params: params,
		returns: make([]float64, n), live: make([]bool, n)}
	for range n {
		e.envs = append(e.envs, f())
	}
	if err := e.build(shared); err != nil {
		return nil, errors.Join(err, e.Close())
	}
	return e, nil
}

// evalSizes: the MLP workspace at batch n, the Q operations', then the
// observations, the one-hot choices and the actions.
func evalSizes(spec nn.Spec, n int) []int {
	sizes := append(nn.WorkspaceSizes(spec, n), nn.QOpsSizes(n, spec.Outputs)...)
	return append(sizes, n*spec.Inputs, n*spec.Outputs, n)
}

func (e *Evaluator) build(shared *Shared) error {
	dev, spec, n := e.dev, e.spec, e.n
	var err error
	if e.lease, err = shared.Pool.Acquire(dev, fmt.Sprintf("dqn eval %s batch %d", spec, n), evalSizes(spec, n)); err != nil {
		return err
	}
	ws := e.lease.Workspace()
	nw, nq := len(nn.WorkspaceSizes(spec, n)), len(nn.QOpsSizes(n, spec.Outputs))
	w, err := nn.NewWorkspace(spec, ws[:nw])
	if err != nil {
		return err
	}
	if e.q, err = nn.NewQOps(n, spec.Outputs, 1, ws[nw:nw+nq]); err != nil {
		return err
	}
	if err := e.q.Upload(dev); err != nil {
		return err
	}
	own := ws[nw+nq:]
	e.obsDev, e.onehot, e.actDev = own[0], own[1], own[2]
	e.mlp = nn.Step{M: &nn.Model{Spec: spec, Params: e.params}, W: w, Batch: n}
	if e.stream, err = dev.NewStream(); err != nil {
		return err
	}
	if e.done, err = dev.NewEvent(); err != nil {
		return err
	}
	if e.obsHost, err = dev.AllocHost(n * spec.Inputs); err != nil {
		return err
	}
	if e.actHost, err = dev.AllocHost(n); err != nil {
		return err
	}
	e.engine, err = graphs.NewEngine(graphs.EngineConfig{Lease: e.lease, Guard: shared.Guard, MaxCaptureFailures: 3,
		Slots: []graphs.Slot{{ID: 0, Step: e.policy}}})
	return err
}

// policy is one vector step's device work: observations in, the greedy
// action of each environment out.
func (e *Evaluator) policy(s device.Stream) error {
	if err := s.CopyHtoD(e.obsDev, e.obsHost); err != nil {
		return err
	}
	logits, err := e.mlp.Forward(s, e.params, e.obsDev)
	if err != nil {
		return err
	}
	if err := e.q.ArgMaxOneHot(s, logits, e.onehot); err != nil {
		return err
	}
	if err := e.q.Index(s, e.onehot, e.actDev); err != nil {
		return err
	}
	return s.CopyDtoH(e.actHost, e.actDev)
}

// Capture captures the forward pass, when graphs are on. Like the
// actor's, call it while no other device work of the process is in
// flight. A failed capture leaves the evaluation eager.
func (e *Evaluator) Capture() error {
	if !e.graphs || !e.engine.Due(false) {
		return nil
	}
	_, err := e.engine.Capture(e.stream)
	var failed *graphs.CaptureError
	if errors.As(err, &failed) {
		return nil
	}
	return err
}

// Episodes is the number of episodes an evaluation plays.
func (e *Evaluator) Episodes() int { return e.n }

// Evaluate plays one episode in each environment with the greedy policy
// of the weights in params, which must not change until it returns, and
// returns the mean return and each episode's return (a new slice).
func (e *Evaluator) Evaluate() (float64, []float64, error) {
	o := e.spec.Inputs
	obs := e.obsHost.Data()
	for i, en := range e.envs {
		en.Reset(e.seeds[i], obs[i*o:(i+1)*o])
		e.returns[i], e.live[i] = 0, true
	}
	// A finished environment's row keeps its last observation; its action
	// is computed with the others' and ignored.
	for left := e.n; left > 0; {
		if _, err := e.engine.Run(e.stream, 0); err != nil {
			return 0, nil, err
		}
		if err := errors.Join(e.stream.Record(e.done), e.done.Synchronize()); err != nil {
			return 0, nil, err
		}
		for i, a := range e.actHost.Data() {
			if !e.live[i] {
				continue
			}
			r, term, trunc, err := e.envs[i].Step(int(a), obs[i*o:(i+1)*o])
			if err != nil {
				return 0, nil, fmt.Errorf("dqn: evaluation environment %d: %w", i, err)
			}
			e.returns[i] += float64(r)
			if term || trunc {
				e.live[i] = false
				left--
			}
		}
	}
	var sum float64
	for _, r := range e.returns {
		sum += r
	}
	return sum / float64(e.n), append([]float64(nil), e.returns...), nil
}

// Close frees what the evaluator allocated; the weights stay.
func (e *Evaluator) Close() error {
	var errs []error
	if e.stream != nil {
		errs = append(errs, e.stream.Synchronize(), e.stream.Destroy())
	}
	if e.done != nil {
		errs = append(errs, e.done.Destroy())
	}
	for _, h := range []device.HostBuffer{e.obsHost, e.actHost} {
		if !h.IsZero() {
			errs = append(errs, e.dev.FreeHost(h))
		}
	}
	if e.lease != nil {
		errs = append(errs, e.lease.Release())
	}
	e.stream, e.done, e.lease = nil, nil, nil
	e.obsHost, e.actHost = device.HostBuffer{}, device.HostBuffer{}
	return errors.Join(errs...)
}

// evaluate runs the actor's evaluator on its local weights when an
// evaluation is due (every EvalInterval environment steps) and reports it.
func (a *Actor) evaluate() error {
	if a.eval == nil || a.steps < a.evalAt {
		return nil
	}
	iv := a.cfg.EvalInterval
	a.evalAt = (a.steps/iv + 1) * iv
	start := time.Now()
	mean, returns, err := a.eval.Evaluate()
	if err != nil {
		return fmt.Errorf("dqn: evaluation at environment step %d: %w", a.steps, err)
	}
	if a.opts.OnEval != nil {
		a.opts.OnEval(EvalResult{EnvSteps: a.steps, Version: a.version.Load(), MeanReturn: mean, Episodes: len(returns),
			Returns: returns, Elapsed: time.Since(start)})
	}
	return nil
}

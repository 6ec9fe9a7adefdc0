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
	"github.com/tolaria-ml/tolaria/trainer"
)

// EpisodeRecord is one finished episode of an agent.
type EpisodeRecord struct {
	Return   float64
	Length   int
	EnvSteps int // the agent's environment steps when it ended
}

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
	spec   nn.Spec
	n      int
	graphs bool
	seeds  []uint64
	envs   []env.Env
	pol    *greedy // over params, which it does not own

	returns []float64
	live    []bool
	epsilon float64 // Config.EvalEpsilon
	explore uint64  // the seed of every evaluation's exploration
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
// Capture captures its forward pass. obs, when not nil, is told its
// captures, replays and fallbacks (the graph GraphEval).
func NewEvaluator(dev device.Device, shared *Shared, cfg Config, agent int, params device.Buffer, useGraphs bool, obs trainer.Observer) (*Evaluator, error) {
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
	_, f, err := cfg.Task()
	if err != nil {
		return nil, err
	}
	n := cfg.EvalEpisodes
	e := &Evaluator{spec: spec, n: n, graphs: useGraphs, seeds: evalSeeds(cfg, agent, n),
		returns: make([]float64, n), live: make([]bool, n), epsilon: cfg.EvalEpsilon, explore: cfg.AgentSeed(agent)}
	for range n {
		e.envs = append(e.envs, f())
	}
	if e.pol, err = newGreedy(dev, shared, "dqn eval", spec, n, params, newGraphReport(obs, shared.Pool, GraphEval, false)); err != nil {
		return nil, err
	}
	return e, nil
}

// Capture captures the forward pass, when graphs are on. Like the
// actor's, call it while no other device work of the process is in
// flight. A failed capture leaves the evaluation eager (and is reported).
func (e *Evaluator) Capture() error {
	if !e.graphs {
		return nil
	}
	err := e.pol.capture()
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
	obs := e.pol.obsHost.Data()
	for i, en := range e.envs {
		en.Reset(e.seeds[i], obs[i*o:(i+1)*o])
		e.returns[i], e.live[i] = 0, true
	}
	rng := evalExploration(e.explore)
	// A finished environment's row keeps its last observation; its action
	// is computed with the others' and ignored.
	for left := e.n; left > 0; {
		acts, err := e.pol.act()
		if err != nil {
			return 0, nil, err
		}
		for i, a := range acts {
			if !e.live[i] {
				continue
			}
			act := int(a)
			if e.epsilon > 0 && rng.Float64() < e.epsilon {
				act = rng.IntN(e.spec.Outputs)
			}
			r, term, trunc, err := e.envs[i].Step(act, obs[i*o:(i+1)*o])
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

// evalExploration is the generator of an evaluation's exploration
// (Config.EvalEpsilon): the same numbers at every evaluation.
func evalExploration(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x6576616c657073)) // "evaleps"
}

// Close frees what the evaluator allocated; the weights stay.
func (e *Evaluator) Close() error {
	if e.pol == nil {
		return nil
	}
	err := e.pol.close()
	e.pol = nil
	return err
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

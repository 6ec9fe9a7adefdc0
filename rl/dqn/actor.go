package dqn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/trainer"
)

// ActorOptions are the actor's runtime choices beyond Config.
type ActorOptions struct {
	// Graphs captures the policy's forward pass and replays it.
	Graphs bool
	// MaxLead is how many training steps' worth of transitions
	// (TrainEvery each) the actor may run ahead of the learner; 0 means
	// no limit. A limit keeps the replay ratio when the learner is slower.
	MaxLead int
	// OnEpisode, when set, is told every finished episode and the
	// environment steps taken so far.
	OnEpisode func(e env.Episode, steps int)
	// OnEval, when set, is told every greedy evaluation (every
	// EvalInterval environment steps; see Evaluator).
	OnEval func(EvalResult)
	// Observer, when set, is told the graph activity of the policy
	// (GraphPolicy) and of the evaluator (GraphEval) as a training run
	// reports its own: captures, replays, fallbacks and their events.
	// It is called from the goroutine that runs the actor.
	Observer trainer.Observer
}

// Actor plays one agent's vector of environments with its local copy of
// the published weights: one captured forward pass chooses the greedy
// action of every environment (the observation copy in and the action
// copy out are part of the graph), then each environment explores with
// probability epsilon. Transitions go to the agent's replay buffer.
type Actor struct {
	cfg   Config
	opts  ActorOptions
	dev   device.Device
	mem   *shm.Memory
	vec   *env.Vec
	rng   *rand.Rand
	spec  nn.Spec
	pol   *greedy           // over weights of its own (pol.params)
	wHost device.HostBuffer // the weights as read from shared memory

	version  atomic.Uint64 // of the local weights
	steps    int           // environment steps taken, those of earlier actors of the agent included
	vsteps   int           // vector steps taken
	syncs    atomic.Int64  // weight reads that loaded newer weights
	waiting  atomic.Bool   // for the first weights or for the learner
	actions  []int
	next     []float32
	out      []env.Transition
	episodes []env.Episode

	eval   *Evaluator // nil when EvalInterval is 0
	evalAt int        // the environment steps at which the next evaluation is due
	solved bool       // in lockstep: the evaluation of the last step solved the task
}

// NewActor makes agent's actor on dev over its shared memory.
func NewActor(dev device.Device, shared *Shared, mem *shm.Memory, cfg Config, agent int, opts ActorOptions) (*Actor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec, err := cfg.Spec()
	if err != nil {
		return nil, err
	}
	if mem.Layout() != cfg.Layout(spec) {
		return nil, fmt.Errorf("dqn: actor: %w: memory %s is laid out as %+v, the configuration needs %+v",
			shm.ErrMismatch, mem.Path(), mem.Layout(), cfg.Layout(spec))
	}
	seed := cfg.AgentSeed(agent)
	// An actor that takes over an agent's buffer (a restart, a resumed
	// run) continues its step count, and so its epsilon schedule, and
	// plays episodes of its own rather than those of the first actor.
	steps := mem.Appended()
	_, f, err := cfg.Task()
	if err != nil {
		return nil, err
	}
	vec, err := env.NewVec(f, cfg.NumEnvs, seed^steps*0x9e3779b97f4a7c15)
	if err != nil {
		return nil, err
	}
	a := &Actor{cfg: cfg, opts: opts, dev: dev, mem: mem, vec: vec, spec: spec, steps: int(steps),
		rng:     rand.New(rand.NewPCG(seed, 0x6163746f72^steps)), // "actor"
		actions: make([]int, cfg.NumEnvs), next: make([]float32, cfg.NumEnvs*spec.Inputs),
		out: make([]env.Transition, cfg.NumEnvs)}
	if cfg.Lockstep {
		a.opts.OnEval = a.lockstepOnEval(opts.OnEval)
	}
	if a.pol, err = newGreedy(dev, shared, "dqn actor", spec, cfg.NumEnvs, device.Buffer{},
		newGraphReport(opts.Observer, shared.Pool, GraphPolicy, true)); err != nil {
		return nil, err
	}
	if a.wHost, err = dev.AllocHost(spec.ParamCount()); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	if cfg.EvalInterval > 0 {
		// The next multiple of the interval: an actor that takes over
		// an agent keeps its predecessors' evaluation steps.
		a.evalAt = (a.steps/cfg.EvalInterval + 1) * cfg.EvalInterval
		if a.eval, err = NewEvaluator(dev, shared, cfg, agent, a.pol.params, opts.Graphs, opts.Observer); err != nil {
			return nil, errors.Join(err, a.Close())
		}
	}
	return a, nil
}

// Steps is the number of environment steps taken, by this actor and by
// the agent's actors before it. It is read by the goroutine that steps.
func (a *Actor) Steps() int { return a.steps }

// Version is the version of the weights the actor acts with; safe from
// any goroutine.
func (a *Actor) Version() uint64 { return a.version.Load() }

// Syncs is the number of weight reads that loaded newer weights; safe from
// any goroutine.
func (a *Actor) Syncs() int64 { return a.syncs.Load() }

// Waiting reports whether the actor waits, for the first weights or for
// its learner (see ActorOptions.MaxLead), rather than acts; safe from any
// goroutine.
func (a *Actor) Waiting() bool { return a.waiting.Load() }

// Sync loads the published weights when they are newer than the local
// ones, waiting for the first publish (or the stop flag, or ctx).
func (a *Actor) Sync(ctx context.Context) error {
	for {
		v := a.mem.Version()
		if v > 0 && v == a.version.Load() {
			return nil
		}
		if v > 0 {
			break
		}
		if a.mem.Stopped() || ctx.Err() != nil {
			return errors.Join(errStopped, ctx.Err())
		}
		a.waiting.Store(true)
		time.Sleep(time.Millisecond)
	}
	a.waiting.Store(false)
	v, _, err := a.mem.ReadWeights(a.wHost.Data())
	if err != nil {
		return err
	}
	p := a.pol
	if err := errors.Join(p.stream.CopyHtoD(p.params, a.wHost), p.stream.Record(p.done)); err != nil {
		return err
	}
	// The pinned weights must not change until the copy is done.
	if err := p.done.Synchronize(); err != nil {
		return err
	}
	a.version.Store(v)
	a.syncs.Add(1)
	return nil
}

var errStopped = errors.New("dqn: the agent was stopped")

// Capture captures the policy, when graphs are on. Call it before Run,
// while no other device work of the process is in flight: a capture is
// global.
func (a *Actor) Capture() error {
	if a.eval != nil {
		if err := a.eval.Capture(); err != nil {
			return err
		}
	}
	if !a.opts.Graphs {
		return nil
	}
	return a.pol.capture()
}

// Step takes one vector step: greedy actions from the forward pass,
// epsilon-greedy exploration, the environments' step, and one transition
// per environment appended to the replay buffer.
//
// The agent goes no further than TotalSteps: the last vector step appends
// only the transitions it still needs, those of the first environments,
// and tells only their finished episodes. (The vector steps as one, so
// the environments past them take that step too; their transitions are
// dropped, and the actor, done, never acts on them.) The agent's count
// need not be a multiple of NumEnvs before that step: TotalSteps need not
// be, and an actor killed between two environments' appends leaves the
// buffer mid-way through a vector step, which the actor started again
// goes on counting from (NewActor).
func (a *Actor) Step() error {
	copy(a.pol.obsHost.Data(), a.vec.Obs())
	acts, err := a.pol.act()
	if err != nil {
		return err
	}
	eps := a.cfg.Epsilon(a.steps)
	for i, g := range acts {
		a.actions[i] = int(g)
		if a.rng.Float64() < eps {
			a.actions[i] = a.rng.IntN(a.vec.NumActions())
		}
	}
	obs := a.pol.obsHost.Data() // the observations acted on; Vec.Step overwrites its own
	a.episodes, err = a.vec.Step(a.actions, a.next, a.out, a.episodes[:0])
	if err != nil {
		return err
	}
	n := a.needed()
	if n < len(a.out) {
		a.episodes = slices.DeleteFunc(a.episodes, func(e env.Episode) bool { return e.Env >= n })
	}
	o := a.spec.Inputs
	for i, t := range a.out[:n] {
		err := a.mem.Append(shm.Transition{Obs: obs[i*o : (i+1)*o], Action: a.actions[i], Reward: t.Reward,
			Terminated: t.Terminated, Truncated: t.Truncated, NextObs: a.next[i*o : (i+1)*o]})
		if err != nil {
			return err
		}
	}
	a.steps += n
	a.vsteps++
	if len(a.episodes) > 0 {
		// The agent's epoch counter is its episodes finished; the actor
		// is its only writer, the learner and the coordinator read it.
		a.mem.SetEpoch(a.mem.Epoch() + uint64(len(a.episodes)))
	}
	if a.opts.OnEpisode != nil {
		for _, e := range a.episodes {
			a.opts.OnEpisode(e, a.steps)
		}
	}
	return nil
}

// needed is how many of the environments' next steps the agent still
// takes: all of them short of TotalSteps.
func (a *Actor) needed() int {
	return min(len(a.out), max(0, a.cfg.TotalSteps-a.steps))
}

// Run acts until TotalSteps environment steps are taken, the stop flag is
// set or ctx is done, reading the published weights every SyncInterval
// vector steps and waiting while it is MaxLead training steps ahead of
// the learner. In lockstep (Config.Lockstep) it takes turns with the
// learner instead (see runLockstep).
func (a *Actor) Run(ctx context.Context) error {
	if a.cfg.Lockstep {
		return a.runLockstep(ctx)
	}
	if err := a.Sync(ctx); err != nil {
		return ignoreStop(err)
	}
	for a.steps < a.cfg.TotalSteps && !a.mem.Stopped() && ctx.Err() == nil {
		if a.vsteps%a.cfg.SyncInterval == 0 {
			if err := a.Sync(ctx); err != nil {
				return ignoreStop(err)
			}
		}
		if err := a.waitForLearner(ctx); err != nil {
			return ignoreStop(err)
		}
		if err := a.Step(); err != nil {
			return fmt.Errorf("dqn: actor step %d: %w", a.steps, err)
		}
		if err := a.evaluate(); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (a *Actor) waitForLearner(ctx context.Context) error {
	if a.opts.MaxLead <= 0 {
		return nil
	}
	for {
		limit := uint64(a.cfg.LearningStarts + (int(a.mem.LearnerSteps())+a.opts.MaxLead)*a.cfg.TrainEvery)
		// A buffer started again empty (shm.StartAt) must first be
		// refilled: the learner waits for learning_starts transitions
		// past its first, so the actor may run that far ahead.
		limit = max(limit, a.mem.First()+uint64(a.cfg.LearningStarts+a.opts.MaxLead*a.cfg.TrainEvery))
		if a.mem.Appended() < limit {
			a.waiting.Store(false)
			return nil
		}
		if a.mem.Stopped() || ctx.Err() != nil {
			return errors.Join(errStopped, ctx.Err())
		}
		a.waiting.Store(true)
		time.Sleep(100 * time.Microsecond)
	}
}

func ignoreStop(err error) error {
	if errors.Is(err, errStopped) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// Close frees what the actor allocated.
func (a *Actor) Close() error {
	var errs []error
	if a.eval != nil {
		errs = append(errs, a.eval.Close())
		a.eval = nil
	}
	if a.pol != nil {
		// Its stream, which copies the weights in, is synchronised
		// before wHost is freed.
		errs = append(errs, a.pol.close())
		a.pol = nil
	}
	if !a.wHost.IsZero() {
		errs = append(errs, a.dev.FreeHost(a.wHost))
		a.wHost = device.HostBuffer{}
	}
	return errors.Join(errs...)
}

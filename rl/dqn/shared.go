package dqn

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/trainer"
)

// DefaultWorldSaveEvery is how often, in vector steps, a shared actor
// saves its worlds when SharedActorOptions.SaveEvery is 0.
const DefaultWorldSaveEvery = 1000

// SharedActorOptions are the shared actor's runtime choices beyond Config.
type SharedActorOptions struct {
	// Graphs captures each agent's policy (and evaluation) forward pass
	// and replays it.
	Graphs bool
	// MaxLead is how many training steps' worth of transitions the actor
	// may run ahead of any agent's learner (see ActorOptions.MaxLead); the
	// world waits for the slowest learner. 0: no limit.
	MaxLead int
	// OnEpisode, when set, is told each agent's finished episodes and its
	// environment steps so far.
	OnEpisode func(agent int, e env.Episode, steps int)
	// OnEval, when set, is told each agent's greedy evaluation.
	OnEval func(agent int, r EvalResult)
	// Observer, when set, gives the observer of agent's graph activity
	// (its GraphPolicy and GraphEval), as ActorOptions.Observer.
	Observer func(agent int) trainer.Observer
	// WorldFile, when set, is where the worlds are saved (atomically)
	// every SaveEvery vector steps and when Run returns, and where
	// NewSharedActor restores them from when the file exists: an actor
	// started again goes on from the worlds as they were saved.
	WorldFile string
	SaveEvery int // vector steps between saves; 0: DefaultWorldSaveEvery
}

// SharedActor steps NumEnvs worlds of NumAgents agents (a MultiEnv such as
// Forage) for all the agents at once. Each agent acts with its own copy
// of its learner's published weights through its own batched forward pass
// (one row per world, captured as the per-agent Actor's is), explores
// with its own generator and epsilon schedule, reads its newer weights
// every SyncInterval vector steps and appends its own transitions to its
// own replay buffer: each agent keeps its learner, buffer and weights, as
// with an actor per agent. Only the world is shared.
type SharedActor struct {
	cfg    Config
	opts   SharedActorOptions
	dev    device.Device
	spec   nn.Spec
	agents []*sharedAgent

	worlds   []env.MultiEnv
	length   []int         // each world's steps in its episode
	seedSrc  *rand.PCG     // the worlds' episode seeds
	seeds    *rand.Rand    // over seedSrc
	worldObs [][][]float32 // [world][agent]: the agent's row in its next
	worldCur [][][]float32 // [world][agent]: the agent's row in its cur
	actions  [][]int       // [world][agent]
	rewards  [][]float32   // [world][agent]
	vsteps   int
	waiting  atomic.Bool
	restored int // the environment steps of the restored worlds; -1: none

	evalAt     int
	evalWorlds []env.MultiEnv
	evalSeeds  []uint64
	evalObs    [][][]float32 // [world][agent]: the agent's row of its eval.obsHost
	evalRet    [][]float64   // [agent][world]
}

type sharedAgent struct {
	mem     *shm.Memory
	pol     *greedy
	eval    *greedy // over pol.params; nil without evaluation
	wHost   device.HostBuffer
	src     *rand.PCG
	rng     *rand.Rand
	version atomic.Uint64
	syncs   atomic.Int64
	steps   int       // its environment steps: its buffer's transitions
	cur     []float32 // NumEnvs×Inputs, the observations to act on
	next    []float32
	ret     []float64 // its return so far in each world's episode
	done    []env.Episode
}

// worldSaver is what a world must be to be saved: Forage is.
type worldSaver interface {
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
	Observe(obs [][]float32)
}

// NewSharedActor makes the shared actor of cfg's agents on dev, mems[i]
// being agent i's memory. With opts.WorldFile naming a file that exists,
// the worlds go on from it (Restored says from which step).
func NewSharedActor(dev device.Device, shared *Shared, mems []*shm.Memory, cfg Config, opts SharedActorOptions) (*SharedActor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ActorMode() != ActorShared {
		return nil, fmt.Errorf("dqn: a shared actor needs actor: %s, the configuration runs %s", ActorShared, cfg.ActorMode())
	}
	if len(mems) != cfg.NumAgents {
		return nil, fmt.Errorf("dqn: a shared actor of %d agents was given %d memories", cfg.NumAgents, len(mems))
	}
	spec, err := cfg.Spec()
	if err != nil {
		return nil, err
	}
	_, mk, err := cfg.World()
	if err != nil {
		return nil, err
	}
	if opts.SaveEvery <= 0 {
		opts.SaveEvery = DefaultWorldSaveEvery
	}
	n, o := cfg.NumEnvs, spec.Inputs
	s := &SharedActor{cfg: cfg, opts: opts, dev: dev, spec: spec, length: make([]int, n), restored: -1}
	for i, mem := range mems {
		if mem.Layout() != cfg.Layout(spec) {
			return nil, fmt.Errorf("dqn: shared actor: agent %d: %w: memory %s is laid out as %+v, the configuration needs %+v",
				i, shm.ErrMismatch, mem.Path(), mem.Layout(), cfg.Layout(spec))
		}
		// As an Actor does: one started again continues its agent's step
		// count (and so its epsilon schedule) from its buffer.
		steps := mem.Appended()
		src := rand.NewPCG(cfg.AgentSeed(i), 0x6163746f72^steps) // "actor"
		s.agents = append(s.agents, &sharedAgent{mem: mem, src: src, rng: rand.New(src), steps: int(steps),
			cur: make([]float32, n*o), next: make([]float32, n*o), ret: make([]float64, n)})
	}
	if err := s.build(shared, mk); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	first := uint64(s.agents[0].steps)
	s.seedSrc = rand.NewPCG(cfg.Seed^first*0x9e3779b97f4a7c15, 0x776f726c64) // "world"
	s.seeds = rand.New(s.seedSrc)
	for w, world := range s.worlds {
		world.Reset(s.seeds.Uint64(), s.worldCur[w])
	}
	if opts.WorldFile != "" {
		if err := s.restore(); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	if cfg.EvalInterval > 0 {
		s.evalAt = (s.Steps()/cfg.EvalInterval + 1) * cfg.EvalInterval
	}
	return s, nil
}

// build makes the worlds and each agent's policies and host buffers.
func (s *SharedActor) build(shared *Shared, mk func() env.MultiEnv) error {
	cfg, n, o := s.cfg, s.cfg.NumEnvs, s.spec.Inputs
	rows := func(buf []float32, w int) []float32 { return buf[w*o : (w+1)*o] }
	for w := range n {
		s.worlds = append(s.worlds, mk())
		s.actions = append(s.actions, make([]int, cfg.NumAgents))
		s.rewards = append(s.rewards, make([]float32, cfg.NumAgents))
		next, cur := make([][]float32, cfg.NumAgents), make([][]float32, cfg.NumAgents)
		for i, ag := range s.agents {
			next[i], cur[i] = rows(ag.next, w), rows(ag.cur, w)
		}
		s.worldObs, s.worldCur = append(s.worldObs, next), append(s.worldCur, cur)
	}
	if s.opts.WorldFile != "" {
		if _, ok := s.worlds[0].(worldSaver); !ok {
			return fmt.Errorf("dqn: shared actor: %s cannot be saved, so it cannot resume after a restart", s.worlds[0].Name())
		}
	}
	observer := func(i int) trainer.Observer {
		if s.opts.Observer == nil {
			return nil
		}
		return s.opts.Observer(i)
	}
	var err error
	for i, ag := range s.agents {
		who := fmt.Sprintf("dqn shared actor agent %d", i)
		if ag.pol, err = newGreedy(s.dev, shared, who, s.spec, n, device.Buffer{},
			newGraphReport(observer(i), shared.Pool, GraphPolicy, true)); err != nil {
			return err
		}
		if ag.wHost, err = s.dev.AllocHost(s.spec.ParamCount()); err != nil {
			return err
		}
		if cfg.EvalInterval > 0 {
			if ag.eval, err = newGreedy(s.dev, shared, who+" eval", s.spec, cfg.EvalEpisodes, ag.pol.params,
				newGraphReport(observer(i), shared.Pool, GraphEval, false)); err != nil {
				return err
			}
		}
	}
	if cfg.EvalInterval > 0 {
		e := cfg.EvalEpisodes
		s.evalSeeds = evalSeeds(cfg, 0, e)
		s.evalRet = make([][]float64, cfg.NumAgents)
		for i := range s.evalRet {
			s.evalRet[i] = make([]float64, e)
		}
		for w := range e {
			s.evalWorlds = append(s.evalWorlds, mk())
			obs := make([][]float32, cfg.NumAgents)
			for i, ag := range s.agents {
				obs[i] = rows(ag.eval.obsHost.Data(), w)
			}
			s.evalObs = append(s.evalObs, obs)
		}
	}
	return nil
}

// Steps is the environment steps every agent has taken, its earlier
// actors' included: the fewest of any agent's (they differ only when an
// actor was killed between two agents' appends).
func (s *SharedActor) Steps() int {
	m := s.agents[0].steps
	for _, ag := range s.agents {
		m = min(m, ag.steps)
	}
	return m
}

// AgentSteps is agent i's environment steps.
func (s *SharedActor) AgentSteps(i int) int { return s.agents[i].steps }

// Version is the version of agent i's weights; safe from any goroutine.
func (s *SharedActor) Version(i int) uint64 { return s.agents[i].version.Load() }

// Syncs is agent i's weight reads that loaded newer weights; safe from any
// goroutine.
func (s *SharedActor) Syncs(i int) int64 { return s.agents[i].syncs.Load() }

// Waiting reports whether the actor waits for weights or for a learner;
// safe from any goroutine.
func (s *SharedActor) Waiting() bool { return s.waiting.Load() }

// Restored is the environment steps at which the worlds it went on from
// were saved, or -1 when it started them afresh.
func (s *SharedActor) Restored() int { return s.restored }

// Capture captures every agent's policy and evaluation, when graphs are
// on. Call it before Run, while no other device work of the process is in
// flight. A failed evaluation capture leaves that evaluation eager.
func (s *SharedActor) Capture() error {
	if !s.opts.Graphs {
		return nil
	}
	var failed *graphs.CaptureError
	for _, ag := range s.agents {
		if ag.eval != nil {
			if err := ag.eval.capture(); err != nil && !errors.As(err, &failed) {
				return err
			}
		}
		if err := ag.pol.capture(); err != nil {
			return err
		}
	}
	return nil
}

// sync loads agent i's published weights when they are newer than its
// copy; wait says to wait for its first publish (or a stop, or ctx).
func (s *SharedActor) sync(ctx context.Context, ag *sharedAgent, wait bool) error {
	for {
		v := ag.mem.Version()
		if v == ag.version.Load() && v > 0 {
			return nil
		}
		if v > 0 {
			break
		}
		if !wait {
			return nil
		}
		if s.stopped() || ctx.Err() != nil {
			return errors.Join(errStopped, ctx.Err())
		}
		s.waiting.Store(true)
		time.Sleep(time.Millisecond)
	}
	s.waiting.Store(false)
	v, _, err := ag.mem.ReadWeights(ag.wHost.Data())
	if err != nil {
		return err
	}
	p := ag.pol
	if err := errors.Join(p.stream.CopyHtoD(p.params, ag.wHost), p.stream.Record(p.done)); err != nil {
		return err
	}
	if err := p.done.Synchronize(); err != nil {
		return err
	}
	ag.version.Store(v)
	ag.syncs.Add(1)
	return nil
}

// stopped says that every agent was stopped: the world has nobody left to
// learn from it. An agent stopped alone (its learner failed) goes on
// acting with its last weights, its transitions still written.
func (s *SharedActor) stopped() bool {
	for _, ag := range s.agents {
		if !ag.mem.Stopped() {
			return false
		}
	}
	return true
}

// Step takes one vector step: each agent's greedy actions from its own
// forward pass, its epsilon-greedy exploration, every world's step with
// all the agents' actions, and each agent's transitions appended to its
// own buffer.
//
// No agent goes past TotalSteps: the last vector step steps only the
// worlds some agent still needs, and appends to each agent's buffer only
// the transitions it still needs. An agent's count need not be a
// multiple of NumEnvs: TotalSteps need not be, and an actor killed
// between two worlds' appends leaves its agents mid-way through a vector
// step, which the actor started again goes on counting from.
func (s *SharedActor) Step() error {
	for i, ag := range s.agents {
		copy(ag.pol.obsHost.Data(), ag.cur)
		acts, err := ag.pol.act()
		if err != nil {
			return fmt.Errorf("agent %d's policy: %w", i, err)
		}
		eps := s.cfg.Epsilon(ag.steps)
		for w, g := range acts {
			a := int(g)
			if ag.rng.Float64() < eps {
				a = ag.rng.IntN(s.spec.Outputs)
			}
			s.actions[w][i] = a
		}
	}
	o := s.spec.Inputs
	worlds := s.worlds[:s.needed(s.Steps())]
	for w, world := range worlds {
		term, trunc, err := world.Step(s.actions[w], s.worldObs[w], s.rewards[w])
		if err != nil {
			return fmt.Errorf("world %d: %w", w, err)
		}
		s.length[w]++
		for i, ag := range s.agents {
			r := s.rewards[w][i]
			ag.ret[w] += float64(r)
			if w >= s.needed(ag.steps) {
				continue // it has its TotalSteps: the world's episode goes on without its transition
			}
			err := ag.mem.Append(shm.Transition{Obs: ag.cur[w*o : (w+1)*o], Action: s.actions[w][i], Reward: r,
				Terminated: term, Truncated: trunc, NextObs: ag.next[w*o : (w+1)*o]})
			if err != nil {
				return fmt.Errorf("agent %d's buffer: %w", i, err)
			}
		}
		if term || trunc {
			for _, ag := range s.agents {
				ag.done = append(ag.done, env.Episode{Env: w, Return: ag.ret[w], Length: s.length[w]})
				ag.ret[w] = 0
			}
			s.length[w] = 0
			world.Reset(s.seeds.Uint64(), s.worldCur[w])
			continue
		}
		for i := range s.agents {
			copy(s.worldCur[w][i], s.worldObs[w][i])
		}
	}
	s.vsteps++
	for i, ag := range s.agents {
		ag.steps += s.needed(ag.steps)
		if len(ag.done) > 0 {
			ag.mem.SetEpoch(ag.mem.Epoch() + uint64(len(ag.done)))
		}
		if s.opts.OnEpisode != nil {
			for _, e := range ag.done {
				s.opts.OnEpisode(i, e, ag.steps)
			}
		}
		ag.done = ag.done[:0]
	}
	return nil
}

// needed is how many of the worlds' next steps an agent with steps
// environment steps still takes: all of them short of TotalSteps.
func (s *SharedActor) needed(steps int) int {
	return min(len(s.worlds), max(0, s.cfg.TotalSteps-steps))
}

// Run acts until TotalSteps environment steps are taken, every agent is
// stopped or ctx is done: reading each agent's published weights every
// SyncInterval vector steps (the first time waiting for every agent's
// first publish), waiting while any live agent's learner is MaxLead
// training steps behind, evaluating every EvalInterval environment steps
// and saving the worlds every SaveEvery vector steps and as it returns.
func (s *SharedActor) Run(ctx context.Context) error {
	err := s.run(ctx)
	if s.opts.WorldFile != "" {
		err = errors.Join(err, s.SaveWorld())
	}
	return err
}

func (s *SharedActor) run(ctx context.Context) error {
	for _, ag := range s.agents {
		if err := s.sync(ctx, ag, true); err != nil {
			return ignoreStop(err)
		}
	}
	for s.Steps() < s.cfg.TotalSteps && !s.stopped() && ctx.Err() == nil {
		if s.vsteps%s.cfg.SyncInterval == 0 {
			for _, ag := range s.agents {
				if err := s.sync(ctx, ag, false); err != nil {
					return err
				}
			}
		}
		if err := s.waitForLearners(ctx); err != nil {
			return ignoreStop(err)
		}
		if err := s.Step(); err != nil {
			return fmt.Errorf("dqn: shared actor step %d: %w", s.Steps(), err)
		}
		if err := s.evaluate(); err != nil {
			return err
		}
		if s.opts.WorldFile != "" && s.vsteps%s.opts.SaveEvery == 0 {
			if err := s.SaveWorld(); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// waitForLearners waits while a live agent's buffer is MaxLead training
// steps ahead of its learner (see Actor.waitForLearner): the world steps
// at the pace of the slowest learner.
func (s *SharedActor) waitForLearners(ctx context.Context) error {
	if s.opts.MaxLead <= 0 {
		return nil
	}
	c := s.cfg
	for {
		ahead := false
		for _, ag := range s.agents {
			m := ag.mem
			if m.Stopped() {
				continue
			}
			limit := uint64(c.LearningStarts + (int(m.LearnerSteps())+s.opts.MaxLead)*c.TrainEvery)
			limit = max(limit, m.First()+uint64(c.LearningStarts+s.opts.MaxLead*c.TrainEvery))
			if m.Appended() >= limit {
				ahead = true
				break
			}
		}
		if !ahead {
			s.waiting.Store(false)
			return nil
		}
		if s.stopped() || ctx.Err() != nil {
			return errors.Join(errStopped, ctx.Err())
		}
		s.waiting.Store(true)
		time.Sleep(100 * time.Microsecond)
	}
}

// evaluate plays, when due, EvalEpisodes episodes of the world (the same
// episodes every time) with every agent acting greedily on its current
// weights, and reports each agent's mean return.
func (s *SharedActor) evaluate() error {
	if s.cfg.EvalInterval <= 0 || s.Steps() < s.evalAt {
		return nil
	}
	iv := s.cfg.EvalInterval
	s.evalAt = (s.Steps()/iv + 1) * iv
	start := time.Now()
	if err := s.playEval(); err != nil {
		return fmt.Errorf("dqn: evaluation at environment step %d: %w", s.Steps(), err)
	}
	if s.opts.OnEval == nil {
		return nil
	}
	elapsed := time.Since(start)
	for i, ag := range s.agents {
		var sum float64
		for _, r := range s.evalRet[i] {
			sum += r
		}
		n := len(s.evalRet[i])
		s.opts.OnEval(i, EvalResult{EnvSteps: ag.steps, Version: ag.version.Load(), MeanReturn: sum / float64(n), Episodes: n,
			Returns: append([]float64(nil), s.evalRet[i]...), Elapsed: elapsed})
	}
	return nil
}

// playEval plays one episode in each evaluation world, every agent
// choosing its greedy action through its evaluation forward pass, and
// leaves each agent's returns in evalRet.
func (s *SharedActor) playEval() error {
	live := make([]bool, len(s.evalWorlds))
	for w, world := range s.evalWorlds {
		world.Reset(s.evalSeeds[w], s.evalObs[w])
		live[w] = true
		for i := range s.agents {
			s.evalRet[i][w] = 0
		}
	}
	actions, rewards := make([]int, len(s.agents)), make([]float32, len(s.agents))
	acts := make([][]float32, len(s.agents))
	rng := evalExploration(s.cfg.Seed)
	for left := len(live); left > 0; {
		for i, ag := range s.agents {
			a, err := ag.eval.act()
			if err != nil {
				return fmt.Errorf("agent %d: %w", i, err)
			}
			acts[i] = a
		}
		for w, world := range s.evalWorlds {
			if !live[w] {
				continue // its rows keep their last observations
			}
			for i := range s.agents {
				actions[i] = int(acts[i][w])
				if s.cfg.EvalEpsilon > 0 && rng.Float64() < s.cfg.EvalEpsilon {
					actions[i] = rng.IntN(s.spec.Outputs)
				}
			}
			term, trunc, err := world.Step(actions, s.evalObs[w], rewards)
			if err != nil {
				return fmt.Errorf("evaluation world %d: %w", w, err)
			}
			for i, r := range rewards {
				s.evalRet[i][w] += float64(r)
			}
			if term || trunc {
				live[w] = false
				left--
			}
		}
	}
	return nil
}

// Close frees what the actor allocated.
func (s *SharedActor) Close() error {
	var errs []error
	for _, ag := range s.agents {
		if ag.eval != nil {
			errs = append(errs, ag.eval.close())
			ag.eval = nil
		}
		if ag.pol != nil {
			errs = append(errs, ag.pol.close())
			ag.pol = nil
		}
		if !ag.wHost.IsZero() {
			errs = append(errs, s.dev.FreeHost(ag.wHost))
			ag.wHost = device.HostBuffer{}
		}
	}
	return errors.Join(errs...)
}

// savedWorlds is a shared actor's world file: the worlds between two
// vector steps and what goes on with them (the episode seeds, each
// agent's exploration generator and its returns so far), under the
// configuration's digest.
type savedWorlds struct {
	Config   string      `json:"config"` // Config.Digest
	Agents   int         `json:"agents"`
	EnvSteps int         `json:"env_steps"` // SharedActor.Steps when saved
	Worlds   [][]byte    `json:"worlds"`    // each world's MarshalBinary
	Length   []int       `json:"length"`
	Seeds    []byte      `json:"seeds"`   // the episode seeds' generator
	Explore  [][]byte    `json:"explore"` // each agent's exploration generator
	Returns  [][]float64 `json:"returns"` // [agent][world]
}

// SaveWorld writes the worlds to WorldFile, atomically: a reader, or an
// actor started after a kill, sees the last complete save.
func (s *SharedActor) SaveWorld() error {
	sv := savedWorlds{Config: s.cfg.Digest(), Agents: len(s.agents), EnvSteps: s.Steps(), Length: s.length}
	var err error
	for _, w := range s.worlds {
		b, err := w.(worldSaver).MarshalBinary()
		if err != nil {
			return err
		}
		sv.Worlds = append(sv.Worlds, b)
	}
	if sv.Seeds, err = s.seedSrc.MarshalBinary(); err != nil {
		return err
	}
	for _, ag := range s.agents {
		b, err := ag.src.MarshalBinary()
		if err != nil {
			return err
		}
		sv.Explore, sv.Returns = append(sv.Explore, b), append(sv.Returns, ag.ret)
	}
	raw, err := json.Marshal(sv)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.opts.WorldFile, raw, 0o644); err != nil {
		return fmt.Errorf("dqn: saving the shared world: %w", err)
	}
	return nil
}

// ErrWorldFile is what a world file that cannot be restored is refused
// with: damaged, or saved under another configuration.
var ErrWorldFile = errors.New("the shared world's saved state cannot be restored")

// CheckWorldFile checks, with no device, that the worlds saved at path
// would be restored by a shared actor of cfg: it refuses, with
// ErrWorldFile, whatever NewSharedActor would refuse, so that a run can
// refuse the file before any worker starts. No file at path is no
// refusal: the worlds start afresh.
func CheckWorldFile(path string, cfg Config) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	spec, err := cfg.Spec()
	if err != nil {
		return err
	}
	_, mk, err := cfg.World()
	if err != nil {
		return err
	}
	// The worlds and the agents' rows that restore fills, as build makes
	// them, and nothing else.
	n, o := cfg.NumEnvs, spec.Inputs
	s := &SharedActor{cfg: cfg, opts: SharedActorOptions{WorldFile: path}, length: make([]int, n), restored: -1}
	for range cfg.NumAgents {
		s.agents = append(s.agents, &sharedAgent{cur: make([]float32, n*o), ret: make([]float64, n)})
	}
	for w := range n {
		world := mk()
		if _, ok := world.(worldSaver); !ok {
			return fmt.Errorf("dqn: %s: %s cannot be saved, so a shared actor never restores it", path, world.Name())
		}
		cur := make([][]float32, cfg.NumAgents)
		for i, ag := range s.agents {
			cur[i] = ag.cur[w*o : (w+1)*o]
		}
		s.worlds, s.worldCur = append(s.worlds, world), append(s.worldCur, cur)
	}
	return s.restore()
}

// restore goes on from WorldFile when it exists.
func (s *SharedActor) restore() error {
	path := s.opts.WorldFile
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("dqn: %s: %w: %s; remove it to start the worlds afresh", path, ErrWorldFile, fmt.Sprintf(format, args...))
	}
	var sv savedWorlds
	if err := json.Unmarshal(raw, &sv); err != nil {
		return bad("%v", err)
	}
	switch n := len(s.worlds); {
	case sv.Config != s.cfg.Digest():
		return bad("it was saved under another configuration")
	case sv.Agents != len(s.agents) || len(sv.Explore) != len(s.agents) || len(sv.Returns) != len(s.agents):
		return bad("it holds %d agents, the run has %d", sv.Agents, len(s.agents))
	case len(sv.Worlds) != n || len(sv.Length) != n:
		return bad("it holds %d worlds, the run steps %d", len(sv.Worlds), n)
	}
	for i := range s.agents {
		if len(sv.Returns[i]) != len(s.worlds) {
			return bad("agent %d's returns are of %d worlds", i, len(sv.Returns[i]))
		}
	}
	// The generators are checked before anything changes; a world refused
	// after another was restored fails the actor all the same.
	seeds, explore := new(rand.PCG), make([]*rand.PCG, len(s.agents))
	if err := seeds.UnmarshalBinary(sv.Seeds); err != nil {
		return bad("the episode seeds: %v", err)
	}
	for i := range explore {
		explore[i] = new(rand.PCG)
		if err := explore[i].UnmarshalBinary(sv.Explore[i]); err != nil {
			return bad("agent %d's exploration: %v", i, err)
		}
	}
	for w, world := range s.worlds {
		if err := world.(worldSaver).UnmarshalBinary(sv.Worlds[w]); err != nil {
			return bad("world %d: %v", w, err)
		}
		world.(worldSaver).Observe(s.worldCur[w])
	}
	copy(s.length, sv.Length)
	s.seedSrc, s.seeds = seeds, rand.New(seeds)
	for i, ag := range s.agents {
		ag.src, ag.rng = explore[i], rand.New(explore[i])
		copy(ag.ret, sv.Returns[i])
	}
	s.restored = sv.EnvSteps
	return nil
}

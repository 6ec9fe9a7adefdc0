package dqn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// AgentResult is what one agent did.
type AgentResult struct {
	Agent        int
	Episodes     []EpisodeRecord
	EnvSteps     int
	LearnerSteps int
	Loss         float64 // the learner's last mean Huber loss
	Fallbacks    int     // learner steps run eagerly although graphs were on
	// EvalResults are the greedy evaluations, in order.
	EvalResults []EvalResult
	// Solved is the environment step at which the agent was solved: that
	// of the first greedy evaluation that reached the goal (Config.Goal;
	// the package's in-process test harness takes a goal of its own, and
	// with evaluation off SolvedTraining); -1 if never.
	Solved int
	// SolvedTraining is the environment step at which the mean return of
	// the last episodes of the goal (its Episodes, 100) training episodes
	// first reached its return, or -1.
	SolvedTraining int
	// Elapsed is the agent's time: its actor's and its learner's work
	// (in RunSequential, the sum of its rounds; the other agents' turns
	// are not counted).
	Elapsed time.Duration
}

// BestEval is the evaluation with the highest mean return (the first of
// equals), and false when there was none.
func (r AgentResult) BestEval() (EvalResult, bool) {
	var best EvalResult
	for i, e := range r.EvalResults {
		if i == 0 || e.MeanReturn > best.MeanReturn {
			best = e
		}
	}
	return best, len(r.EvalResults) > 0
}

// MeanReturn is the mean return of the last n episodes (all if fewer).
func (r AgentResult) MeanReturn(n int) float64 {
	eps := r.Episodes[max(0, len(r.Episodes)-n):]
	if len(eps) == 0 {
		return 0
	}
	var s float64
	for _, e := range eps {
		s += e.Return
	}
	return s / float64(len(eps))
}

// SequentialOptions are RunSequential's choices beyond Config.
type SequentialOptions struct {
	// Graphs captures the learners' training steps and the actors'
	// policies (and evaluators) and replays them, as the processes do
	// with --enable-graphs.
	Graphs bool
	// Dir, when set, receives at the end what a tolaria rl run directory
	// holds of each agent that finished: agent-<i>/checkpoint.tlck (the
	// learner's checkpoint) and agent-<i>/replay.buf (the agent's memory,
	// owned by the agent and Config.Digest), so that a run of processes
	// in lockstep can be compared with this one file by file.
	Dir    string
	Logger *slog.Logger
}

// Files RunSequential writes for each agent under SequentialOptions.Dir,
// named as a tolaria rl run names them.
const (
	SequentialAgentDir = "agent-%d"
	SavedBufferFile    = "replay.buf"
)

// RunSequential runs cfg's agents one after another in this process, on
// one goroutine, in the lockstep schedule (Config.Lockstep: each agent's
// round is LockstepCollect transitions collected with the actor's copy of
// the weights, LockstepTrain training steps, a publish and a sync), the
// agents taking their rounds in turn, until each has taken TotalSteps
// environment steps or, with StopWhenSolved, solved the task at a greedy
// evaluation. It runs the schedule whether or not cfg.Lockstep is set.
//
// Each agent has what its processes have: its memory (anonymous, the same
// layout), an Actor and a Learner over it, whose vector step, training
// step, publish and sync are the ones the actor and learner processes
// run; only the waiting differs: where an actor process waits for its
// learner's counter, RunSequential trains the learner itself. So its
// results equal, bit for bit, those of the same configuration run as
// processes with --lockstep: the weights, the optimizer's state, every
// episode's return and the replay buffer. (The learner's staging loader
// still samples on a goroutine of its own, only what the schedule lets
// it.)
//
// It returns each agent's result; an agent that fails ends with its
// error (joined with the others') while the others go on.
func RunSequential(ctx context.Context, dev device.Device, cfg Config, opts SequentialOptions) ([]AgentResult, error) {
	cfg.Lockstep = true
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec, err := cfg.Spec()
	if err != nil {
		return nil, err
	}
	shared := NewShared()
	defer shared.Pool.Close()
	results := make([]AgentResult, cfg.NumAgents)
	agents := make([]*seqAgent, cfg.NumAgents)
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.close()
			}
		}
	}()
	for i := range agents {
		if agents[i], err = newSeqAgent(ctx, dev, shared, cfg, cfg.Layout(spec), i, opts, &results[i]); err != nil {
			return nil, err
		}
	}
	var errs []error
	for live := len(agents); live > 0 && ctx.Err() == nil; {
		live = 0
		for _, a := range agents {
			if a.done {
				continue
			}
			if err := a.round(ctx); err != nil {
				a.done = true
				errs = append(errs, fmt.Errorf("dqn: agent %d: %w", a.agent, err))
			}
			if !a.done {
				live++
			}
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	for _, a := range agents {
		a.record()
	}
	return results, errors.Join(errs...)
}

// seqAgent is one agent of RunSequential.
type seqAgent struct {
	agent   int
	cfg     Config
	opts    SequentialOptions
	mem     *shm.Memory
	learner *Learner
	actor   *Actor
	res     *AgentResult
	// lctx is the learner's staging context, stopLearner its end.
	lctx        context.Context
	stopLearner func()
	done        bool
	elapsed     time.Duration
}

func newSeqAgent(ctx context.Context, dev device.Device, shared *Shared, cfg Config, layout shm.Layout, agent int, opts SequentialOptions, res *AgentResult) (*seqAgent, error) {
	mem, err := shm.CreateShared(fmt.Sprintf("tolaria-seq-%d-agent%d", os.Getpid(), agent), layout)
	if err != nil {
		return nil, err
	}
	a := &seqAgent{agent: agent, cfg: cfg, opts: opts, mem: mem, res: res}
	res.Agent, res.Solved, res.SolvedTraining = agent, -1, -1
	goal := cfg.Goal()
	last := returnWindow{n: goal.Episodes}
	onEpisode := func(e env.Episode, steps int) {
		res.Episodes = append(res.Episodes, EpisodeRecord{Return: e.Return, Length: e.Length, EnvSteps: steps})
		if goal.Episodes <= 0 {
			return
		}
		if mean, full := last.add(e.Return); full && mean >= goal.Return && res.SolvedTraining < 0 {
			res.SolvedTraining = steps
		}
	}
	onEval := func(r EvalResult) {
		res.EvalResults = append(res.EvalResults, r)
		if goal.Episodes > 0 && r.Episodes >= goal.Episodes && r.MeanReturn >= goal.Return && res.Solved < 0 {
			res.Solved = r.EnvSteps
		}
	}
	if a.learner, err = NewLearner(dev, shared, mem, cfg, agent, LearnerOptions{Graphs: opts.Graphs, Logger: opts.Logger}); err != nil {
		return nil, errors.Join(err, a.close())
	}
	if a.actor, err = NewActor(dev, shared, mem, cfg, agent, ActorOptions{Graphs: opts.Graphs, OnEpisode: onEpisode, OnEval: onEval}); err != nil {
		return nil, errors.Join(err, a.close())
	}
	// The captures come first, every agent's, while no device work of
	// the process is in flight (a capture is global).
	if err := errors.Join(a.learner.Capture(), a.actor.Capture()); err != nil {
		return nil, errors.Join(err, a.close())
	}
	return a, nil
}

// learn takes the learner's training steps up to due, the lockstep
// schedule's count for the buffer as it stands: what an actor process
// waits for its learner process to do.
func (a *seqAgent) learn(_ context.Context, due int) error {
	for a.learner.Steps() < due {
		ended, err := a.learner.next(a.lctx)
		if err != nil {
			return err
		}
		if ended {
			return fmt.Errorf("dqn: the learner's minibatches ended at step %d, before the %d the schedule calls for", a.learner.Steps(), due)
		}
	}
	return nil
}

// round takes the agent's next round: vector steps until the buffer has
// taken in LockstepCollect more transitions (each after the training the
// schedule calls for), or until the agent's work is done, which finish
// ends.
func (a *seqAgent) round(ctx context.Context) error {
	start := time.Now()
	defer func() { a.elapsed += time.Since(start) }()
	if a.stopLearner == nil {
		var err error
		if a.lctx, a.stopLearner, err = a.learner.start(ctx); err != nil {
			return err
		}
		// The actor's first read of the weights, as Run begins.
		if err := a.actor.Sync(ctx); err != nil {
			return err
		}
	}
	k := uint64(a.cfg.LockstepCollect)
	r0 := a.mem.Appended() / k
	solved := false
	for a.actor.steps < a.cfg.TotalSteps && !solved {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if solved, err = a.actor.lockstepStep(ctx, a.learn); err != nil {
			return lockstepStepError(a.actor.steps, err)
		}
		if a.mem.Appended()/k != r0 && a.actor.steps < a.cfg.TotalSteps && !solved {
			return nil
		}
	}
	return a.finish(ctx, solved)
}

// finish ends the agent as its processes end: the learner takes the last
// round's steps, the stop flag is set (by the actor after a solving
// evaluation, by the actor's worker once the steps are done), the
// learner publishes a last time, and Dir receives its checkpoint and the
// memory.
func (a *seqAgent) finish(ctx context.Context, solved bool) error {
	a.done = true
	if err := a.actor.lockstepEnd(ctx, a.learn, solved); err != nil {
		return err
	}
	a.mem.Stop()
	a.stopLearner()
	if err := a.learner.publish(); err != nil {
		return err
	}
	if a.opts.Dir == "" {
		return nil
	}
	dir := filepath.Join(a.opts.Dir, fmt.Sprintf(SequentialAgentDir, a.agent))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := a.learner.Save(dir, a.agent); err != nil {
		return err
	}
	return a.mem.Save(filepath.Join(dir, SavedBufferFile), shm.Owner{Agent: a.agent, Config: a.cfg.Digest()})
}

// record fills the agent's result from its halves.
func (a *seqAgent) record() {
	a.res.EnvSteps, a.res.LearnerSteps = a.actor.Steps(), a.learner.Steps()
	a.res.Loss, a.res.Fallbacks, a.res.Elapsed = a.learner.Loss(), a.learner.Fallbacks(), a.elapsed
}

func (a *seqAgent) close() error {
	var errs []error
	if a.stopLearner != nil {
		a.stopLearner()
	}
	if a.actor != nil {
		errs = append(errs, a.actor.Close())
	}
	if a.learner != nil {
		errs = append(errs, a.learner.Close())
	}
	if a.mem != nil {
		errs = append(errs, a.mem.Close())
	}
	a.actor, a.learner, a.mem = nil, nil, nil
	return errors.Join(errs...)
}

// returnWindow is the mean return of the last n episodes, as a goal of n
// episodes measures it.
type returnWindow struct {
	n      int
	window []float64
	sum    float64
}

// add takes one episode's return and gives the mean of the last n, and
// whether n have been played.
func (w *returnWindow) add(ret float64) (mean float64, full bool) {
	w.window = append(w.window, ret)
	w.sum += ret
	if len(w.window) > w.n {
		w.sum -= w.window[0]
		w.window = w.window[1:]
	}
	return w.sum / float64(len(w.window)), len(w.window) == w.n
}

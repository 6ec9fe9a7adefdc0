package dqn

// The package's tests train agents in one process (RunInProcess): a
// learner and an actor per agent on their own goroutines, meeting only in
// the memory file as the worker processes do. A real run starts them as
// processes (jobserver's rl learner and actor); this harness ships in no
// binary.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// RunOptions are the in-process run's choices beyond Config.
type RunOptions struct {
	// Dir is where the agents' memory files go; when empty the memory is
	// anonymous (shm.CreateShared), so nothing outlives the process.
	Dir    string
	Graphs bool // capture and replay the learner's step and the actor's policy
	// MaxLead bounds how far an actor runs ahead of its learner, in
	// training steps (see ActorOptions.MaxLead); 0: no bound.
	MaxLead int
	// SolvedEpisodes, when positive, stops an agent once it is solved
	// (SolvedReturn may be negative, as Acrobot-v1's -100 is): with
	// evaluation on (Config.EvalInterval), once the mean return of a
	// greedy evaluation reaches SolvedReturn (its EvalEpisodes consecutive
	// episodes must be at least SolvedEpisodes); with evaluation off, once
	// the mean return of its last SolvedEpisodes training episodes
	// (epsilon-greedy, as played) does. The training-episode measure is recorded either
	// way (AgentResult.SolvedTraining).
	SolvedReturn   float64
	SolvedEpisodes int
	Logger         *slog.Logger
}

// RunInProcess trains cfg.NumAgents agents in this process: for each, a
// memory file, a learner and an actor, each on its own goroutine, meeting
// only in the memory file, as the actor and learner processes will. The
// captures happen first, one after another, before anything runs.
func RunInProcess(ctx context.Context, dev device.Device, cfg Config, opts RunOptions) ([]AgentResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.SolvedEpisodes > 0 && cfg.EvalInterval > 0 && cfg.EvalEpisodes < opts.SolvedEpisodes {
		return nil, fmt.Errorf("dqn: an evaluation of eval_episodes %d episodes cannot show a mean over SolvedEpisodes %d consecutive episodes: raise eval_episodes or lower SolvedEpisodes",
			cfg.EvalEpisodes, opts.SolvedEpisodes)
	}
	spec, err := cfg.Spec()
	if err != nil {
		return nil, err
	}
	shared := NewShared()
	defer shared.Pool.Close()
	results := make([]AgentResult, cfg.NumAgents)
	agents := make([]*inProcessAgent, cfg.NumAgents)
	var errs []error
	defer func() {
		for _, a := range agents {
			if a != nil {
				a.close()
			}
		}
	}()
	for i := range agents {
		path := ""
		if opts.Dir != "" {
			path = filepath.Join(opts.Dir, fmt.Sprintf("tolaria-%d-agent%d", os.Getpid(), i))
		}
		a, err := newInProcessAgent(dev, shared, path, cfg, cfg.Layout(spec), i, opts, &results[i])
		if err != nil {
			return nil, err
		}
		agents[i] = a
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, a := range agents {
		wg.Go(func() {
			if err := a.run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

type inProcessAgent struct {
	agent   int
	mem     *shm.Memory
	named   bool // mem is a file of its own, removed at close
	learner *Learner
	actor   *Actor
	res     *AgentResult
}

func newInProcessAgent(dev device.Device, shared *Shared, path string, cfg Config, layout shm.Layout, agent int, opts RunOptions, res *AgentResult) (*inProcessAgent, error) {
	var mem *shm.Memory
	var err error
	if path == "" {
		mem, err = shm.CreateShared(fmt.Sprintf("tolaria-%d-agent%d", os.Getpid(), agent), layout)
	} else {
		mem, err = shm.Create(path, layout)
	}
	if err != nil {
		return nil, err
	}
	a := &inProcessAgent{agent: agent, mem: mem, named: path != "", res: res}
	res.Agent, res.Solved, res.SolvedTraining = agent, -1, -1
	evaluated := cfg.EvalInterval > 0
	solved := func(steps int) {
		if res.Solved < 0 {
			res.Solved = steps
			mem.Stop()
		}
	}
	last := returnWindow{n: opts.SolvedEpisodes}
	onEpisode := func(e env.Episode, steps int) {
		res.Episodes = append(res.Episodes, EpisodeRecord{Return: e.Return, Length: e.Length, EnvSteps: steps})
		if opts.SolvedEpisodes <= 0 {
			return
		}
		if mean, full := last.add(e.Return); full && mean >= opts.SolvedReturn && res.SolvedTraining < 0 {
			res.SolvedTraining = steps
			if !evaluated {
				solved(steps)
			}
		}
	}
	onEval := func(r EvalResult) {
		res.EvalResults = append(res.EvalResults, r)
		if opts.SolvedEpisodes > 0 && r.MeanReturn >= opts.SolvedReturn {
			solved(r.EnvSteps)
		}
	}
	if a.learner, err = NewLearner(dev, shared, mem, cfg, agent, LearnerOptions{Graphs: opts.Graphs, Logger: opts.Logger}); err != nil {
		return nil, errors.Join(err, a.close())
	}
	if a.actor, err = NewActor(dev, shared, mem, cfg, agent, ActorOptions{Graphs: opts.Graphs, MaxLead: opts.MaxLead, OnEpisode: onEpisode, OnEval: onEval}); err != nil {
		return nil, errors.Join(err, a.close())
	}
	if err := errors.Join(a.learner.Capture(), a.actor.Capture()); err != nil {
		return nil, errors.Join(err, a.close())
	}
	return a, nil
}

func (a *inProcessAgent) run(ctx context.Context) error {
	start := time.Now()
	var wg sync.WaitGroup
	var learnErr, actErr error
	wg.Go(func() { learnErr = a.learner.Run(ctx) })
	wg.Go(func() {
		actErr = a.actor.Run(ctx)
		a.mem.Stop()
	})
	wg.Wait()
	a.res.EnvSteps, a.res.LearnerSteps = a.actor.Steps(), a.learner.Steps()
	a.res.Loss, a.res.Fallbacks, a.res.Elapsed = a.learner.Loss(), a.learner.Fallbacks(), time.Since(start)
	if err := errors.Join(learnErr, actErr); err != nil {
		return fmt.Errorf("dqn: agent %d: %w", a.agent, err)
	}
	return nil
}

func (a *inProcessAgent) close() error {
	var errs []error
	if a.actor != nil {
		errs = append(errs, a.actor.Close())
	}
	if a.learner != nil {
		errs = append(errs, a.learner.Close())
	}
	if a.mem != nil {
		errs = append(errs, a.mem.Close())
		if a.named {
			errs = append(errs, shm.Remove(a.mem.Path()))
		}
	}
	a.actor, a.learner, a.mem = nil, nil, nil
	return errors.Join(errs...)
}

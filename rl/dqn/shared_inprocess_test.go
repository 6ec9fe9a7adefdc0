package dqn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// runSharedInProcess trains cfg.NumAgents agents that act in one world
// through one SharedActor, each with its own learner on its own
// goroutine and its own anonymous memory, as the worker processes of
// tolaria rl --actor shared do. worldFile, when set, is the actor's
// world file.
func runSharedInProcess(ctx context.Context, dev device.Device, cfg Config, opts RunOptions, worldFile string) ([]AgentResult, error) {
	spec, err := cfg.Spec()
	if err != nil {
		return nil, err
	}
	shared := NewShared()
	defer shared.Pool.Close()
	n := cfg.NumAgents
	mems := make([]*shm.Memory, n)
	learners := make([]*Learner, n)
	var actor *SharedActor
	defer func() {
		if actor != nil {
			_ = actor.Close()
		}
		for i := range n {
			if learners[i] != nil {
				_ = learners[i].Close()
			}
			if mems[i] != nil {
				_ = mems[i].Close()
			}
		}
	}()
	results := make([]AgentResult, n)
	for i := range n {
		results[i] = AgentResult{Agent: i, Solved: -1, SolvedTraining: -1}
		if mems[i], err = shm.CreateShared(fmt.Sprintf("tolaria-%d-shared-agent%d", os.Getpid(), i), cfg.Layout(spec)); err != nil {
			return nil, err
		}
		if learners[i], err = NewLearner(dev, shared, mems[i], cfg, i, LearnerOptions{Graphs: opts.Graphs, Logger: opts.Logger}); err != nil {
			return nil, err
		}
	}
	actor, err = NewSharedActor(dev, shared, mems, cfg, SharedActorOptions{Graphs: opts.Graphs, MaxLead: opts.MaxLead, WorldFile: worldFile,
		OnEpisode: func(i int, e env.Episode, steps int) {
			results[i].Episodes = append(results[i].Episodes, EpisodeRecord{Return: e.Return, Length: e.Length, EnvSteps: steps})
		},
		OnEval: func(i int, r EvalResult) { results[i].EvalResults = append(results[i].EvalResults, r) },
	})
	if err != nil {
		return nil, err
	}
	for _, l := range learners {
		if err := l.Capture(); err != nil {
			return nil, err
		}
	}
	if err := actor.Capture(); err != nil {
		return nil, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for i, l := range learners {
		wg.Go(func() { errs[i] = l.Run(ctx) })
	}
	errs[n] = actor.Run(ctx)
	for _, m := range mems {
		m.Stop()
	}
	wg.Wait()
	for i, l := range learners {
		r := &results[i]
		r.EnvSteps, r.LearnerSteps, r.Loss, r.Fallbacks, r.Elapsed = actor.AgentSteps(i), l.Steps(), l.Loss(), l.Fallbacks(), time.Since(start)
	}
	return results, errors.Join(errs...)
}

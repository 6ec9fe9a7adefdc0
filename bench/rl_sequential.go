package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tolaria-ml/tolaria/rl/dqn"
)

// SequentialRunner measures the sequential loop (dqn.RunSequential: every
// agent's actor and learner stepped in turn on one goroutine of this
// process, in the lockstep schedule) on devices from open. RunSequential
// reports nothing until it returns, so the training window is taken by
// difference (RLWindowDifference): the run less a run of the same agents
// that stops once their buffers hold LearningStarts transitions, the
// latter first.
func SequentialRunner(open Opener) RLRunner {
	return func(ctx context.Context, cfg dqn.Config, graphs bool) (RLWindow, error) {
		fill := cfg
		fill.TotalSteps = cfg.LearningStarts
		short, err := runSequential(ctx, open, fill, graphs)
		if err != nil {
			return RLWindow{}, fmt.Errorf("the run to learning_starts: %w", err)
		}
		whole, err := runSequential(ctx, open, cfg, graphs)
		if err != nil {
			return RLWindow{}, err
		}
		w := RLWindow{EnvSteps: whole.env - short.env, LearnerSteps: whole.learner - short.learner,
			WindowSeconds: (whole.wall - short.wall).Seconds(), Window: RLWindowDifference, WallSeconds: whole.wall.Seconds()}
		if w.WindowSeconds <= 0 || w.EnvSteps <= 0 || w.LearnerSteps <= 0 {
			return w, fmt.Errorf("%w: the whole run took %v and %d environment and %d learner steps, the run to learning_starts %v and %d and %d",
				ErrRLNoWindow, whole.wall, whole.env, whole.learner, short.wall, short.env, short.learner)
		}
		return w, nil
	}
}

// seqRun is one RunSequential: every agent's steps together, and its wall
// time, the device's opening included.
type seqRun struct {
	env, learner int
	wall         time.Duration
}

func runSequential(ctx context.Context, open Opener, cfg dqn.Config, graphs bool) (seqRun, error) {
	start := time.Now()
	dev, err := open()
	if err != nil {
		return seqRun{}, err
	}
	res, err := dqn.RunSequential(ctx, dev, cfg, dqn.SequentialOptions{Graphs: graphs})
	wall := time.Since(start)
	if err := errors.Join(err, dev.Close()); err != nil {
		return seqRun{}, err
	}
	r := seqRun{wall: wall}
	for _, a := range res {
		if a.Fallbacks > 0 {
			return r, fmt.Errorf("agent %d: %d learner steps ran eagerly although graphs were on", a.Agent, a.Fallbacks)
		}
		r.env += a.EnvSteps
		r.learner += a.LearnerSteps
	}
	return r, nil
}

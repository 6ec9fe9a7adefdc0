package dqn

// The lockstep schedule (Config.Lockstep). The actor and the learner of an
// agent take turns: the actor collects LockstepCollect transitions, the
// learner takes LockstepTrain training steps on the buffer as it then
// stands and publishes its weights, the actor reads them and collects the
// next LockstepCollect, and so on. Each side waits on the other's counter
// in the agent's memory (the buffer's transition count, written by the
// actor, and the learner's published step count), so every minibatch is
// drawn from the same buffer contents and every transition is chosen with
// the same weights however the processes are scheduled: a run in lockstep
// is repeatable, and the same as RunSequential's loop in one process.
//
// In numbers, with K = LockstepCollect, M = LockstepTrain, L =
// LearningStarts and F the buffer's first transition (0 but for an agent
// resumed without its buffer): training step s (from 0) waits for
// max(K*(ceil(L/K) + s/M), F+L) transitions (lockstepNeed), and once A
// transitions are appended, A >= F+L, the actor waits for the learner to
// have taken M*(A/K - ceil(L/K) + 1) steps (lockstepDue) before it
// appends more: exactly the steps whose need A meets. So the learner
// never samples a buffer the actor is still writing, and the actor never
// acts with weights the learner has not finished.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tolaria-ml/tolaria/internal/field"
)

// The lockstep schedule's defaults: ten transitions, then ten training
// steps, as train_every 1, publish_interval 10 and sync_interval 10 do
// on average in the free-running mode.
const (
	DefaultLockstepCollect = 10
	DefaultLockstepTrain   = 10
	// MaxLockstepRound bounds lockstep_collect and lockstep_train.
	MaxLockstepRound = 1000000
)

// checkLockstep reports a bad lockstep schedule; it has none to check
// when Lockstep is off. (The shared actor, which takes no turns, is
// refused with lockstep by checkActor.)
func (c Config) checkLockstep() error {
	if !c.Lockstep {
		return nil
	}
	switch {
	case c.LockstepCollect < 1 || c.LockstepCollect > MaxLockstepRound:
		return field.Errorf("lockstep_collect", "must be 1..%d transitions per round, got %d", MaxLockstepRound, c.LockstepCollect)
	case c.LockstepCollect%c.NumEnvs != 0:
		return field.Errorf("lockstep_collect", "must be a multiple of %s (%d): a vector step appends one transition per environment; got %d",
			field.Name("num_envs"), c.NumEnvs, c.LockstepCollect)
	case c.LockstepTrain < 1 || c.LockstepTrain > MaxLockstepRound:
		return field.Errorf("lockstep_train", "must be 1..%d training steps per round, got %d", MaxLockstepRound, c.LockstepTrain)
	}
	return nil
}

// lockstepFirstRound is the number of rounds of collection after which
// the learner takes its first steps: ceil(LearningStarts / K).
func (c Config) lockstepFirstRound() int {
	return (c.LearningStarts + c.LockstepCollect - 1) / c.LockstepCollect
}

// lockstepNeed is the transitions appended (counted from 0, as
// Memory.Appended counts them) before training step s (from 0) samples
// the buffer; first is the buffer's first transition (Memory.First).
func (c Config) lockstepNeed(s int, first uint64) uint64 {
	need := uint64(c.LockstepCollect * (c.lockstepFirstRound() + s/c.LockstepTrain))
	return max(need, first+uint64(c.LearningStarts))
}

// lockstepDue is the training steps the learner must have taken before
// the actor appends to a buffer of appended transitions: every step whose
// lockstepNeed appended meets.
func (c Config) lockstepDue(appended, first uint64) int {
	if appended < first+uint64(c.LearningStarts) {
		return 0
	}
	rounds := int(appended)/c.LockstepCollect - c.lockstepFirstRound() + 1
	return max(rounds, 0) * c.LockstepTrain
}

// backoff paces a side of the handshake that waits for the other: it
// sleeps 20µs, then twice as long each time up to a millisecond, so a
// short wait ends soon and a long one (the other side's whole round)
// costs a thousand wake-ups a second, not a spinning core.
type backoff struct{ d time.Duration }

const (
	backoffMin = 20 * time.Microsecond
	backoffMax = time.Millisecond
)

func (b *backoff) wait() {
	b.d = min(max(2*b.d, backoffMin), backoffMax)
	time.Sleep(b.d)
}

// awaitLearner waits until the learner has published at least due
// training steps (lockstepDue), or the stop flag is set, or ctx ends.
func (a *Actor) awaitLearner(ctx context.Context, due int) error {
	var b backoff
	for int(a.mem.LearnerSteps()) < due {
		if a.mem.Stopped() || ctx.Err() != nil {
			a.waiting.Store(false)
			return errors.Join(errStopped, ctx.Err())
		}
		a.waiting.Store(true)
		b.wait()
	}
	a.waiting.Store(false)
	return nil
}

// lockstepStep is one vector step of the lockstep schedule: learn brings
// the learner to the training steps the buffer calls for (awaitLearner
// in an actor process, the learner itself in RunSequential), the actor
// reads the weights if they are newer, steps and, when due, evaluates.
// It reports whether that evaluation solved the task (Config.Goal).
func (a *Actor) lockstepStep(ctx context.Context, learn func(context.Context, int) error) (solved bool, err error) {
	if err := learn(ctx, a.cfg.lockstepDue(a.mem.Appended(), a.mem.First())); err != nil {
		return false, err
	}
	if err := a.Sync(ctx); err != nil {
		return false, err
	}
	if err := a.Step(); err != nil {
		return false, err
	}
	a.solved = false
	if err := a.evaluate(); err != nil {
		return false, err
	}
	return a.solved, nil
}

// lockstepEnd lets the learner take the last round's training steps;
// after a solving evaluation with StopWhenSolved it then sets the stop
// flag, which ends the learner at that same step in every run.
func (a *Actor) lockstepEnd(ctx context.Context, learn func(context.Context, int) error, solved bool) error {
	if err := learn(ctx, a.cfg.lockstepDue(a.mem.Appended(), a.mem.First())); err != nil {
		return err
	}
	if solved && a.cfg.StopWhenSolved {
		a.mem.Stop()
	}
	return nil
}

// runLockstep is Run in lockstep: one vector step at a time, each after
// the learner has trained on what came before it, until TotalSteps, a
// solving evaluation (with StopWhenSolved), the stop flag or ctx; then
// it waits for the learner's last round.
func (a *Actor) runLockstep(ctx context.Context) error {
	if err := a.Sync(ctx); err != nil {
		return ignoreStop(err)
	}
	solved := false
	for a.steps < a.cfg.TotalSteps && !solved && !a.mem.Stopped() && ctx.Err() == nil {
		var err error
		if solved, err = a.lockstepStep(ctx, a.awaitLearner); err != nil {
			if errors.Is(err, errStopped) {
				return ignoreStop(err)
			}
			return lockstepStepError(a.steps, err)
		}
	}
	if err := a.lockstepEnd(ctx, a.awaitLearner, solved); err != nil {
		return ignoreStop(err)
	}
	return ctx.Err()
}

func lockstepStepError(steps int, err error) error {
	return fmt.Errorf("dqn: actor step %d (lockstep): %w", steps, err)
}

// lockstepOnEval is the actor's OnEval in lockstep: it notes whether the
// evaluation solved the task, then tells next (when set).
func (a *Actor) lockstepOnEval(next func(EvalResult)) func(EvalResult) {
	goal := a.cfg.Goal()
	return func(r EvalResult) {
		a.solved = goal.Episodes > 0 && r.Episodes >= goal.Episodes && r.MeanReturn >= goal.Return
		if next != nil {
			next(r)
		}
	}
}

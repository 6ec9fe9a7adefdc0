package dqn

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/tolaria-ml/tolaria/trainer"
)

// The learner's checkpoint is a tolaria checkpoint file (trainer's format
// v2, every byte covered by its SHA-256): the online network's parameters,
// then the optimizer's state and, last, the target network, with the
// learner's step count. The replay buffer is saved beside it by whoever
// owns the agent's memory file (see the coordinator).

// checkpointHeader is what a learner of cfg for agent writes and expects.
func checkpointHeader(cfg Config, agent int) (trainer.Checkpoint, error) {
	spec, err := cfg.Spec()
	if err != nil {
		return trainer.Checkpoint{}, err
	}
	return trainer.Checkpoint{Model: spec.String(), Optimizer: fmt.Sprintf("%s lr=%g", cfg.Optimizer.Kind, cfg.Optimizer.LR),
		BatchSize: cfg.BatchSize, Seed: cfg.AgentSeed(agent), Dataset: "rl:" + cfg.Env.String(), Params: spec.ParamCount()}, nil
}

// Save writes the learner's checkpoint into dir (trainer.CheckpointFile),
// atomically. Call it once Run has returned. It never replaces a
// checkpoint of a later step (the learner was started from an earlier
// point than the checkpoint there), nor one it cannot read, and never
// writes non-finite values.
func (l *Learner) Save(dir string, agent int) error {
	ck, err := checkpointHeader(l.cfg, agent)
	if err != nil {
		return err
	}
	if err := l.compute.Synchronize(); err != nil {
		return fmt.Errorf("dqn: learner checkpoint: %w", err)
	}
	path := filepath.Join(dir, trainer.CheckpointFile)
	if _, err := os.Stat(path); err == nil {
		old, err := trainer.LoadCheckpoint(path)
		if err != nil {
			return fmt.Errorf("dqn: learner checkpoint: the checkpoint there cannot be read, so it is kept, not replaced: %w", err)
		}
		if old.Step > l.Steps() {
			return fmt.Errorf("dqn: learner checkpoint: %s holds step %d, later than this learner's %d: kept, not replaced", path, old.Step, l.Steps())
		}
	}
	params, state, err := l.model.Snapshot()
	if err != nil {
		return fmt.Errorf("dqn: learner checkpoint: %w", err)
	}
	target := make([]float32, l.target.Len())
	if err := l.dev.Download(target, l.target); err != nil {
		return fmt.Errorf("dqn: learner checkpoint: %w", err)
	}
	state = append(state, target)
	if err := finite(params, state); err != nil {
		return fmt.Errorf("dqn: learner checkpoint of step %d: %w; the last checkpoint is kept", l.Steps(), err)
	}
	ck.Step, ck.States = l.Steps(), len(state)
	return trainer.SaveCheckpoint(dir, ck, params, state)
}

// finite reports NaN or infinite values among a checkpoint's parameters
// and state (the optimizer's, then the target network).
func finite(params []float32, state [][]float32) error {
	if n := nonFinite(params); n > 0 {
		return fmt.Errorf("%w: %d of %d parameters are NaN or infinite", ErrNotFinite, n, len(params))
	}
	for i, s := range state {
		if n := nonFinite(s); n > 0 {
			return fmt.Errorf("%w: %d of %d values of state buffer %d are NaN or infinite", ErrNotFinite, n, len(s), i)
		}
	}
	return nil
}

// CheckCheckpoint reads the learner checkpoint at path and checks it is
// one that agent's learner of cfg can resume from: its digest, the
// configuration it was written under, the number of its state buffers and
// every value finite. It returns the checkpoint's header; a refusal wraps
// trainer.ErrCheckpoint and names what differs.
func CheckCheckpoint(path string, cfg Config, agent int) (trainer.Checkpoint, error) {
	ck, err := trainer.LoadCheckpoint(path)
	if err != nil {
		return ck, err
	}
	want, err := checkpointHeader(cfg, agent)
	if err != nil {
		return ck, err
	}
	got := ck
	if got.Model != want.Model || got.Optimizer != want.Optimizer || got.BatchSize != want.BatchSize ||
		got.Seed != want.Seed || got.Dataset != want.Dataset || got.Params != want.Params {
		return ck, fmt.Errorf("%w: %s: written by a learner of model %s, %s, batch %d, seed %d, %s; this run's learner is %s, %s, batch %d, seed %d, %s: resume with the configuration the run started with",
			trainer.ErrCheckpoint, path, got.Model, got.Optimizer, got.BatchSize, got.Seed, got.Dataset,
			want.Model, want.Optimizer, want.BatchSize, want.Seed, want.Dataset)
	}
	states := cfg.Optimizer.StateBuffers()
	if len(ck.State()) != states+1 {
		return ck, fmt.Errorf("%w: %s holds %d state buffers, a learner with %s keeps %d and the target network",
			trainer.ErrCheckpoint, path, len(ck.State()), cfg.Optimizer.Kind, states)
	}
	if err := finite(ck.Parameters(), ck.State()); err != nil {
		return ck, fmt.Errorf("%w: %s (step %d): %w", trainer.ErrCheckpoint, path, ck.Step, err)
	}
	return ck, nil
}

// Restore loads a checkpoint Save wrote, for agent, before Run: the
// networks, the optimizer's state and the step count, from which the
// learner's replay ratio, learning-rate schedule and minibatch draws
// continue. A checkpoint CheckCheckpoint refuses is refused.
func (l *Learner) Restore(path string, agent int) error {
	ck, err := CheckCheckpoint(path, l.cfg, agent)
	if err != nil {
		return err
	}
	state := ck.State()
	if err := l.model.Restore(ck.Parameters(), state[:len(state)-1]); err != nil {
		return err
	}
	if err := l.dev.Upload(l.target, state[len(state)-1]); err != nil {
		return err
	}
	l.steps.Store(int64(ck.Step))
	l.src.base = ck.Step
	return nil
}

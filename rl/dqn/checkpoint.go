package dqn

import (
	"fmt"

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
		BatchSize: cfg.BatchSize, Seed: cfg.AgentSeed(agent), Dataset: "rl:" + cfg.Env, Params: spec.ParamCount()}, nil
}

// Save writes the learner's checkpoint into dir (trainer.CheckpointFile),
// atomically. Call it once Run has returned.
func (l *Learner) Save(dir string, agent int) error {
	ck, err := checkpointHeader(l.cfg, agent)
	if err != nil {
		return err
	}
	if err := l.compute.Synchronize(); err != nil {
		return fmt.Errorf("dqn: learner checkpoint: %w", err)
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
	ck.Step, ck.States = l.Steps(), len(state)
	return trainer.SaveCheckpoint(dir, ck, params, state)
}

// Restore loads a checkpoint Save wrote, for agent, before Run: the
// networks, the optimizer's state and the step count, from which the
// learner's replay ratio, learning-rate schedule and minibatch draws
// continue. A checkpoint of another configuration is refused, naming what
// differs.
func (l *Learner) Restore(path string, agent int) error {
	ck, err := trainer.LoadCheckpoint(path)
	if err != nil {
		return err
	}
	want, err := checkpointHeader(l.cfg, agent)
	if err != nil {
		return err
	}
	got := ck
	got.Step, got.States, got.Totals, got.TrainStats = 0, 0, nil, nil
	if got.Model != want.Model || got.Optimizer != want.Optimizer || got.BatchSize != want.BatchSize ||
		got.Seed != want.Seed || got.Dataset != want.Dataset || got.Params != want.Params {
		return fmt.Errorf("%w: %s: written by a learner of model %s, %s, batch %d, seed %d, %s; this run's learner is %s, %s, batch %d, seed %d, %s: resume with the configuration the run started with",
			trainer.ErrCheckpoint, path, got.Model, got.Optimizer, got.BatchSize, got.Seed, got.Dataset,
			want.Model, want.Optimizer, want.BatchSize, want.Seed, want.Dataset)
	}
	state := ck.State()
	if len(state) != len(l.model.State)+1 {
		return fmt.Errorf("%w: %s holds %d state buffers, a learner with %s keeps %d and the target network",
			trainer.ErrCheckpoint, path, len(state), l.cfg.Optimizer.Kind, len(l.model.State))
	}
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

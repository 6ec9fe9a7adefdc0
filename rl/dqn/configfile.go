package dqn

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/env"
)

// configKey is one key of the configuration file and the field of a
// Config it sets.
type configKey struct {
	name field.Name
	dst  any // a pointer into the Config
}

// keys are c's configuration keys, each with its field. model: and
// optimizer: are the sections of a training job's file (job.Keys), with
// the same keys: optimizer: {kind, lr, momentum, weight_decay, clip_norm,
// warmup_steps} means what it means to tolaria train, and the learner
// reads the rest of nn.Optimizer's settings there too.
func (c *Config) keys() []configKey {
	o := &c.Optimizer
	return []configKey{
		{"env", &c.Env}, {"num_agents", &c.NumAgents}, {"num_envs", &c.NumEnvs}, {"actor", &c.Actor}, {"seed", &c.Seed},
		{"model.hidden", &c.Hidden}, {"model.activation", &c.Activation},
		{"optimizer.kind", &o.Kind}, {"optimizer.lr", &o.LR}, {"optimizer.momentum", &o.Momentum}, {"optimizer.nesterov", &o.Nesterov},
		{"optimizer.beta1", &o.Beta1}, {"optimizer.beta2", &o.Beta2}, {"optimizer.eps", &o.Eps},
		{"optimizer.weight_decay", &o.WeightDecay}, {"optimizer.clip_norm", &o.ClipNorm},
		{"optimizer.warmup_steps", &o.WarmupSteps}, {"optimizer.total_steps", &o.TotalSteps}, {"optimizer.min_lr_ratio", &o.MinLRRatio},
		{"gamma", &c.Gamma}, {"huber_delta", &c.HuberDelta}, {"batch_size", &c.BatchSize}, {"buffer_capacity", &c.BufferCapacity},
		{"learning_starts", &c.LearningStarts}, {"train_every", &c.TrainEvery}, {"target_update", &c.TargetUpdate},
		{"target_tau", &c.TargetTau}, {"publish_interval", &c.PublishInterval}, {"sync_interval", &c.SyncInterval},
		{"epsilon_start", &c.EpsilonStart}, {"epsilon_end", &c.EpsilonEnd}, {"epsilon_decay_steps", &c.EpsilonDecaySteps},
		{"total_steps", &c.TotalSteps}, {"eval_interval", &c.EvalInterval}, {"eval_episodes", &c.EvalEpisodes}, {"eval_epsilon", &c.EvalEpsilon},
		{"stop_when_solved", &c.StopWhenSolved},
		{"lockstep", &c.Lockstep}, {"lockstep_collect", &c.LockstepCollect}, {"lockstep_train", &c.LockstepTrain},
	}
}

// Keys are the configuration file's keys, each a path of sections
// (optimizer.lr), in the order YAML writes them.
func Keys() []field.Name {
	var c Config
	var names []field.Name
	for _, k := range c.keys() {
		names = append(names, k.name)
	}
	return names
}

// ConfigCommand is the command that reads an rl configuration file, as
// a refusal of another command's file names it (field.Schema.Command).
const ConfigCommand = "tolaria rl --config"

// ParseConfig reads a configuration file (YAML, the keys of Config's
// field errors: num_agents, sync_interval, publish_interval,
// target_update, the epsilon schedule, model: {hidden, activation},
// optimizer: {kind, lr, ...}) over DefaultConfig and validates it. It
// reads the file as tolaria train reads its own (field.Schema): sections
// nested or written whole (optimizer.lr: 0.001), an unknown key refused
// by its path, and a refusal naming the key as written.
func ParseConfig(raw []byte) (Config, error) {
	c := DefaultConfig()
	settings, err := field.Schema{Keys: Keys(), Command: ConfigCommand}.Read(raw)
	switch {
	case errors.Is(err, field.ErrOtherCommand):
		return c, err
	case errors.Is(err, field.ErrUnknownKey):
		return c, fmt.Errorf("the configuration cannot be read: %w (the keys are listed in docs/rl.md)", err)
	case err != nil:
		return c, fmt.Errorf("the configuration %w", err)
	}
	keys := c.keys()
	for _, s := range settings {
		i := slices.IndexFunc(keys, func(k configKey) bool { return k.name == s.Key })
		if err := set(keys[i].dst, s.Value); err != nil {
			if field.Is(err, "env") || field.Is(err, "env.name") {
				return c, err // it names the key already
			}
			return c, field.Errorf(s.Written, "%w", err)
		}
	}
	if c.Actor == c.defaultActor() {
		// The environment's own mode reads as no choice at all: the
		// configuration is the one that leaves actor: out.
		c.Actor = ""
	}
	return c, c.Validate()
}

// set reads a file's value into one of Config's fields.
func set(dst, v any) error {
	if spec, ok := dst.(*env.Spec); ok {
		s, err := env.ParseSpec(v)
		*spec = s
		return err
	}
	if act, ok := dst.(*device.Activation); ok {
		name, isText := v.(string)
		if !isText {
			return fmt.Errorf("want an activation's name: relu, gelu, tanh or none")
		}
		a, err := nn.ParseActivation(name)
		if err != nil {
			return err
		}
		*act = a
		return nil
	}
	return field.Assign(dst, v)
}

// YAML is the configuration as a file ParseConfig reads back to c.
func (c Config) YAML() []byte {
	var b strings.Builder
	o := c.Optimizer
	hidden := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(c.Hidden)), ", "), "[]")
	fmt.Fprintf(&b, "env: %s\nnum_agents: %d\nnum_envs: %d\n", c.Env.String(), c.NumAgents, c.NumEnvs)
	if c.Actor != "" && c.Actor != c.defaultActor() {
		// Only when it is not the environment's default: a configuration
		// of before the key keeps the digest it had, and one that names
		// its default has the digest of one that leaves it out.
		fmt.Fprintf(&b, "actor: %s\n", c.Actor)
	}
	fmt.Fprintf(&b, "seed: %d\n", c.Seed)
	fmt.Fprintf(&b, "model: {hidden: [%s], activation: %s}\n", hidden, c.Activation)
	fmt.Fprintf(&b, "optimizer: {kind: %s, lr: %g, momentum: %g, nesterov: %t, beta1: %g, beta2: %g, eps: %g, weight_decay: %g, clip_norm: %g, warmup_steps: %d, total_steps: %d, min_lr_ratio: %g}\n",
		o.Kind, o.LR, o.Momentum, o.Nesterov, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.ClipNorm, o.WarmupSteps, o.TotalSteps, o.MinLRRatio)
	fmt.Fprintf(&b, "gamma: %g\nhuber_delta: %g\nbatch_size: %d\nbuffer_capacity: %d\nlearning_starts: %d\ntrain_every: %d\n",
		c.Gamma, c.HuberDelta, c.BatchSize, c.BufferCapacity, c.LearningStarts, c.TrainEvery)
	fmt.Fprintf(&b, "target_update: %d\ntarget_tau: %g\npublish_interval: %d\nsync_interval: %d\n", c.TargetUpdate, c.TargetTau, c.PublishInterval, c.SyncInterval)
	fmt.Fprintf(&b, "epsilon_start: %g\nepsilon_end: %g\nepsilon_decay_steps: %d\ntotal_steps: %d\n", c.EpsilonStart, c.EpsilonEnd, c.EpsilonDecaySteps, c.TotalSteps)
	fmt.Fprintf(&b, "eval_interval: %d\neval_episodes: %d\n", c.EvalInterval, c.EvalEpisodes)
	if c.EvalEpsilon != 0 {
		// Only then: a configuration of before the key keeps its digest.
		fmt.Fprintf(&b, "eval_epsilon: %g\n", c.EvalEpsilon)
	}
	fmt.Fprintf(&b, "stop_when_solved: %t\n", c.StopWhenSolved)
	if c.Lockstep || c.LockstepCollect != DefaultLockstepCollect || c.LockstepTrain != DefaultLockstepTrain {
		// Only then: a free-running configuration of before these keys
		// keeps its digest.
		fmt.Fprintf(&b, "lockstep: %t\nlockstep_collect: %d\nlockstep_train: %d\n", c.Lockstep, c.LockstepCollect, c.LockstepTrain)
	}
	return []byte(b.String())
}

// Digest is a SHA-256 of the configuration (of its YAML), in hex: what a
// saved replay buffer and a resumed run are checked against.
func (c Config) Digest() string {
	sum := sha256.Sum256(c.YAML())
	return hex.EncodeToString(sum[:])
}

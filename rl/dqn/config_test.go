package dqn

import (
	"errors"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/rl/env"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	cases := []struct {
		key    field.Name
		change func(*Config)
	}{
		{"env.name", func(c *Config) { c.Env = env.Spec{Name: "Pong"} }},
		{"actor", func(c *Config) { c.Env, c.Actor = env.Spec{Name: env.ForageName}, ActorPerAgent }},
		{"actor", func(c *Config) { c.Actor = ActorShared }},
		{"actor", func(c *Config) { c.Actor = "both" }},
		{"lockstep", func(c *Config) { c.Env, c.Lockstep = env.Spec{Name: env.ForageName}, true }},
		{"num_agents", func(c *Config) { c.Env = env.Spec{Name: env.ForageName, Params: map[string]any{"agents": 3}} }},
		{"env.max_steps", func(c *Config) { c.Env = env.Spec{Name: env.AcrobotName, Params: map[string]any{"max_steps": 0}} }},
		{"num_agents", func(c *Config) { c.NumAgents = 0 }},
		{"num_envs", func(c *Config) { c.NumEnvs = 0 }},
		{"model.hidden", func(c *Config) { c.Hidden = nil }},
		{"gamma", func(c *Config) { c.Gamma = 1.5 }},
		{"huber_delta", func(c *Config) { c.HuberDelta = 0 }},
		{"batch_size", func(c *Config) { c.BatchSize = 0 }},
		{"buffer_capacity", func(c *Config) { c.BufferCapacity = c.BatchSize - 1 }},
		{"learning_starts", func(c *Config) { c.LearningStarts = c.BatchSize - 1 }},
		{"train_every", func(c *Config) { c.TrainEvery = 0 }},
		{"target_update", func(c *Config) { c.TargetUpdate = 0 }},
		{"target_tau", func(c *Config) { c.TargetTau = 2 }},
		{"publish_interval", func(c *Config) { c.PublishInterval = 0 }},
		{"sync_interval", func(c *Config) { c.SyncInterval = 0 }},
		{"epsilon_start", func(c *Config) { c.EpsilonStart = -0.1 }},
		{"epsilon_end", func(c *Config) { c.EpsilonEnd = 1.1 }},
		{"epsilon_decay_steps", func(c *Config) { c.EpsilonDecaySteps = -1 }},
		{"total_steps", func(c *Config) { c.TotalSteps = c.LearningStarts - 1 }},
		{"optimizer.lr", func(c *Config) { c.Optimizer.LR = 0 }},
		{"eval_interval", func(c *Config) { c.EvalInterval = -1 }},
		{"eval_episodes", func(c *Config) { c.EvalInterval, c.EvalEpisodes = 1000, 0 }},
		{"eval_episodes", func(c *Config) { c.EvalInterval, c.EvalEpisodes = 1000, 4097 }},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.change(&c)
		var fe *field.Error
		if err := c.Validate(); !errors.As(err, &fe) || fe.Field != tc.key {
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.key, err, tc.key)
		}
	}
	off := DefaultConfig()
	off.EvalInterval, off.EvalEpisodes = 0, 0
	if err := off.Validate(); err != nil {
		t.Errorf("evaluation off ignores eval_episodes: Validate() = %v", err)
	}
}

func TestEpsilon(t *testing.T) {
	c := DefaultConfig()
	c.EpsilonStart, c.EpsilonEnd, c.EpsilonDecaySteps = 1, 0.1, 100
	for _, tc := range []struct {
		step int
		want float64
	}{{0, 1}, {50, 0.55}, {100, 0.1}, {1000, 0.1}} {
		if got := c.Epsilon(tc.step); got < tc.want-1e-12 || got > tc.want+1e-12 {
			t.Errorf("Epsilon(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	c.EpsilonDecaySteps = 0
	if c.Epsilon(0) != 0.1 {
		t.Errorf("no decay: Epsilon(0) = %v, want the end value", c.Epsilon(0))
	}
}

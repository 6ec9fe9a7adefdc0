package dqn

import (
	"reflect"
	"strings"
	"testing"
)

// TestConfigFileRoundTrip: a configuration written by YAML reads back to
// itself, keys given override the defaults, and an unknown or bad key is
// refused by name.
func TestConfigFileRoundTrip(t *testing.T) {
	c := DefaultConfig()
	c.NumAgents, c.Hidden, c.Optimizer.LR, c.TargetUpdate, c.Seed = 3, []int{32, 16}, 2.5e-4, 1000, 7
	c.EvalInterval, c.EvalEpisodes, c.StopWhenSolved = 2000, 30, false
	back, err := ParseConfig(c.YAML())
	if err != nil {
		t.Fatalf("%v\n%s", err, c.YAML())
	}
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("read back %+v, wrote %+v", back, c)
	}
	got, err := ParseConfig([]byte("num_agents: 2\nsync_interval: 4\noptimizer: {lr: 0.001}\n"))
	if err != nil || got.NumAgents != 2 || got.SyncInterval != 4 || got.Optimizer.LR != 0.001 || got.BatchSize != DefaultConfig().BatchSize {
		t.Fatalf("overrides: %+v, %v", got, err)
	}
	for _, tc := range []struct{ file, want string }{
		{"num_agent: 2\n", "num_agent"},
		{"target_update: 0\n", "target_update"},
		{"model: {activation: swish}\n", "model.activation"},
		{"epsilon_end: 2\n", "epsilon_end"},
		{"eval_episodes: 0\n", "eval_episodes"},
	} {
		if _, err := ParseConfig([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.file, err, tc.want)
		}
	}
}

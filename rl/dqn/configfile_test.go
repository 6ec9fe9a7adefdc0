package dqn

import (
	"os"
	"path/filepath"
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
		{"num_agent: 2\n", `unknown key "num_agent"`},
		{"model: {hiden: [8]}\n", `unknown key "hiden"`},
		{"env: Pendulum-v1\n", `env: unknown environment "Pendulum-v1"`},
		{"gamma: [\n", "not valid YAML"},
		{"target_update: 0\n", "target_update"},
		{"model: {activation: swish}\n", "model.activation"},
		{"epsilon_end: 2\n", "epsilon_end"},
		{"eval_episodes: 0\n", "eval_episodes"},
		{"seed: 1.5\n", "seed: must be a whole number, got 1.5"},
		{"batch_size: 32.7\n", "batch_size: must be a whole number"},
		{"model: {hidden: [16, 8.5]}\n", "model.hidden: must be a whole number, got 8.5"},
		{"optimizer: {warmup_steps: 1.25}\n", "optimizer.warmup_steps: must be a whole number"},
	} {
		_, err := ParseConfig([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "type ") {
			t.Errorf("%q: %v, want an error naming %s (and no Go type)", tc.file, err, tc.want)
		}
	}
}

// TestDocumentedConfigIsTheDefault: the configuration docs/rl.md lists as
// the defaults reads back to DefaultConfig, key for key.
func TestDocumentedConfigIsTheDefault(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "rl.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "### The configuration")
	if !ok {
		t.Fatal(`docs/rl.md has no "### The configuration" section`)
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no yaml block in docs/rl.md's configuration section")
	}
	got, err := ParseConfig([]byte(block))
	if err != nil {
		t.Fatalf("docs/rl.md's configuration: %v", err)
	}
	if want := DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Fatalf("docs/rl.md's configuration reads as\n%s\nthe defaults are\n%s", got.YAML(), want.YAML())
	}
}

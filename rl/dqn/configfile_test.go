package dqn

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/env"
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
		{"num_agent: 2\n", "unknown key num_agent"},
		{"lr: 0.1\n", "unknown key lr (did you mean optimizer.lr?)"},
		{"model: {hiden: [8]}\n", "unknown key model.hiden (model holds hidden, activation)"},
		{"env: Pendulum-v1\n", `env.name: unknown environment "Pendulum-v1"`},
		{"gamma: [\n", "not valid YAML"},
		{"target_update: 0\n", "target_update"},
		{"model: {activation: swish}\n", "model.activation"},
		{"epsilon_end: 2\n", "epsilon_end"},
		{"eval_episodes: 0\n", "eval_episodes"},
		{"seed: 1.5\n", "seed: must be a whole number, got 1.5"},
		{"batch_size: 32.7\n", "batch_size: must be a whole number, got 32.7"},
		{"model: {hidden: [16, 8.5]}\n", "model.hidden: must be a whole number, got 8.5"},
		{"optimizer: {warmup_steps: 1.25}\n", "optimizer.warmup_steps: must be a whole number, got 1.25"},
		{"optimizer: {lr: 50}\n", "optimizer.lr: must be in (0, 10], got 50"},
		{"optimizer.lr: 50\n", "optimizer.lr: must be in (0, 10], got 50"},
		{"optimizer: {kind: lion}\n", "optimizer.kind: unknown kind"},
		{"optimizer: adamw\n", "optimizer: must be a mapping"},
		{"model: {activation: 3}\n", "model.activation"},
	} {
		_, err := ParseConfig([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "type ") {
			t.Errorf("%q: %v, want an error naming %s (and no Go type)", tc.file, err, tc.want)
		}
	}
}

// TestConfigSharesTrainsSections: model: and optimizer: are the sections
// of tolaria train's file, with the same keys, nested or written whole.
func TestConfigSharesTrainsSections(t *testing.T) {
	got, err := ParseConfig([]byte("seed: 4\nmodel: {hidden: [32], activation: tanh}\noptimizer: {kind: sgd, lr: 0.01, momentum: 0.8, weight_decay: 0.001, clip_norm: 2, warmup_steps: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := got.Optimizer
	if got.Seed != 4 || !reflect.DeepEqual(got.Hidden, []int{32}) || got.Activation != device.ActTanh ||
		o.Kind != nn.SGD || o.LR != 0.01 || o.Momentum != 0.8 || o.WeightDecay != 0.001 || o.ClipNorm != 2 || o.WarmupSteps != 5 {
		t.Errorf("read %+v", got)
	}
	whole, err := ParseConfig([]byte("optimizer.lr: 0.01\nmodel.hidden: [32]\n"))
	if err != nil || whole.Optimizer.LR != 0.01 || !reflect.DeepEqual(whole.Hidden, []int{32}) {
		t.Errorf("keys written whole: %+v, %v", whole, err)
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

// TestEnvKey: env: takes a name or a mapping of the name and the task's
// parameters; the network's shapes follow the environment; YAML writes
// the spec back as it reads it; a bad name or parameter is refused naming
// env.name or env.max_steps with what is known.
func TestEnvKey(t *testing.T) {
	for _, tc := range []struct {
		file            string
		want            env.Spec
		inputs, outputs int
		goal            env.Goal
	}{
		{"env: Acrobot-v1\n", env.Spec{Name: env.AcrobotName}, 6, 3, env.Goal{Return: -100, Episodes: 100}},
		{"env: {name: MountainCar-v0, max_steps: 50}\n", env.Spec{Name: env.MountainCarName, Params: map[string]any{"max_steps": 50}}, 2, 3, env.Goal{Return: -110, Episodes: 100}},
		{"env:\n  name: CartPole-v1\n", env.Spec{Name: env.CartPoleName}, 4, 2, env.Goal{Return: 475, Episodes: 100}},
	} {
		c, err := ParseConfig([]byte(tc.file))
		if err != nil {
			t.Fatalf("%q: %v", tc.file, err)
		}
		spec, err := c.Spec()
		if err != nil || !reflect.DeepEqual(c.Env, tc.want) || spec.Inputs != tc.inputs || spec.Outputs != tc.outputs || c.Goal() != tc.goal {
			t.Errorf("%q: env %+v, network %s (%v), goal %+v", tc.file, c.Env, spec, err, c.Goal())
		}
		back, err := ParseConfig(c.YAML())
		if err != nil || back.Env.String() != c.Env.String() || back.Digest() != c.Digest() {
			t.Errorf("%q: written as %q, read back as %+v (%v)", tc.file, c.Env.String(), back.Env, err)
		}
		// A worker gets the configuration as JSON, where 50 is a float64:
		// it builds the same environment under the same digest.
		var job Config
		raw, err := json.Marshal(c)
		must(t, err)
		must(t, json.Unmarshal(raw, &job))
		if spec, err := job.Spec(); err != nil || job.Digest() != c.Digest() || spec.Inputs != tc.inputs {
			t.Errorf("%q through JSON: env %+v, digest changed %v, %v", tc.file, job.Env, job.Digest() != c.Digest(), err)
		}
	}
	// A run of the default CartPole-v1, its env written as a name, keeps
	// the digest it had before env: took a mapping, so it still resumes;
	// another environment, or the same with other parameters, is another
	// configuration.
	def := DefaultConfig()
	if got, want := def.Digest(), "98d26f3e8330a611752578cacdd586f2dfbbc5e1603be8f15c13dc0fbfc64265"; got != want {
		t.Errorf("the default configuration's digest is %s, was %s: earlier runs would not resume", got, want)
	}
	if !strings.HasPrefix(string(def.YAML()), "env: CartPole-v1\n") {
		t.Errorf("the default env is written as %q", strings.SplitN(string(def.YAML()), "\n", 2)[0])
	}
	seen := map[string]string{def.Digest(): "default"}
	for _, file := range []string{"env: Acrobot-v1\n", "env: {name: Acrobot-v1, max_steps: 300}\n", "env: {name: CartPole-v1, max_steps: 200}\n"} {
		c, err := ParseConfig([]byte(file))
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := seen[c.Digest()]; ok {
			t.Errorf("%q has the digest of %s", file, other)
		}
		seen[c.Digest()] = file
	}
	for _, tc := range []struct{ file, key, want string }{
		{"env: Pong-v5\n", "env.name", "known are CartPole-v1, Acrobot-v1, MountainCar-v0, Forage"},
		{"env: {max_steps: 300}\n", "env.name", "is missing"},
		{"env: {name: 3}\n", "env.name", "must be an environment's name"},
		{"env: [Acrobot-v1]\n", "env", "a mapping of its name and parameters"},
		{"env: {name: Acrobot-v1, max_steps: 0}\n", "env.max_steps", "1..1000000"},
		{"env: {name: Acrobot-v1, max_steps: 2.5}\n", "env.max_steps", "whole number"},
		{"env: {name: MountainCar-v0, gravity: 3}\n", "env.gravity", "takes no such parameter; it takes max_steps"},
		{"env: {name: Forage, agents: 1}\nactor: per-agent\n", "actor", "one world that all the agents act in together: set actor to shared"},
		{"env: CartPole-v1\nactor: shared\n", "actor", "an environment of one agent: set actor to per-agent"},
		{"env: {name: Forage, agents: 3}\nnum_agents: 2\n", "num_agents", "env.agents puts 3 agents in the Forage world"},
	} {
		_, err := ParseConfig([]byte(tc.file))
		if err == nil || !field.Is(err, field.Name(tc.key)) || !strings.HasPrefix(err.Error(), tc.key+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s that says %q", tc.file, err, tc.key, tc.want)
		}
	}
}

// TestAcrobotExample: examples/acrobot.yaml, the setting docs/rl.md
// measures on Acrobot-v1, reads and validates as that setting.
func TestAcrobotExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "acrobot.yaml"))
	must(t, err)
	c, err := ParseConfig(raw)
	must(t, err)
	if c.Env.String() != env.AcrobotName || c.Goal() != (env.Goal{Return: -100, Episodes: 100}) || c.Optimizer.LR != 2.5e-4 ||
		c.TargetUpdate != 1 || c.TargetTau != 0.005 || c.BufferCapacity != 100000 || c.EpsilonEnd != 0.05 || c.TotalSteps != 150000 {
		t.Errorf("examples/acrobot.yaml reads as\n%s", c.YAML())
	}
}

package trainer_test

import (
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestConfigValidate breaks one field of a valid configuration at a time,
// on each side of its bounds: every break is refused with the field named,
// and the bounds themselves are accepted.
func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*trainer.Config)
		want   string // "" when the configuration is valid
	}{
		{"valid", func(*trainer.Config) {}, ""},
		{"bounds accepted", func(c *trainer.Config) {
			c.Epochs, c.Slots, c.Loaders, c.WarmupBatches, c.LogEvery, c.World, c.Rank = 10000, 64, 64, 0, 1, 2, 1
		}, ""},
		{"slots at the minimum", func(c *trainer.Config) { c.Slots = 2 }, ""},
		{"one loader, batch of one", func(c *trainer.Config) { c.Loaders, c.BatchSize = 1, 1 }, ""},
		{"largest batch", func(c *trainer.Config) { c.BatchSize = 65536 }, ""},
		{"longest warm-up", func(c *trainer.Config) { c.Epochs, c.WarmupBatches = 100, 1000 }, ""},
		{"invalid model", func(c *trainer.Config) { c.Spec.Inputs = 0 }, "inputs must be positive"},
		{"invalid optimizer", func(c *trainer.Config) { c.Optimizer.LR = -1 }, "lr: must be in (0, 10]"},
		{"no epochs", func(c *trainer.Config) { c.Epochs = 0 }, "epochs: must be in 1..10000"},
		{"too many epochs", func(c *trainer.Config) { c.Epochs = 10001 }, "epochs: must be in 1..10000"},
		{"no batch", func(c *trainer.Config) { c.BatchSize = 0 }, "batch_size: must be in 1..65536"},
		{"batch too large", func(c *trainer.Config) { c.BatchSize = 65537 }, "batch_size: must be in 1..65536"},
		{"negative warm-up", func(c *trainer.Config) { c.WarmupBatches = -1 }, "warmup_batches: must be in 0..1000"},
		{"warm-up too long", func(c *trainer.Config) { c.WarmupBatches = 1001 }, "warmup_batches: must be in 0..1000"},
		{"one slot", func(c *trainer.Config) { c.Slots = 1 }, "staging.slots: must be in 2..64"},
		{"too many slots", func(c *trainer.Config) { c.Slots = 65 }, "staging.slots: must be in 2..64"},
		{"no loader", func(c *trainer.Config) { c.Loaders = 0 }, "loaders: must be in 1..64"},
		{"too many loaders", func(c *trainer.Config) { c.Loaders = 65 }, "loaders: must be in 1..64"},
		{"log_every 0", func(c *trainer.Config) { c.LogEvery = 0 }, "log_every: must be at least 1"},
		{"world 0", func(c *trainer.Config) { c.World = 0 }, "world: must be at least 1, got 0"},
		{"negative rank", func(c *trainer.Config) { c.Rank = -1 }, "rank: must be in 0..0"},
		{"rank = world", func(c *trainer.Config) { c.World, c.Rank = 2, 2 }, "rank: must be in 0..1"},
		{"no training set", func(c *trainer.Config) { c.Train = nil }, "train and test datasets are required"},
		{"no test set", func(c *trainer.Config) { c.Test = nil }, "train and test datasets are required"},
		{"resume without a run directory", func(c *trainer.Config) { c.Resume = true }, "resume: needs run_dir pointing at the run"},
		{"negative max_steps", func(c *trainer.Config) { c.MaxSteps = -1 }, "max_steps: must be >= 0"},
		{"unknown ragged policy", func(c *trainer.Config) { c.Ragged = "trim" }, "unknown ragged-batch policy"},
		{"features differ from the model's inputs", func(c *trainer.Config) { c.Spec.Inputs = 15 }, "has 16 features but the model takes 15 inputs"},
		{"classes differ from the model's outputs", func(c *trainer.Config) { c.Spec.Outputs = 5 }, "has 4 classes but the model has 5 outputs"},
		{"warm-up covers the run", func(c *trainer.Config) { c.Epochs, c.WarmupBatches = 1, 16 }, "covers the whole run (16 steps)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := smallConfig(t)
			c.change(&cfg)
			err := cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate() = %v; want nil", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Validate() = %v; want an error saying %q", err, c.want)
			}
		})
	}
}

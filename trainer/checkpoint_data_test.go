package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestResumeRefusesChangedData: a checkpoint holds its training set's
// fingerprint, so a resume on data that changed since (one value, the size
// the same) is refused before anything is written, and the same data
// resumes.
func TestResumeRefusesChangedData(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 3
	run(t, cfg)
	cfg.MaxSteps, cfg.Resume = 0, true

	changed := *cfg.Train.(*data.Dataset)
	changed.X = slices.Clone(changed.X)
	changed.X[17] += 0.5
	bad := cfg
	bad.Train = &changed
	_, err := trainer.Run(context.Background(), openCPU(t), newShared(t), bad)
	if !errors.Is(err, trainer.ErrCheckpoint) || !strings.Contains(err.Error(), "the data changed since") {
		t.Fatalf("resume on changed data: %v; want a refusal saying the data changed", err)
	}
	if _, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg); err != nil {
		t.Fatalf("resume on the same data: %v", err)
	}
}

// TestResumeWithOtherEpochsNamesThem: a resume with another epoch count
// is refused naming the epochs, not the optimizer's schedule that follows
// from them.
func TestResumeWithOtherEpochsNamesThem(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 3
	run(t, cfg)
	cfg.MaxSteps, cfg.Resume = 0, true
	cfg.Epochs++
	steps, _ := trainer.StepsPerEpoch(cfg)
	cfg.Optimizer.TotalSteps = cfg.Epochs * steps
	_, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if !errors.Is(err, trainer.ErrCheckpoint) || !field.Is(err, "schedule.epochs") || !strings.Contains(err.Error(), "written with epochs 3 but this run has 4") {
		t.Fatalf("resume with 4 epochs: %v; want a refusal naming the epochs", err)
	}
}

// TestResumeNamesTheSettingTheScheduleFollowsFrom: the optimizer's
// total_steps (and the warm-up clamped to half of it) follow from the
// batch size, the training set's size and the shard, so a resume that
// changes one of them is refused naming that setting by its key, not
// the two derived numbers; the same settings resume.
func TestResumeNamesTheSettingTheScheduleFollowsFrom(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 3
	run(t, cfg)
	cfg.MaxSteps, cfg.Resume = 0, true
	bigger, _ := synthetic(t, 500, 70)
	for _, c := range []struct {
		name   string
		change func(*trainer.Config)
		key    field.Name
		want   string
	}{
		{"batch size", func(c *trainer.Config) { c.BatchSize = 8 }, "schedule.batch_size", "written with batch size 16 but this run has 8"},
		{"training set", func(c *trainer.Config) { c.Train = bigger }, "data.synthetic_size", "written with a training set of 250 examples but this run has 500 examples"},
		{"world", func(c *trainer.Config) { c.World = 2 }, "data.world", "written with shard (rank/world) 0/1 but this run has 0/2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			changed := cfg
			c.change(&changed)
			// As a command derives the schedule: from the steps per epoch,
			// the warm-up clamped to half of it.
			steps, err := trainer.StepsPerEpoch(changed)
			if err != nil {
				t.Fatal(err)
			}
			changed.Optimizer.TotalSteps = changed.Epochs * steps
			changed.Optimizer.WarmupSteps = min(200, changed.Optimizer.TotalSteps/2)
			_, err = trainer.Run(context.Background(), openCPU(t), newShared(t), changed)
			if !errors.Is(err, trainer.ErrCheckpoint) || !field.Is(err, c.key) {
				t.Fatalf("resume with another %s: %v; want a checkpoint refusal about %s", c.name, err, c.key)
			}
			msg := err.Error()
			for _, want := range []string{c.want, "total_steps (epochs × steps per epoch) follows from it", "start a new run in another --run-dir"} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q\nlacks %q", msg, want)
				}
			}
			if strings.Contains(msg, "lr_warmup_steps") {
				t.Errorf("refusal %q names the derived warm-up rather than the setting", msg)
			}
		})
	}
	if _, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg); err != nil {
		t.Fatalf("resume with the same settings: %v", err)
	}
}

// TestCheckpointEveryResumesBitwise: with CheckpointEvery a run also
// checkpoints inside its epochs; a run resumed from one of those (as after
// a kill between them) ends with the parameters of a run never stopped,
// the token model with graphs and dropout included.
func TestCheckpointEveryResumesBitwise(t *testing.T) {
	for name, cfg := range map[string]trainer.Config{"mlp": smallConfig(t), "transformer": tokenConfig(t)} {
		t.Run(name, func(t *testing.T) {
			whole := run(t, cfg)
			steps, _ := trainer.StepsPerEpoch(cfg)
			every := steps/3 + 1
			cfg.RunDir, cfg.CheckpointEvery = t.TempDir(), every
			// Keep the last checkpoint inside an epoch, as a kill soon after
			// it would leave it: inside the last epoch, so the summary's
			// training loss covers steps from before it.
			var kept []byte
			var saved []int
			keptStep := 0
			cfg.Observer = trainer.ObserverFunc(func(m trainer.Measurement) {
				if e, ok := m.(trainer.Event); ok && e.Kind == trainer.EventCheckpoint {
					step := e.Fields["step"].(int)
					saved = append(saved, step)
					if step%steps != 0 {
						b, err := os.ReadFile(filepath.Join(cfg.RunDir, trainer.CheckpointFile))
						if err != nil {
							t.Error(err)
						}
						kept, keptStep = b, step
					}
				}
			})
			if sum := run(t, cfg); sum.ParamsSHA256 != whole.ParamsSHA256 {
				t.Fatalf("checkpointing every %d steps changed the run: %s, %s without", every, sum.ParamsSHA256, whole.ParamsSHA256)
			}
			if !slices.Contains(saved, every) || !slices.Contains(saved, 2*every) || !slices.Contains(saved, steps) {
				t.Fatalf("checkpoints after steps %v; want %d, %d and the epoch's end %d among them", saved, every, 2*every, steps)
			}
			if kept == nil || keptStep < (cfg.Epochs-1)*steps {
				t.Fatalf("no checkpoint inside the last epoch (%v)", saved)
			}
			cfg.RunDir, cfg.Observer, cfg.Resume = t.TempDir(), nil, true
			if err := os.WriteFile(filepath.Join(cfg.RunDir, trainer.CheckpointFile), kept, 0o644); err != nil {
				t.Fatal(err)
			}
			if rest := run(t, cfg); rest.ParamsSHA256 != whole.ParamsSHA256 || rest.TestLoss != whole.TestLoss || rest.TrainLoss != whole.TrainLoss {
				t.Fatalf("resumed from step %d: %s (test loss %v, train loss %v); never stopped: %s (%v, %v)",
					keptStep, rest.ParamsSHA256, rest.TestLoss, rest.TrainLoss, whole.ParamsSHA256, whole.TestLoss, whole.TrainLoss)
			}
		})
	}
}

package trainer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
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
	if !errors.Is(err, trainer.ErrCheckpoint) || !strings.Contains(err.Error(), "written for epochs 3 but this run has 4") {
		t.Fatalf("resume with 4 epochs: %v; want a refusal naming the epochs", err)
	}
}

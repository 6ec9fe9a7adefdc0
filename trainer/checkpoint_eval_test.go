package trainer_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// An evaluation loads a checkpoint for its model alone: trained on other
// data, with another optimizer or schedule, it is accepted (resuming it is
// not); of another model, or damaged, it is refused.
func TestCheckpointForEval(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 10
	run(t, cfg)
	path := filepath.Join(cfg.RunDir, trainer.CheckpointFile)

	other := cfg
	other.Train, other.Test = synthetic(t, 300, 50)
	other.Optimizer.LR *= 2
	other.Epochs, other.Seed = 5, 9
	if _, err := trainer.CheckpointFor(other, path); !errors.Is(err, trainer.ErrCheckpoint) {
		t.Fatalf("CheckpointFor with other data and settings: %v, want a refusal", err)
	}
	ck, err := trainer.CheckpointForEval(other, path)
	if err != nil || ck.Step != 10 || len(ck.Parameters()) == 0 {
		t.Fatalf("CheckpointForEval with other data and settings: step %d, %v", ck.Step, err)
	}

	wider := cfg
	wider.Spec.Hidden = []int{32, 8}
	_, err = trainer.CheckpointForEval(wider, path)
	if !errors.Is(err, trainer.ErrCheckpoint) || !strings.Contains(err.Error(), "it was written for model 16-32-16-4 gelu cross_entropy, not 16-32-8-4 gelu cross_entropy") {
		t.Fatalf("another model: %v", err)
	}
	if _, err := trainer.CheckpointForEval(cfg, filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing checkpoint accepted")
	}
}

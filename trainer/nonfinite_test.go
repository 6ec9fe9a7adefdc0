package trainer_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// poisonedResume trains cfg for one good epoch, which checkpoints, and
// returns cfg set to resume on training data that is all poison, with the
// checkpoint's path and bytes.
func poisonedResume(t *testing.T, cfg trainer.Config, poison float32) (trainer.Config, string, []byte) {
	t.Helper()
	cfg.RunDir = t.TempDir()
	steps, _ := trainer.StepsPerEpoch(cfg)
	cfg.MaxSteps = steps // one good epoch, then a checkpoint
	run(t, cfg)
	path := filepath.Join(cfg.RunDir, trainer.CheckpointFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	train := *cfg.Train
	train.X = make([]float32, len(cfg.Train.X))
	for i := range train.X {
		train.X[i] = poison
	}
	cfg.Train, cfg.MaxSteps, cfg.Resume = &train, 0, true
	return cfg, path, good
}

func TestNonFiniteLossStopsAndKeepsTheLastCheckpoint(t *testing.T) {
	// The next epoch's data is poisoned: the loss becomes NaN.
	cfg, path, good := poisonedResume(t, smallConfig(t), float32(math.NaN()))
	_, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if !errors.Is(err, trainer.ErrNonFinite) {
		t.Fatalf("run on poisoned data: %v, want ErrNonFinite", err)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(good) {
		t.Fatal("the last good checkpoint was replaced after the loss became NaN")
	}
}

// TestInterruptedDivergedRunKeepsTheLastCheckpoint: a run whose loss has
// become NaN since the last metric read, and that is stopped (here by
// MaxSteps, as by a signal) before the next read, returns ErrNonFinite and
// leaves the last good checkpoint as it was instead of saving NaNs.
func TestInterruptedDivergedRunKeepsTheLastCheckpoint(t *testing.T) {
	for _, graphsOn := range []bool{false, true} {
		base := smallConfig(t)
		base.EnableGraphs = graphsOn
		cfg, path, good := poisonedResume(t, base, float32(math.Inf(1)))
		// No metric read before the stop: only the stop can notice.
		cfg.LogEvery, cfg.MaxSteps = 1000, 3 // steps of this run
		_, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
		if !errors.Is(err, trainer.ErrNonFinite) {
			t.Fatalf("graphs %v: a diverged run stopped mid-epoch: %v, want ErrNonFinite", graphsOn, err)
		}
		if after, _ := os.ReadFile(path); string(after) != string(good) {
			t.Fatalf("graphs %v: the last good checkpoint was replaced by a diverged model", graphsOn)
		}
	}
}

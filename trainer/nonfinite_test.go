package trainer_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/trainer"
)

// poisonedResume trains cfg for one good step, which checkpoints, and
// returns cfg set to resume on the same training data, poison in every
// example that step did not see, with the checkpoint's path and bytes.
func poisonedResume(t *testing.T, cfg trainer.Config, poison float32) (trainer.Config, string, []byte) {
	t.Helper()
	cfg.RunDir = t.TempDir()
	// The same data in both runs (a resume refuses data that changed):
	// poisoned everywhere but the first batch of the first epoch, which
	// the first run trains on alone before it stops with a checkpoint.
	train := *cfg.Train.(*data.Dataset)
	train.X = slices.Clone(train.X)
	first := map[int]bool{}
	for _, i := range data.Order(train.Len(), cfg.Seed, 0, true)[:cfg.BatchSize] {
		first[i] = true
	}
	for i := range train.Len() {
		if !first[i] {
			for j := range train.Features {
				train.X[i*train.Features+j] = poison
			}
		}
	}
	cfg.Train, cfg.MaxSteps = &train, 1
	run(t, cfg)
	path := filepath.Join(cfg.RunDir, trainer.CheckpointFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxSteps, cfg.Resume = 0, true
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

// TestNonFiniteTestLossStops: a model whose training loss stays finite
// while its test loss does not (its outputs overflow on the test set, as
// SGD at lr 10 without clipping can bring about; here the test set is
// poisoned) has diverged: the run stops with ErrNonFinite after the epoch,
// graphs on or off alike, instead of failing to write the checkpoint
// header that would carry the non-finite loss ("json: unsupported value").
func TestNonFiniteTestLossStops(t *testing.T) {
	for _, graphsOn := range []bool{false, true} {
		for _, poison := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			cfg := smallConfig(t)
			cfg.EnableGraphs, cfg.RunDir = graphsOn, t.TempDir()
			test := *cfg.Test.(*data.Dataset)
			test.X = make([]float32, len(test.X))
			for i := range test.X {
				test.X[i] = poison
			}
			cfg.Test = &test
			_, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
			if !errors.Is(err, trainer.ErrNonFinite) || !strings.Contains(err.Error(), "test loss is not finite after epoch 1") {
				t.Fatalf("graphs %v, test set of %v: %v; want ErrNonFinite for the test loss after epoch 1", graphsOn, poison, err)
			}
			if _, err := os.Stat(filepath.Join(cfg.RunDir, trainer.CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("graphs %v: a diverged model was checkpointed (%v)", graphsOn, err)
			}
		}
	}
}

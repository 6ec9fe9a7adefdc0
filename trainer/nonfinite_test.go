package trainer_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestInterruptedDivergedRunKeepsTheLastCheckpoint: a run whose loss has
// become NaN since the last metric read, and that is stopped (here by
// MaxSteps, as by a signal) before the next read, returns ErrNonFinite and
// leaves the last good checkpoint as it was instead of saving NaNs.
func TestInterruptedDivergedRunKeepsTheLastCheckpoint(t *testing.T) {
	for _, graphsOn := range []bool{false, true} {
		cfg := smallConfig(t)
		cfg.EnableGraphs = graphsOn
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
		train.X = append([]float32(nil), cfg.Train.X...)
		for i := range train.X {
			train.X[i] = float32(math.Inf(1))
		}
		// No metric read before the stop: only the stop can notice.
		cfg.Train, cfg.Resume, cfg.LogEvery, cfg.MaxSteps = &train, true, 1000, 3 // steps of this run
		_, err = trainer.Run(context.Background(), openCPU(t), graphs.NewPool(), cfg)
		if !errors.Is(err, trainer.ErrNonFinite) {
			t.Fatalf("graphs %v: a diverged run stopped mid-epoch: %v, want ErrNonFinite", graphsOn, err)
		}
		if after, _ := os.ReadFile(path); string(after) != string(good) {
			t.Fatalf("graphs %v: the last good checkpoint was replaced by a diverged model", graphsOn)
		}
	}
}

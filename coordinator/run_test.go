package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// The single run's own tests are in package train, a sweep's in package
// sweep; these helpers run the ones every activity's launcher test needs.

func smallSpec(dir string) job.Spec {
	s := job.Default()
	s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.BatchSize, s.LogEvery = "cpu", "synthetic", 256, 2, []int{8}, 32, 1000
	s.EnableGraphs, s.RunDir = true, dir
	return s
}

func request(t *testing.T, spec job.Spec) train.Request {
	shared := trainer.NewShared()
	t.Cleanup(func() { shared.Close() })
	return train.Request{Spec: spec, Shared: shared, Version: "test", Started: time.Now()}
}

// trainRun prepares, trains and records a run, as tolaria train does.
func trainRun(t *testing.T, req train.Request) (*train.Run, trainer.Summary) {
	t.Helper()
	r, err := train.Prepare(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sum, err := r.Train(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Record(&sum); err != nil {
		t.Fatal(err)
	}
	return r, sum
}

// testSweep is four small trials on synthetic data, a second or so each.
const testSweep = `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 2
  batch_size: 32
  log_every: 2
  enable_graphs: true
  model: {hidden: [8]}
trials:
  - {name: a, lr: 0.0001}
  - {name: b, lr: 0.003}
  - {name: c, lr: 0.01, model: {hidden: [16]}}
  - {name: d, lr: 0.03}
`

// sweepConfig runs the sweep file text with this test binary as the
// worker.
func sweepConfig(t *testing.T, text string) sweep.Config {
	t.Helper()
	sw, err := sweep.ReadSweep(writeSweep(t, text))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(serveAsWorkerEnv, "1")
	return sweep.Config{Sweep: sw, Dir: filepath.Join(t.TempDir(), "sweep"), Device: "cpu", RankBy: "test_accuracy", Worker: exe, Version: "test"}
}

func runSweep(t *testing.T, ctx context.Context, cfg sweep.Config) (sweep.Results, *sweep.Run) {
	t.Helper()
	s, err := sweep.Prepare(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res, s
}

// writeSweep writes a sweep file of text.
func writeSweep(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sweep.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

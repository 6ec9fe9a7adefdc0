package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestPlanOfAFreshRun(t *testing.T) {
	cfg := smallConfig(t)
	p, err := trainer.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := trainer.StepsPerEpoch(cfg)
	if p.StepsPerEpoch() != want || p.ResumeStep() != 0 {
		t.Fatalf("plan: %d steps per epoch from step %d; want %d from 0", p.StepsPerEpoch(), p.ResumeStep(), want)
	}
	cfg.WarmupBatches = 1000
	if _, err := trainer.NewPlan(cfg); !field.Is(err, "graphs.warmup_batches") {
		t.Fatalf("a warm-up that covers the run: %v", err)
	}
	cfg = smallConfig(t)
	cfg.Optimizer.TotalSteps = 0
	if _, err := trainer.NewPlan(cfg); err == nil {
		t.Fatal("a plan without a schedule length")
	}
	cfg = smallConfig(t)
	cfg.Resume, cfg.RunDir = true, t.TempDir()
	if _, err := trainer.NewPlan(cfg); !errors.Is(err, trainer.ErrCheckpoint) {
		t.Fatalf("resume without a checkpoint: %v", err)
	}
}

// TestResumedPlanReadsTheCheckpointOnce: the plan holds the checkpoint it
// verified, so the run continues from it even when the file is gone by
// then, and ends with the parameters of an uninterrupted run.
func TestResumedPlanReadsTheCheckpointOnce(t *testing.T) {
	whole := run(t, smallConfig(t))
	cfg := smallConfig(t)
	cfg.RunDir = t.TempDir()
	cfg.MaxSteps = 16 + 5
	run(t, cfg)
	cfg.MaxSteps, cfg.Resume = 0, true
	p, err := trainer.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.ResumeStep() != 16+5 {
		t.Fatalf("the plan resumes from step %d, want %d", p.ResumeStep(), 16+5)
	}
	if _, err := p.InRunDir(t.TempDir()); !errors.Is(err, trainer.ErrResumeMoved) {
		t.Fatalf("moving a resumed run: %v", err)
	}
	if err := os.Rename(filepath.Join(cfg.RunDir, trainer.CheckpointFile), filepath.Join(cfg.RunDir, "moved-away")); err != nil {
		t.Fatal(err)
	}
	sum, err := p.Run(context.Background(), openCPU(t), newShared(t))
	if err != nil {
		t.Fatalf("running the plan read the checkpoint again: %v", err)
	}
	if sum.ParamsSHA256 != whole.ParamsSHA256 || sum.ResumedFromStep != 16+5 {
		t.Fatalf("resumed from %d with params %s; the uninterrupted run ends with %s", sum.ResumedFromStep, sum.ParamsSHA256, whole.ParamsSHA256)
	}
}

func TestFreshPlanInAnotherRunDir(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 3
	p, err := trainer.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	q, err := p.InRunDir(other)
	if err != nil {
		t.Fatal(err)
	}
	if q.Config().RunDir != other || p.Config().RunDir != cfg.RunDir {
		t.Fatalf("InRunDir: %q (the original now %q)", q.Config().RunDir, p.Config().RunDir)
	}
	if _, err := q.Run(context.Background(), openCPU(t), newShared(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(other, trainer.CheckpointFile)); err != nil {
		t.Fatalf("no checkpoint in the new directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.RunDir, trainer.CheckpointFile)); err == nil {
		t.Fatal("a checkpoint in the old directory")
	}
}

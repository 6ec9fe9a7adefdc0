package sweep

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestReuseWorkersPoolsLaterTrialsBitwise: the same trials with and
// without --reuse-workers end with the same parameters, trial by trial;
// without, every capture is cold; with, the trials of one shape start
// one after another (a, b, d, then c of another model), one worker process
// serves them in turn (each trial's worker.log says which request of it
// the trial was), and a trial after one of its shape (b and d) has every
// capture pooled.
func TestReuseWorkersPoolsLaterTrialsBitwise(t *testing.T) {
	fresh := sweepConfig(t, testSweep)
	fresh.Parallel = 1
	apart, _ := runSweep(t, context.Background(), fresh)
	reuse := sweepConfig(t, testSweep)
	reuse.Parallel, reuse.ReuseWorkers = 1, true
	kept, _ := runSweep(t, context.Background(), reuse)
	if kept.Counts["succeeded"] != 4 || apart.Counts["succeeded"] != 4 {
		t.Fatalf("counts: %v with reuse, %v without", kept.Counts, apart.Counts)
	}
	byName := map[string]TrialResult{}
	for _, r := range apart.Trials {
		byName[r.Name] = r
	}
	for _, r := range kept.Trials {
		alone := byName[r.Name]
		if r.Summary.ParamsSHA256 != alone.Summary.ParamsSHA256 {
			t.Errorf("trial %s: parameters %s with --reuse-workers, %s without", r.Name, r.Summary.ParamsSHA256, alone.Summary.ParamsSHA256)
		}
		if alone.Summary.CapturePooled != 0 {
			t.Errorf("trial %s without reuse: %d pooled captures, want none", r.Name, alone.Summary.CapturePooled)
		}
		want := 0
		if r.Name == "b" || r.Name == "d" {
			want = r.Summary.Captures
		}
		if r.Summary.Captures == 0 || r.Summary.CapturePooled != want {
			t.Errorf("trial %s with reuse: %d of %d captures pooled, want %d", r.Name, r.Summary.CapturePooled, r.Summary.Captures, want)
		}
		log, err := os.ReadFile(filepath.Join(r.RunDir, "worker.log"))
		request := map[string]string{"a": "started", "b": "kept: request 2", "d": "kept: request 3", "c": "kept: request 4"}[r.Name]
		if err != nil || !strings.Contains(string(log), request) {
			t.Errorf("trial %s: worker.log %q, %v; want %q", r.Name, log, err, request)
		}
	}
}

func TestReuseWorkersIsLocalOnly(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.ReuseWorkers, cfg.Launch = true, launch.Slurm()
	err := cfg.Validate()
	if !errors.Is(err, refusal.ErrConfig) || !field.Is(err, "reuse_workers") || !strings.Contains(err.Error(), "slurm") {
		t.Fatalf("--reuse-workers with the slurm launcher: %v, want a refusal naming reuse_workers", err)
	}
}

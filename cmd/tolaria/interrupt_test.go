package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestReportInterruption(t *testing.T) {
	dir := t.TempDir()
	rd, err := coordinator.PlanRunDir(dir, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	say := func(sum trainer.Summary) string {
		var b bytes.Buffer
		reportInterruption(&b, rd, sum, "interrupted")
		return b.String()
	}
	if got := say(trainer.Summary{Steps: 0}); !strings.Contains(got, "nothing to resume") || strings.Contains(got, "checkpoint saved") {
		t.Errorf("stopped before the first step of a fresh run: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, trainer.CheckpointFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := say(trainer.Summary{Steps: 40, ResumedFromStep: 40}); !strings.Contains(got, "checkpoint of step 40 is unchanged") || !strings.Contains(got, "--resume") {
		t.Errorf("stopped before a resumed run's first step: %q", got)
	}
	if got := say(trainer.Summary{Steps: 52, ResumedFromStep: 40}); !strings.Contains(got, "interrupted after 52 steps; checkpoint saved") {
		t.Errorf("stopped after steps: %q", got)
	}
	var b bytes.Buffer
	reportInterruption(&b, rd, trainer.Summary{Steps: 5}, "stopped at --max-steps 5")
	if got := b.String(); !strings.HasPrefix(got, "tolaria: stopped at --max-steps 5 after 5 steps; checkpoint saved") {
		t.Errorf("stopped by --max-steps: %q", got)
	}
}

package sweep

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/job/jobconfig"
)

// TestASweepDirectoryHoldingASweepSaysResume: a new sweep given the
// directory of an earlier one is told it holds a sweep and how to
// continue it; a directory of other files only that it is not empty.
func TestASweepDirectoryHoldingASweepSaysResume(t *testing.T) {
	held := t.TempDir()
	if err := os.WriteFile(filepath.Join(held, ResultsJSON), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := planSweepDir(held, time.Now())
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), held+" holds a sweep") || !strings.Contains(err.Error(), "continue it with sweep_resume") {
		t.Errorf("a sweep's directory: %v", err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = planSweepDir(other, time.Now())
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "is not empty") || strings.Contains(err.Error(), "resume") {
		t.Errorf("a directory of other files: %v", err)
	}
}

// trialFileSweep has an MLP trial and one of layers.
const trialFileSweep = `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 2
  batch_size: 32
  enable_graphs: true
trials:
  - {name: mlp, lr: 0.003, model: {hidden: [16, 8]}}
  - name: convs
    model:
      input: [1, 28, 28]
      layers: [{conv: {out: 4, kernel: 3, padding: 1}}, {relu: {}}, {flatten: {}}, {linear: {out: 10}}]
`

// TestTrialConfigFileIsTrainsAsItIs: a trial's configuration file, as a
// trial about to run writes it (its run directory, resume and a step
// limit set), names no key of one invocation (run_dir, resume,
// schedule.max_steps), and read as tolaria train reads --config it is
// the trial's job to the last setting, those keys at their defaults.
func TestTrialConfigFileIsTrainsAsItIs(t *testing.T) {
	sw, err := ReadSweep(writeSweep(t, trialFileSweep))
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range sw.Trials {
		spec := tr.Spec
		spec.Device, spec.RunDir, spec.Resume, spec.MaxSteps = "cpu", filepath.Join(t.TempDir(), tr.Name), true, 7
		raw, err := trialConfigFile(spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"run_dir:", "resume:", "max_steps:"} {
			if strings.Contains(string(raw), key) {
				t.Errorf("trial %s: its configuration file sets %s\n%s", tr.Name, key, raw)
			}
		}
		path := filepath.Join(t.TempDir(), tr.Name+".yaml")
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		read, err := jobconfig.Resolve(jobconfig.Sources{File: path})
		if err != nil {
			t.Fatalf("trial %s: tolaria train's reading of %s: %v\n%s", tr.Name, path, err, raw)
		}
		want, def := spec, job.Default()
		want.RunDir, want.Resume, want.MaxSteps = def.RunDir, def.Resume, def.MaxSteps
		// Compared as configuration files: an empty list reads as nil.
		got, _ := read.Spec.ConfigFile()
		if wantFile, _ := want.ConfigFile(); string(got) != string(wantFile) {
			t.Errorf("trial %s: its configuration file reads as\n%s\nwant\n%s", tr.Name, got, wantFile)
		}
	}
}

// TestDefaultSweepDirUnderAFileIsRefused: a sweep given no directory goes
// under sweeps/; a file named sweeps, or a sweeps/ that cannot be looked
// into, is refused naming sweep_dir and why, not looked past for ever.
func TestDefaultSweepDirUnderAFileIsRefused(t *testing.T) {
	t.Chdir(t.TempDir())
	if err := os.WriteFile("sweeps", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := planSweepDir("", time.Now())
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "sweep_dir") || !strings.Contains(err.Error(), "sweeps is a file, not a directory") {
		t.Errorf("sweeps a file: %v", err)
	}
	if err := os.Remove("sweeps"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir("sweeps", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := planSweepDir("", time.Now())
	if err != nil || filepath.Dir(dir) != "sweeps" {
		t.Errorf("sweeps a directory: %q, %v", dir, err)
	}
	if os.Getuid() == 0 {
		return // root looks into any directory
	}
	if err := os.Chmod("sweeps", 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod("sweeps", 0o755) })
	_, err = planSweepDir("", time.Now())
	if !errors.Is(err, refusal.ErrConfig) || !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "sweep_dir") || !strings.Contains(err.Error(), "cannot be looked into") {
		t.Errorf("sweeps unreadable: %v", err)
	}
}

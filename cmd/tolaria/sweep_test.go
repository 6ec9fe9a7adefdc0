package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/trainer"
)

// runTolaria runs tolaria in this process with args, in dir.
func runTolaria(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	proc := process{shared: trainer.NewShared(), started: time.Now()}
	defer proc.shared.Close()
	var out, errb bytes.Buffer
	code = run(context.Background(), proc, args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestSweepRefusesUnusableFilesWithNothingWritten: a sweep file whose
// trials cannot each have a directory of their own in the sweep directory
// is bad input: exit 2, a message naming the trial and what to do, and no
// sweep directory.
func TestSweepRefusesUnusableFilesWithNothingWritten(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []string
	}{
		{"empty grid", "base: {dataset: synthetic}\ngrid: {}\n", []string{"grid: has no keys"}},
		{"reserved name", "base: {dataset: synthetic}\ntrials: [{name: a}, {name: results.json}]\n", []string{`trial "results.json"`, "reserved"}},
		{"trials directory", "base: {dataset: synthetic}\ntrials: [{name: trials}]\n", []string{`trial "trials"`, "reserved"}},
		{"name too long", "base: {dataset: synthetic}\ngrid: {data_dir: [" + strings.Repeat("x", 300) + "]}\n", []string{"bytes long, at most 250"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "sweep.yaml")
			if err := os.WriteFile(file, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			sweepDir := filepath.Join(dir, "out")
			code, _, stderr := runTolaria(t, "sweep", file, "--device", "cpu", "--sweep-dir", sweepDir)
			if code != exitUsage {
				t.Errorf("exit %d, want %d\n%s", code, exitUsage, stderr)
			}
			for _, w := range append(c.want, "sweep file "+file) {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
			if _, err := os.Stat(sweepDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused sweep wrote %s (%v)", sweepDir, err)
			}
		})
	}
}

// TestSweepRefusesTooManyTrials: a grid over the limit is bad input that
// names --max-trials and the count, with nothing written; --max-trials
// raises the limit.
func TestSweepRefusesTooManyTrials(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sweep.yaml")
	values := make([]string, 101)
	for i := range values {
		values[i] = strconv.Itoa(i + 1)
	}
	grid := "[" + strings.Join(values, ", ") + "]"
	text := "base: {dataset: synthetic, synthetic_size: 256, batch_size: 8}\ngrid: {epochs: " + grid + ", seed: " + grid + "}\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	sweepDir := filepath.Join(dir, "out")
	code, _, stderr := runTolaria(t, "sweep", file, "--device", "cpu", "--sweep-dir", sweepDir)
	if code != exitUsage || !strings.Contains(stderr, "--max-trials: the sweep makes 10201 trials, more than 10000; give --max-trials 10201") {
		t.Errorf("exit %d, want %d\n%s", code, exitUsage, stderr)
	}
	if _, err := os.Stat(sweepDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused sweep wrote %s (%v)", sweepDir, err)
	}
	if code, _, stderr := runTolaria(t, "sweep", file, "--max-trials", "0"); code != exitUsage || !strings.Contains(stderr, "--max-trials must be at least 1") {
		t.Errorf("--max-trials 0: exit %d\n%s", code, stderr)
	}
	// Allowed, the sweep goes on to look for its worker.
	code, _, stderr = runTolaria(t, "sweep", file, "--device", "cpu", "--sweep-dir", sweepDir, "--max-trials", "10201", "--worker", filepath.Join(dir, "no-worker"))
	if code != exitFailure || strings.Contains(stderr, "max-trials") || !strings.Contains(stderr, "no-worker") {
		t.Errorf("--max-trials 10201: exit %d\n%s", code, stderr)
	}
}

// --min-residence reaches the sweep's configuration, whose check refuses
// a negative one naming the flag, nothing written.
func TestSweepMinResidenceFlag(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sweep.yaml")
	if err := os.WriteFile(file, []byte("base: {data: {dataset: synthetic}}\ntrials: [{name: a}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sweepDir := filepath.Join(dir, "out")
	code, _, stderr := runTolaria(t, "sweep", file, "--device", "cpu", "--min-residence", "-1s", "--sweep-dir", sweepDir)
	if code != exitUsage || !strings.Contains(stderr, "--min-residence") {
		t.Errorf("--min-residence -1s: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(sweepDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused sweep wrote %s (%v)", sweepDir, err)
	}
}

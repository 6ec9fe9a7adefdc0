package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSweepInItsDirectoryWhileItRuns: a new sweep and a --resume given
// the directory of a sweep that runs are refused as in use, naming its
// process, not told to resume it; and the sweep, interrupted, resumed
// and interrupted again, says its trial's steps of this run and in all.
func TestSweepInItsDirectoryWhileItRuns(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, strings.Replace(strings.SplitAfter(e2eSweep, "trials:\n")[0], "epochs: 2", "epochs: 10000", 1)+"  - {name: a, lr: 0.003}\n")
	sweepDir := filepath.Join(dir, "sweep")
	// run starts the sweep, waits until its trial trains, checks that
	// the directory is refused meanwhile, and interrupts it; it returns
	// its standard error.
	run := func(args ...string) string {
		t.Helper()
		cmd, stderr := startRun(t, dir, append([]string{"sweep"}, args...)...)
		waitFor(t, "the trial through two epochs", func() bool { return strings.Count(stderr.String(), "trial a: epoch ") >= 2 })
		want := fmt.Sprintf("--sweep-dir: %s is in use by another tolaria (pid %d, tolaria sweep); wait for it or choose another --sweep-dir", sweepDir, cmd.Process.Pid)
		for _, refused := range [][]string{
			{"sweep", file, "--device", "cpu", "--sweep-dir", sweepDir},
			{"sweep", "--resume", "--sweep-dir", sweepDir, "--device", "cpu"},
		} {
			if r := tolaria(t, dir, nil, refused...); r.code != 2 || !strings.Contains(r.stderr, want) {
				t.Errorf("%s while the sweep runs: exit %d, want 2 saying %q\n%s", strings.Join(refused, " "), r.code, want, r.stderr)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if status, err := waitWithin(cmd, time.Minute); err != nil || status.ExitStatus() != 130 {
			t.Fatalf("after SIGINT: %v, %v\n%s", status, err, stderr)
		}
		return stderr.String()
	}
	run(file, "--device", "cpu", "--sweep-dir", sweepDir)
	first := readSweepResults(t, sweepDir).Trials[0]
	if raw, _ := os.ReadFile(filepath.Join(sweepDir, ".tolaria-sweep.lock")); !strings.HasSuffix(string(raw), ", tolaria sweep") {
		t.Errorf("the sweep's lock file says %q", raw)
	}
	stderr := run("--resume", "--sweep-dir", sweepDir, "--device", "cpu")
	again := readSweepResults(t, sweepDir).Trials[0]
	if again.Summary == nil || first.Summary == nil || again.Summary.ResumedFromStep != first.Summary.Steps {
		t.Fatalf("the resumed trial: %+v, first %+v", again, first)
	}
	s := again.Summary
	want := fmt.Sprintf("interrupted after %d steps, %d in all; checkpoint saved in %s", s.Steps-s.ResumedFromStep, s.Steps, again.RunDir)
	if again.Reason != want || !strings.Contains(stderr, "trial a: interrupted: "+want) {
		t.Errorf("the resumed trial, interrupted again: reason %q, want %q\n%s", again.Reason, want, stderr)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// startedWorkers are the pids that worker.log's header lines name, one per
// start.
func startedWorkers(t *testing.T, log string) []int {
	t.Helper()
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, m := range regexp.MustCompile(`=== \S+ tolaria-worker pid (\d+) started: \S+ serve`).FindAllStringSubmatch(string(raw), -1) {
		pid, _ := strconv.Atoi(m[1])
		pids = append(pids, pid)
	}
	return pids
}

// gone reports whether pid has ended (a zombie counts as ended).
func gone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return err != nil || (i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X'))
}

// TestFailedWorkerIsReportedWithItsReason: a worker that crashes, exits
// with a code, hangs (stopped: no heartbeat) or wedges (its training
// goroutine blocked while its heartbeats go on) (test faults, after the
// first epoch's checkpoint)
// fails the run with exit 1 and a message that says why, carries the tail
// of worker.log, says where the whole log is and gives the command that
// resumes from the checkpoint; no worker is left, and the resumed run
// appends to worker.log and ends as an uninterrupted run does.
func TestFailedWorkerIsReportedWithItsReason(t *testing.T) {
	for _, c := range []struct{ fault, says string }{
		{"step=20,kill", "crashed: signal: killed"},
		{"step=20,exit=3", "exited without an answer: exit status 3"},
		{"step=20,hang", "hung: no heartbeat for"},
		{"step=20,wedge", "hung: alive (last heartbeat "},
	} {
		t.Run(c.fault, func(t *testing.T) {
			dir := t.TempDir()
			run := filepath.Join(dir, "run")
			start := time.Now()
			r := tolaria(t, dir, []string{jobserver.FaultEnv + "=" + c.fault}, quick(run, "--isolate", "--heartbeat-timeout", "3s")...)
			took := time.Since(start)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", r.code, r.stderr)
			}
			log := filepath.Join(run, "worker.log")
			for _, want := range []string{c.says, "test-only fault switch", "the worker's whole log: " + log,
				"the checkpoint of step 16 is kept; continue with: tolaria train --resume --run-dir " + run} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr does not say %q:\n%s", want, r.stderr)
				}
			}
			if (strings.Contains(c.fault, "hang") || strings.Contains(c.fault, "wedge")) && took > 60*time.Second {
				t.Errorf("a hung worker was found after %s with a 3s heartbeat timeout", took)
			}
			if strings.Contains(c.fault, "wedge") {
				requireStalledWithin(t, r.stderr, 3*time.Second)
			}
			pids := startedWorkers(t, log)
			if len(pids) != 1 {
				t.Fatalf("worker.log names %d starts, want 1", len(pids))
			}
			if !gone(pids[0]) {
				_ = syscall.Kill(-pids[0], syscall.SIGKILL)
				t.Fatalf("the worker %d outlived tolaria", pids[0])
			}
			if _, err := os.Stat(filepath.Join(run, "summary.json")); err == nil {
				t.Error("a failed run wrote summary.json")
			}

			r = tolaria(t, dir, nil, "train", "--resume", "--run-dir", run, "--isolate")
			if r.code != 0 {
				t.Fatalf("resume: exit %d:\n%s", r.code, r.stderr)
			}
			if n := len(startedWorkers(t, log)); n != 2 {
				t.Errorf("worker.log names %d starts after the resume, want 2", n)
			}
			if s := readSummary(t, filepath.Join(run, "summary.json")); s.ResumedFromStep != 16 || s.Steps != 32 {
				t.Errorf("resumed run: from step %d, %d steps; want 16 and 32", s.ResumedFromStep, s.Steps)
			}
		})
	}
}

// requireStalledWithin checks that a wedged worker's message says it made
// no progress for at least the heartbeat timeout, and was killed within a
// heartbeat interval (plus the watchdog's tick and scheduling) of it.
func requireStalledWithin(t *testing.T, stderr string, timeout time.Duration) {
	t.Helper()
	m := regexp.MustCompile(`made no progress for (\S+) \(heartbeat timeout (\S+);`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the message does not say how long the worker made no progress:\n%s", stderr)
	}
	stalled, err := time.ParseDuration(m[1])
	if err != nil || m[2] != timeout.String() {
		t.Fatalf("made no progress for %q (timeout %q): %v", m[1], m[2], err)
	}
	if stalled < timeout || stalled > timeout+2*time.Second {
		t.Errorf("the wedged worker was killed after %s without progress; want within 2s past the %s timeout", stalled, timeout)
	}
}

// TestWorkerLogHoldsTheWorkersOutput: with --isolate the worker's logs go
// to worker.log, not to tolaria's standard error, which says where they
// are and keeps its progress.
func TestWorkerLogHoldsTheWorkersOutput(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	r := tolaria(t, dir, nil, quick(run, "--isolate", "--enable-graphs")...)
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	log := filepath.Join(run, "worker.log")
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "worker_pid=") {
		t.Errorf("worker.log does not hold the worker's structured log:\n%s", raw)
	}
	if strings.Contains(r.stderr, "worker_pid=") || !strings.Contains(r.stderr, log) {
		t.Errorf("tolaria's stderr holds the worker's log, or does not say where it is:\n%s", r.stderr)
	}
	if !strings.Contains(r.stdout, "params sha256") {
		t.Errorf("no summary on stdout:\n%s", r.stdout)
	}
}

// TestStoppedWorkerIsKilledAsHung: a worker stopped with SIGSTOP is not
// waited on: tolaria kills it once its heartbeat is missed, exits 1 saying
// it hung, and gives the resume command.
func TestStoppedWorkerIsKilledAsHung(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	cmd, stderr := startRun(t, dir, longer(run, "--isolate", "--heartbeat-timeout", "3s")...)
	waitFor(t, "the first epoch", func() bool { return epochsLogged(filepath.Join(run, "events.jsonl")) >= 1 })
	worker := childOf(t, cmd.Process.Pid)
	t.Cleanup(func() { _ = syscall.Kill(-worker, syscall.SIGKILL) })
	if err := syscall.Kill(worker, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	status, err := waitWithin(cmd, 60*time.Second)
	if err != nil {
		t.Fatalf("tolaria waited on a stopped worker: %v\n%s", err, stderr)
	}
	if status.ExitStatus() != 1 {
		t.Fatalf("exit %v, want 1:\n%s", status, stderr)
	}
	if d := time.Since(stoppedAt); d > 30*time.Second {
		t.Errorf("a stopped worker was found after %s with a 3s heartbeat timeout", d)
	}
	for _, want := range []string{"hung: no heartbeat for", "(heartbeat timeout 3s)", "continue with: tolaria train --resume --run-dir " + run} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if !gone(worker) {
		t.Errorf("the stopped worker %d outlived tolaria", worker)
	}
}

// TestInterruptWithAStoppedWorkerIsPrompt: Ctrl-C while the worker is
// stopped does not wait out the grace period (30s): the worker, silent
// after the cancel, is killed within seconds, and tolaria exits 130 with
// the resume command for the checkpoint it has.
func TestInterruptWithAStoppedWorkerIsPrompt(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	cmd, stderr := startRun(t, dir, longer(run, "--isolate")...)
	events := filepath.Join(run, "events.jsonl")
	waitFor(t, "the first checkpoint", func() bool { return checkpointsLogged(events) >= 1 })
	worker := childOf(t, cmd.Process.Pid)
	t.Cleanup(func() { _ = syscall.Kill(-worker, syscall.SIGKILL) })
	if err := syscall.Kill(worker, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the worker to stop", func() bool { return stopped(worker) })
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	status, err := waitWithin(cmd, 60*time.Second)
	if err != nil {
		t.Fatalf("after SIGINT: %v\n%s", err, stderr)
	}
	if d := time.Since(sent); d > 20*time.Second {
		t.Errorf("tolaria took %s to stop with a stopped worker", d)
	}
	if status.ExitStatus() != 130 {
		t.Fatalf("exit %v, want 130:\n%s", status, stderr)
	}
	for _, want := range []string{"interrupted", "hung", "continue with: tolaria train --resume --run-dir " + run} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if !gone(worker) {
		t.Errorf("the stopped worker %d outlived tolaria", worker)
	}
}

// TestHeartbeatTimeoutIsChecked: a heartbeat timeout that is not a
// duration of at least a second is refused before anything is written.
func TestHeartbeatTimeoutIsChecked(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"0", "100ms", "-5s", "soon"} {
		run := filepath.Join(dir, "run")
		r := tolaria(t, dir, nil, quick(run, "--isolate", "--heartbeat-timeout", bad)...)
		if r.code != 2 || !strings.Contains(r.stderr, "heartbeat-timeout") || (bad != "soon" && !strings.Contains(r.stderr, "at least 1s")) {
			t.Errorf("--heartbeat-timeout %s: exit %d:\n%s", bad, r.code, r.stderr)
		}
		if _, err := os.Stat(run); err == nil {
			t.Fatalf("--heartbeat-timeout %s: the refused run created its directory", bad)
		}
	}
}

// TestRunKilledBeforeItsSummaryIsFinishedByResume: a run killed after its
// final checkpoint and before summary.json (here: the summary removed, the
// state such a kill leaves) is finished by --resume, with the results of
// the run and no more training; a second --resume is refused as complete.
func TestRunKilledBeforeItsSummaryIsFinishedByResume(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, quick(run)...); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	whole := readSummary(t, filepath.Join(run, "summary.json"))
	ck, err := os.ReadFile(filepath.Join(run, trainer.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(run, "summary.json")); err != nil {
		t.Fatal(err)
	}
	r := tolaria(t, dir, nil, "train", "--resume", "--run-dir", run)
	if r.code != 0 {
		t.Fatalf("resume of a run killed before its summary: exit %d:\n%s", r.code, r.stderr)
	}
	got := readSummary(t, filepath.Join(run, "summary.json"))
	if got.ParamsSHA256 != whole.ParamsSHA256 || got.Steps != whole.Steps || got.TestAccuracy != whole.TestAccuracy ||
		got.TrainLoss != whole.TrainLoss || got.Interrupted || got.ResumedFromStep != whole.Steps {
		t.Errorf("finished by resume:\n%+v\nthe run:\n%+v", got, whole)
	}
	if after, _ := os.ReadFile(filepath.Join(run, trainer.CheckpointFile)); string(after) != string(ck) {
		t.Error("finishing the run changed its checkpoint")
	}
	if !strings.Contains(r.stdout, whole.ParamsSHA256) {
		t.Errorf("the summary printed does not give the run's parameters:\n%s", r.stdout)
	}
	before := snapshot(t, run)
	if r := tolaria(t, dir, nil, "train", "--resume", "--run-dir", run); r.code != 2 || !strings.Contains(r.stderr, "complete") {
		t.Errorf("resume of the finished run: exit %d:\n%s", r.code, r.stderr)
	}
	sameFiles(t, before, snapshot(t, run))
}

// TestUnwritableSummaryJSONIsRefusedFirst: a --summary-json that cannot be
// written is refused before the run, with nothing written.
func TestUnwritableSummaryJSONIsRefusedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{filepath.Join(file, "out", "summary.json"), "/proc/tolaria-summary.json"} {
		run := filepath.Join(dir, "run")
		r := tolaria(t, dir, nil, quick(run, "--summary-json", bad)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--summary-json") || !strings.Contains(r.stderr, bad) {
			t.Errorf("--summary-json %s: exit %d:\n%s", bad, r.code, r.stderr)
		}
		if _, err := os.Stat(run); err == nil {
			t.Fatalf("--summary-json %s: the refused run created its directory", bad)
		}
	}
}

// TestRunDirOfTheUsersIsRefused: a --run-dir holding the user's own files
// (named as a run's are) is not written into.
func TestRunDirOfTheUsersIsRefused(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "mine")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"config.yaml", "summary.json"} {
		if err := os.WriteFile(filepath.Join(mine, name), []byte("the user's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, mine)
	r := tolaria(t, dir, nil, quick(mine)...)
	if r.code != 2 || !strings.Contains(r.stderr, "not a tolaria run") || !strings.Contains(r.stderr, "--run-dir") || !strings.Contains(r.stderr, "config.yaml") {
		t.Errorf("a directory of the user's: exit %d:\n%s", r.code, r.stderr)
	}
	sameFiles(t, before, snapshot(t, mine))
}

// TestStaleTemporaryFilesGoOnResume: the full-size temporary file a kill
// during a checkpoint's write leaves is removed when the run is resumed,
// and the resumed run ends as an uninterrupted one.
func TestStaleTemporaryFilesGoOnResume(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, quick(run, "--max-steps", "20")...); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ck, err := os.ReadFile(filepath.Join(run, trainer.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(run, ".checkpoint.tlck.4242.tmp")
	if err := os.WriteFile(stale, ck, 0o600); err != nil {
		t.Fatal(err)
	}
	r := tolaria(t, dir, nil, "train", "--resume", "--run-dir", run)
	if r.code != 0 {
		t.Fatalf("resume: exit %d:\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Errorf("%s is still there after a successful resume", stale)
	}
	if !strings.Contains(r.stderr, ".checkpoint.tlck.4242.tmp") {
		t.Errorf("the removal is not logged:\n%s", r.stderr)
	}
}

// TestFractionalSeedIsRefused: seed 2.7 from a file or TOLARIA_SEED is
// refused like any integer setting's fraction, never truncated to 2.
func TestFractionalSeedIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "seed.yaml")
	if err := os.WriteFile(cfg, []byte("seed: 2.7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"--config", cfg}},
		{[]string{"TOLARIA_SEED=2.7"}, nil},
		{[]string{"TOLARIA_BATCH_SIZE=1.5"}, nil},
	} {
		run := filepath.Join(dir, "run")
		r := tolaria(t, dir, c.env, quick(run, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "2.7") && !strings.Contains(r.stderr, "1.5") {
			t.Errorf("%v %v: exit %d:\n%s", c.env, c.args, r.code, r.stderr)
		}
		if _, err := os.Stat(run); err == nil {
			t.Fatalf("%v %v: the refused run created its directory", c.env, c.args)
		}
	}
}

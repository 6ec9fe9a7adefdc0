package e2e

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator"
)

func readEval(t *testing.T, runDir string) coordinator.EvalReport {
	t.Helper()
	return readJSON[coordinator.EvalReport](t, filepath.Join(runDir, coordinator.EvalJSON))
}

// figures are an evaluation's results without what names how it ran.
func figures(r coordinator.EvalReport) coordinator.EvalReport {
	r.Workers, r.Seconds = 0, 0
	return r
}

// trainedRun trains a small run and returns its directory.
func trainedRun(t *testing.T, dir string) string {
	t.Helper()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, quick(run, "--synthetic-size", "600")...); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	return run
}

// TestShardedEvalDoesNotDependOnTheWorkers: tolaria eval with 1, 2 and 3
// worker processes writes the same figures, they are the training
// summary's for the final checkpoint (the accuracy exactly, the loss to
// float32's precision: see docs/eval.md), and a shard whose worker is
// killed is tried again with the same result.
func TestShardedEvalDoesNotDependOnTheWorkers(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	var one coordinator.EvalReport
	for _, n := range []string{"1", "2", "3"} {
		r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", n)
		if r.code != 0 {
			t.Fatalf("eval --workers %s: exit %d\n%s", n, r.code, r.stderr)
		}
		got := readEval(t, run)
		if got.Workers != map[string]int{"1": 1, "2": 2, "3": 3}[n] || got.Samples != 120 || got.Split != "test" || got.Step == 0 || got.CheckpointSHA256 == "" {
			t.Fatalf("eval --workers %s: %+v", n, got)
		}
		if strings.Count(r.stderr, "examples scored") != got.Workers {
			t.Errorf("eval --workers %s: one progress line per shard expected:\n%s", n, r.stderr)
		}
		if n == "1" {
			one = got
			continue
		}
		if !reflect.DeepEqual(figures(got), figures(one)) {
			t.Errorf("eval --workers %s:\n%+v\nwant the single worker's\n%+v", n, figures(got), figures(one))
		}
	}
	sum := readSummary(t, filepath.Join(run, coordinator.SummaryFile))
	if one.Accuracy != sum.TestAccuracy || !closeTo(one.Loss, sum.TestLoss, 1e-6) {
		t.Errorf("eval: accuracy %v, loss %v; the training summary: %v, %v", one.Accuracy, one.Loss, sum.TestAccuracy, sum.TestLoss)
	}
	r := tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=1,kill,shard=1,attempt=1"}, "eval", "--run-dir", run, "--workers", "3")
	if r.code != 0 {
		t.Fatalf("eval with a killed shard: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "shard 1 (of 3): attempt 1 failed") || !strings.Contains(r.stderr, "signal: killed") {
		t.Errorf("the killed attempt is not reported:\n%s", r.stderr)
	}
	if got := readEval(t, run); !reflect.DeepEqual(figures(got), figures(one)) {
		t.Errorf("after a retried shard:\n%+v\nwant\n%+v", figures(got), figures(one))
	}
}

func closeTo(a, b, rel float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= rel*max(a, b, -a, -b)
}

// TestShardedEvalFailingTwiceExits3: a shard whose worker fails both
// attempts is named, exit 3, and no eval.json is left, not even an
// earlier one.
func TestShardedEvalFailingTwiceExits3(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	if r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "2"); r.code != 0 {
		t.Fatalf("eval: exit %d\n%s", r.code, r.stderr)
	}
	r := tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=1,exit=7,shard=2"}, "eval", "--run-dir", run, "--workers", "3")
	if r.code != 3 {
		t.Fatalf("exit %d, want 3\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"attempt 1 failed", "attempt 2 failed", "1 shard(s) failed twice", "shard 2: attempt 2", "exit status 7"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(run, coordinator.EvalJSON)); !os.IsNotExist(err) {
		t.Errorf("an eval.json is left after a failed evaluation: %v", err)
	}
}

// TestShardedEvalRefusesBadInput: exit 2 and nothing written.
func TestShardedEvalRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	damaged := filepath.Join(dir, "damaged.tlck")
	raw, err := os.ReadFile(filepath.Join(run, "checkpoint.tlck"))
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 1
	if err := os.WriteFile(damaged, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--run-dir", filepath.Join(dir, "none")}, "--run-dir"},
		{[]string{"--run-dir", empty}, "config.yaml"},
		{[]string{"--run-dir", run, "--checkpoint", filepath.Join(dir, "none.tlck")}, "--checkpoint"},
		{[]string{"--run-dir", run, "--checkpoint", damaged}, "checksum mismatch"},
		{[]string{"--run-dir", run, "--workers", "0"}, "--workers: must be at least 1"},
		{[]string{"--run-dir", run, "--workers", "121"}, "at most 120"},
		{[]string{"--run-dir", run, "--split", "val"}, "--split"},
	} {
		before := snapshot(t, dir)
		r := tolaria(t, dir, nil, append([]string{"eval"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("eval %v: exit %d, want 2 and %q\n%s", tc.args, r.code, tc.want, r.stderr)
		}
		if after := snapshot(t, dir); !reflect.DeepEqual(before, after) {
			t.Errorf("eval %v wrote into %s", tc.args, dir)
		}
	}
}

// TestShardedEvalHungShard: a shard whose worker stops (SIGSTOP), or
// wedges (its scoring blocked while its heartbeats go on), is found hung
// within the heartbeat timeout, killed and tried again; one that hangs in
// both attempts is reported missing with exit 3, and no worker outlives
// tolaria.
func TestShardedEvalHungShard(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	start := time.Now()
	r := tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=1,hang,shard=0,attempt=1"}, "eval", "--run-dir", run, "--workers", "2", "--heartbeat-timeout", "2s")
	if r.code != 0 || !strings.Contains(r.stderr, "shard 0 (of 2): attempt 1 failed") || !strings.Contains(r.stderr, "hung") {
		t.Fatalf("a shard hung once: exit %d\n%s", r.code, r.stderr)
	}
	r = tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=1,hang,shard=1"}, "eval", "--run-dir", run, "--workers", "2", "--heartbeat-timeout", "2s")
	if r.code != 3 || !strings.Contains(r.stderr, "shard 1: attempt 2") || !strings.Contains(r.stderr, "hung") {
		t.Fatalf("a shard hung twice: exit %d\n%s", r.code, r.stderr)
	}
	r = tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=1,wedge,shard=1,attempt=1"}, "eval", "--run-dir", run, "--workers", "2", "--heartbeat-timeout", "2s")
	if r.code != 0 || !strings.Contains(r.stderr, "shard 1 (of 2): attempt 1 failed") || !strings.Contains(r.stderr, "made no progress") {
		t.Fatalf("a shard wedged once: exit %d\n%s", r.code, r.stderr)
	}
	requireStalledWithin(t, r.stderr, 2*time.Second)
	if d := time.Since(start); d > time.Minute {
		t.Errorf("four hangs of a 2s heartbeat timeout took %s to detect", d)
	}
	pids := evalWorkerPIDs(t, run)
	if len(pids) != 9 { // three evaluations of two shards, one retry each
		t.Errorf("worker pids %v in the shards' logs; want 9", pids)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("worker %d outlived tolaria eval", pid)
		}
	}
}

// TestShardedEvalInterrupt: SIGINT stops every shard's worker; tolaria
// exits 130 without an eval.json.
func TestShardedEvalInterrupt(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	// Slow the shards down: every batch copy of the workers pauses 1s.
	cfg := filepath.Join(run, coordinator.ConfigFile)
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, append(raw, "slow_stage_copy_ms: 1000\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, stderr := startRun(t, dir, "eval", "--run-dir", run, "--workers", "2")
	waitFor(t, "both workers started", func() bool { return len(evalWorkerPIDs(t, run)) == 2 })
	pids := evalWorkerPIDs(t, run)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	status, err := waitWithin(cmd, time.Minute)
	if err != nil || status.ExitStatus() != 130 || !strings.Contains(stderr.String(), "interrupted") || strings.Contains(stderr.String(), "examples scored") {
		t.Fatalf("after SIGINT: %v, %v\n%s", status, err, stderr)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("worker %d outlived tolaria eval", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(run, coordinator.EvalJSON)); !os.IsNotExist(err) {
		t.Errorf("an interrupted evaluation left eval.json: %v", err)
	}
}

// evalWorkerPIDs reads the pids of the shards' workers from the header
// line of each start in their logs.
func evalWorkerPIDs(t *testing.T, run string) []int {
	t.Helper()
	return pidsInLogs(filepath.Join(run, coordinator.EvalDir, "shard-*.log"), `tolaria-worker pid (\d+) started`)
}

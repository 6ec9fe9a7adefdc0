package e2e

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
)

func readEval(t *testing.T, runDir string) eval.Report {
	t.Helper()
	return readJSON[eval.Report](t, filepath.Join(runDir, eval.JSONFile))
}

// figures are an evaluation's results without what names how it ran
// (the workers, their time, their device-memory budgets).
func figures(r eval.Report) eval.Report {
	r.Workers, r.Seconds, r.Budgets = 0, 0, nil
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
	var one eval.Report
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
		// Shards side by side divide the cores, as the header and each
		// shard's CPU device say.
		threads := max(1, runtime.GOMAXPROCS(0)/got.Workers)
		if each := fmt.Sprintf("on cpu, %d kernel thread", threads); !strings.Contains(r.stderr, each) {
			t.Errorf("eval --workers %s: the header does not say %q:\n%s", n, each, r.stderr)
		}
		log := readFile(t, filepath.Join(run, eval.Dir, "shard-0.log"))
		last := log[strings.LastIndex(log, "serving an evaluation shard")+1:]
		if !strings.Contains(log, "serving an evaluation shard") || !strings.Contains(strings.SplitN(last, "\n", 2)[0], "(float32, "+map[bool]string{true: "1 thread,", false: fmt.Sprintf("%d threads,", threads)}[threads == 1]) {
			t.Errorf("eval --workers %s: shard 0's CPU device had not %d threads:\n%s", n, threads, log)
		}
		if n == "1" {
			one = got
			continue
		}
		if !reflect.DeepEqual(figures(got), figures(one)) {
			t.Errorf("eval --workers %s:\n%+v\nwant the single worker's\n%+v", n, figures(got), figures(one))
		}
	}
	sum := readSummary(t, filepath.Join(run, rundir.SummaryFile))
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

// TestShardedEvalFailingTwiceExits3: a re-evaluation a shard of which
// fails both attempts exits 3 naming it, leaves the earlier eval.json byte
// for byte, and writes eval.partial.json, marked partial, with the figures
// of the other shards and the missing shard's examples, reason and log.
// --resume then scores only that shard, and its eval.json is an
// uninterrupted evaluation's, byte for byte but for the seconds, the one
// it replaced kept as eval.prev.json.
func TestShardedEvalFailingTwiceExits3(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	if r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "3"); r.code != 0 {
		t.Fatalf("eval: exit %d\n%s", r.code, r.stderr)
	}
	whole := readFile(t, filepath.Join(run, eval.JSONFile))
	if r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "2"); r.code != 0 {
		t.Fatalf("eval: exit %d\n%s", r.code, r.stderr)
	}
	good := readFile(t, filepath.Join(run, eval.JSONFile))
	r := tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=1,exit=7,shard=2"}, "eval", "--run-dir", run, "--workers", "3")
	if r.code != 3 {
		t.Fatalf("exit %d, want 3\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"attempt 1 failed", "attempt 2 failed", "1 shard(s) failed twice", "shard 2: attempt 2", "exit status 7", "eval.partial.json"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if got := readFile(t, filepath.Join(run, eval.JSONFile)); got != good {
		t.Errorf("a failed re-evaluation changed eval.json:\n%s\nwas\n%s", got, good)
	}
	partial := readJSON[eval.Report](t, filepath.Join(run, eval.PartialJSONFile))
	if partial.Complete || partial.Samples != 80 || partial.SplitSamples != 120 || len(partial.Missing) != 1 {
		t.Fatalf("eval.partial.json: %+v", partial)
	}
	if m := partial.Missing[0]; m.Shard != 2 || m.First != 2 || m.Stride != 3 || m.Count != 40 || !strings.Contains(m.Reason, "exit status 7") ||
		m.Log != filepath.Join(run, eval.Dir, "shard-2.log") {
		t.Errorf("the missing shard: %+v", m)
	}
	r = tolaria(t, dir, nil, "eval", "--resume", "--run-dir", run, "--workers", "3")
	if r.code != 0 {
		t.Fatalf("eval --resume: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "2 shards of 3 kept (shards 0, 1)") || strings.Count(r.stderr, "examples scored") != 1 {
		t.Errorf("the resume scored more than the missing shard:\n%s", r.stderr)
	}
	if got := readFile(t, filepath.Join(run, eval.JSONFile)); withoutRunFacts(got) != withoutRunFacts(whole) {
		t.Errorf("the resumed eval.json:\n%s\nthe uninterrupted one:\n%s", got, whole)
	}
	if got := readFile(t, filepath.Join(run, eval.PrevJSONFile)); got != good {
		t.Errorf("eval.prev.json:\n%s\nwant the eval.json it replaced:\n%s", got, good)
	}
	if _, err := os.Stat(filepath.Join(run, eval.PartialJSONFile)); !os.IsNotExist(err) {
		t.Errorf("a complete evaluation left eval.partial.json: %v", err)
	}
}

// TestShardedEvalResumeAfterKilledWorkers: the workers of two of four
// shards are killed from outside (SIGKILL) in every attempt; the
// evaluation exits 3, and --resume, scoring those two shards alone,
// writes an uninterrupted evaluation's eval.json, byte for byte but for
// the seconds.
func TestShardedEvalResumeAfterKilledWorkers(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	if r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "4"); r.code != 0 {
		t.Fatalf("eval: exit %d\n%s", r.code, r.stderr)
	}
	whole := readFile(t, filepath.Join(run, eval.JSONFile))
	// Slow the shards down, so that a worker is killed while it scores:
	// every batch copy of the workers pauses 1s.
	cfg := filepath.Join(run, rundir.ConfigFile)
	plain := readFile(t, cfg)
	if err := os.WriteFile(cfg, []byte(plain+"slow_stage_copy_ms: 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The logs are appended to: the workers of the first evaluation are
	// in them already.
	killed := map[int]bool{}
	for _, pid := range evalWorkerPIDs(t, run) {
		killed[pid] = false
	}
	// A worker is killed 400ms after it starts: in its first batch, which
	// takes a second.
	started := map[int]time.Time{}
	earlier := len(killed)
	cmd, stderr := startRun(t, dir, "eval", "--run-dir", run, "--workers", "4")
	exited := make(chan struct{})
	var status syscall.WaitStatus
	var werr error
	go func() {
		status, werr = waitWithin(cmd, 3*time.Minute)
		close(exited)
	}()
	for done := false; !done; {
		select {
		case <-exited:
			done = true
		case <-time.After(20 * time.Millisecond):
		}
		for _, s := range []string{"0", "3"} {
			for _, pid := range pidsInLogs(filepath.Join(run, eval.Dir, "shard-"+s+".log"), `tolaria-worker pid (\d+) started`) {
				if _, seen := killed[pid]; seen {
					continue
				}
				if _, ok := started[pid]; !ok {
					started[pid] = time.Now()
				}
				if time.Since(started[pid]) > 400*time.Millisecond {
					killed[pid] = syscall.Kill(pid, syscall.SIGKILL) == nil
				}
			}
		}
	}
	if werr != nil || status.ExitStatus() != 3 || !strings.Contains(stderr.String(), "2 shard(s) failed twice") || !strings.Contains(stderr.String(), "signal: killed") {
		t.Fatalf("with shards 0 and 3 killed: %v, %v\n%s", status, werr, stderr)
	}
	if n := len(killed) - earlier; n != 4 {
		t.Errorf("killed %d workers (%v), want the two attempts of two shards", n, killed)
	}
	if err := os.WriteFile(cfg, []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	r := tolaria(t, dir, nil, "eval", "--resume", "--run-dir", run, "--workers", "4")
	if r.code != 0 {
		t.Fatalf("eval --resume: exit %d\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "2 shards of 4 kept (shards 1, 2)") || strings.Count(r.stderr, "examples scored") != 2 {
		t.Errorf("the resume did not score shards 0 and 3 alone:\n%s", r.stderr)
	}
	if got := readFile(t, filepath.Join(run, eval.JSONFile)); withoutRunFacts(got) != withoutRunFacts(whole) {
		t.Errorf("the resumed eval.json:\n%s\nthe uninterrupted one:\n%s", got, whole)
	}
}

// TestShardedEvalMetricsSayPartial: with --metrics-addr, the figures of
// an evaluation a shard of which failed twice are served under
// result="partial", never result="complete", with the failed shard
// counted; those of a complete one under result="complete".
func TestShardedEvalMetricsSayPartial(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	for _, tc := range []struct {
		env          []string
		want, absent string
	}{
		{[]string{"TOLARIA_E2E_WORKER_FAULT=step=1,exit=7,shard=1"}, `tolaria_eval_result_accuracy{result="partial"}`, `result="complete"`},
		{nil, `tolaria_eval_result_accuracy{result="complete"}`, `result="partial"`},
	} {
		stderr, done := startInterruptible(t, dir, tc.env, "eval", "--run-dir", run, "--workers", "2",
			"--metrics-addr", "127.0.0.1:0", "--metrics-linger", "5s")
		addr := servingAt(t, stderr)
		waitFor(t, "the final metrics", func() bool { return strings.Contains(stderr.String(), "serving the final metrics") })
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatalf("/metrics: %v\n%s", err, stderr)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(raw)
		if !strings.Contains(body, tc.want) || strings.Contains(body, tc.absent) {
			t.Errorf("/metrics lacks %s or has %s:\n%s", tc.want, tc.absent, grepLines(body, "tolaria_eval_"))
		}
		if failed := tc.env != nil; failed != strings.Contains(body, `tolaria_eval_shards{state="failed"} 1`) {
			t.Errorf("the failed shards:\n%s", grepLines(body, "tolaria_eval_shards"))
		}
		<-done // the linger over: the next evaluation uses the same shard files
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// withoutRunFacts is an eval.json without what names how it ran, the
// parts that differ between two evaluations of the same figures: the wall
// time, the number of workers and the device-memory budgets their workers
// held (how many at once depends on the workers and on what a resume
// rescored).
func withoutRunFacts(evalJSON string) string {
	evalJSON = regexp.MustCompile(`(?ms)^  "budgets": \[.*?^  \],?\n`).ReplaceAllString(evalJSON, "")
	return regexp.MustCompile(`(?m)^  "(seconds|workers)": .*\n`).ReplaceAllString(evalJSON, "")
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
	// A run whose own checkpoint is damaged: the error names --run-dir,
	// the only flag given, not --checkpoint.
	damagedRun := filepath.Join(dir, "damaged-run")
	if err := os.Mkdir(damagedRun, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{rundir.ConfigFile, "checkpoint.tlck"} {
		b, err := os.ReadFile(filepath.Join(run, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "checkpoint.tlck" {
			b = raw
		}
		if err := os.WriteFile(filepath.Join(damagedRun, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
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
		{[]string{"--run-dir", run, "--data-dir", empty}, "--data-dir: names data, but the run's dataset is synthetic"},
		{[]string{"--run-dir", damagedRun}, "--run-dir: checkpoint"},
	} {
		before := snapshot(t, dir)
		r := tolaria(t, dir, nil, append([]string{"eval"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || (len(tc.args) == 2 && strings.Contains(r.stderr, "--checkpoint")) {
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
	cfg := filepath.Join(run, rundir.ConfigFile)
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
	if err != nil || status.ExitStatus() != 130 || !strings.Contains(stderr.String(), "interrupted") || strings.Contains(stderr.String(), "examples scored") ||
		strings.Contains(stderr.String(), "attempt 1 failed") {
		t.Fatalf("after SIGINT: %v, %v\n%s", status, err, stderr)
	}
	if want := "continue with tolaria eval --resume --run-dir " + run + " --workers 2"; !strings.Contains(stderr.String(), want) {
		t.Errorf("after SIGINT, stderr lacks %q:\n%s", want, stderr)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("worker %d outlived tolaria eval", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(run, eval.JSONFile)); !os.IsNotExist(err) {
		t.Errorf("an interrupted evaluation left eval.json: %v", err)
	}
}

// evalWorkerPIDs reads the pids of the shards' workers from the header
// line of each start in their logs.
func evalWorkerPIDs(t *testing.T, run string) []int {
	t.Helper()
	return pidsInLogs(filepath.Join(run, eval.Dir, "shard-*.log"), `tolaria-worker pid (\d+) started`)
}

// evalTextModel is a one-block character transformer over windows of 16
// bytes, small enough to train for an epoch in a moment.
const evalTextModel = `dataset: text
context: 16
epochs: 1
batch_size: 8
lr: 0.003
log_every: 1000
model:
  input: [16]
  layers:
    - embedding: {vocab: 256, dim: 16}
    - positional: {}
    - transformer_block: {heads: 2, mlp: 32}
    - layernorm: {}
    - lm_head: {}
  loss: cross_entropy
`

// TestShardedEvalOfATokenModel: a character transformer's run, trained on
// a directory of text files, is evaluated window by window; eval.json with
// 1 and 3 workers is the same byte for byte but for the number of workers
// and the wall time; its figures are per token and per position (16
// accuracies in [0, 1]); and they are the training summary's test figures
// for the final checkpoint (the accuracy exactly, the loss to float32's
// precision).
func TestShardedEvalOfATokenModel(t *testing.T) {
	dir := t.TempDir()
	corpus, size := writeTwoFileCorpus(t, dir, "corpus", 40)
	run := trainTextRun(t, dir, corpus)
	valid := size / 10 // the default validation fraction, from the corpus's end
	windows := (valid-17)/16 + 1
	var first []byte
	var one eval.Report
	for _, n := range []string{"1", "3"} {
		r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", n)
		if r.code != 0 {
			t.Fatalf("eval --workers %s: exit %d\n%s", n, r.code, r.stderr)
		}
		for _, want := range []string{"token accuracy", "nats/token", "bits/byte", "accuracy by position (of 16): 0: ", "results "} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("eval --workers %s: stdout lacks %q:\n%s", n, want, r.stdout)
			}
		}
		if !strings.Contains(r.stderr, "windows of 16 tokens") || strings.Count(r.stderr, "windows scored") != map[string]int{"1": 1, "3": 3}[n] {
			t.Errorf("eval --workers %s: stderr does not count windows, one progress line per shard:\n%s", n, r.stderr)
		}
		raw, err := os.ReadFile(filepath.Join(run, eval.JSONFile))
		if err != nil {
			t.Fatal(err)
		}
		if n == "1" {
			first, one = raw, readEval(t, run)
			continue
		}
		if got, want := withoutRunFacts(string(raw)), withoutRunFacts(string(first)); got != want {
			t.Errorf("eval.json with 3 workers:\n%s\nwith 1:\n%s", got, want)
		}
		if readEval(t, run).Workers != 3 {
			t.Errorf("eval.json with 3 workers says %d", readEval(t, run).Workers)
		}
	}
	seq := one.Sequence
	if seq == nil || one.Samples != windows || seq.Positions != 16 || seq.Tokens != windows*16 || one.PerClass != nil || one.Confusion != nil {
		t.Fatalf("eval.json of a token model: %+v (sequence %+v); want %d windows of 16 positions", one, seq, windows)
	}
	if len(seq.PositionAccuracy) != 16 || len(seq.PositionLoss) != 16 {
		t.Fatalf("per-position figures of length %d and %d; want 16", len(seq.PositionAccuracy), len(seq.PositionLoss))
	}
	correct := 0.0
	for p, acc := range seq.PositionAccuracy {
		if acc < 0 || acc > 1 || !(seq.PositionLoss[p] > 0) {
			t.Errorf("position %d: accuracy %v, loss %v", p, acc, seq.PositionLoss[p])
		}
		correct += acc * float64(windows)
	}
	if math.Abs(correct-float64(one.Correct)) > 1e-6 || !closeTo(seq.BitsPerByte, one.Loss/math.Ln2, 1e-15) {
		t.Errorf("per-position accuracies add up to %v correct, eval.json says %d; bits per byte %v for %v nats", correct, one.Correct, seq.BitsPerByte, one.Loss)
	}
	tooMany := strconv.Itoa(windows + 1)
	if r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", tooMany); r.code != 2 || !strings.Contains(r.stderr, "windows of the test split") {
		t.Errorf("eval --workers %s for %d windows: exit %d, want 2\n%s", tooMany, windows, r.code, r.stderr)
	}
	sum := readSummary(t, filepath.Join(run, rundir.SummaryFile))
	t.Logf("eval loss %.10f, accuracy %.6f; training summary: %.10f, %.6f", one.Loss, one.Accuracy, sum.TestLoss, sum.TestAccuracy)
	if one.Accuracy != sum.TestAccuracy || !closeTo(one.Loss, sum.TestLoss, 1e-6) {
		t.Errorf("eval: accuracy %v, loss %v; the training summary: %v, %v", one.Accuracy, one.Loss, sum.TestAccuracy, sum.TestLoss)
	}
}

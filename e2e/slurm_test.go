package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
)

// The one-node Slurm cluster the tests share (scripts/slurm-up.sh): one
// per machine at a time, started by the first test that needs it and
// stopped by TestMain.
var slurm struct {
	once sync.Once
	dir  string
	conf string // SLURM_CONF, "" when it could not start
	err  string
}

// slurmEnv starts the cluster once and returns the environment that
// reaches it. Without one the test skips, or fails when
// TOLARIA_E2E_REQUIRE_SLURM is set (as make test sets it).
func slurmEnv(t *testing.T) []string {
	t.Helper()
	slurm.once.Do(func() {
		dir, err := os.MkdirTemp("", "tolaria-e2e-slurm-")
		if err != nil {
			slurm.err = err.Error()
			return
		}
		var out, errb bytes.Buffer
		cmd := exec.Command(filepath.Join(repoRoot(), "scripts/slurm-up.sh"), dir)
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			slurm.err = strings.TrimSpace(errb.String())
			os.RemoveAll(dir)
			return
		}
		slurm.dir, slurm.conf = dir, filepath.Join(dir, "slurm.conf")
	})
	if slurm.conf == "" {
		if os.Getenv("TOLARIA_E2E_REQUIRE_SLURM") != "" {
			t.Fatalf("the one-node Slurm cluster did not start (scripts/slurm-up.sh): %s", slurm.err)
		}
		t.Skipf("no Slurm cluster (scripts/slurm-up.sh: %s)", slurm.err)
	}
	return []string{"SLURM_CONF=" + slurm.conf}
}

// stopSlurm stops the cluster if a test started it.
func stopSlurm() {
	if slurm.dir != "" {
		_ = exec.Command(filepath.Join(repoRoot(), "scripts/slurm-down.sh"), slurm.dir).Run()
	}
}

// slurmSweep is three short CPU trials.
const slurmSweep = `
base:
  dataset: synthetic
  synthetic_size: 1024
  epochs: 2
  batch_size: 32
  model: {hidden: [32, 16]}
trials:
  - {name: a, lr: 0.01}
  - {name: b, lr: 0.02}
  - {name: c, lr: 0.03}
`

// TestSlurmSweepMatchesLocal: a sweep of three CPU trials through the
// cluster, two at a time, ends with the parameters of the same sweep run
// here, each trial's worker log in its run directory names its Slurm task,
// and the array's batch script is kept.
func TestSlurmSweepMatchesLocal(t *testing.T) {
	env := slurmEnv(t)
	dir := t.TempDir()
	file := writeSweepFile(t, dir, slurmSweep)
	params := localParams(t, dir, file)
	r := tolaria(t, dir, env, "sweep", file, "--launcher", "slurm", "--parallel", "2", "--sweep-dir", filepath.Join(dir, "slurm"))
	if r.code != 0 {
		t.Fatalf("slurm sweep: exit %d\n%s", r.code, r.stderr)
	}
	got := readSweepResults(t, filepath.Join(dir, "slurm"))
	for _, tr := range got.Trials {
		if tr.State != sweep.TrialSucceeded || tr.Summary == nil || tr.Summary.ParamsSHA256 != params[tr.Name] || params[tr.Name] == "" {
			t.Errorf("trial %s through Slurm: %s, %+v; want succeeded with the local params %s", tr.Name, tr.State, tr.Summary, params[tr.Name])
			continue
		}
		log, _ := os.ReadFile(filepath.Join(dir, "slurm", tr.Name, "worker.log"))
		if !strings.Contains(string(log), "tolaria-worker: slurm job ") || !strings.Contains(string(log), "serving through the spool") {
			t.Errorf("trial %s's worker.log does not show its Slurm task:\n%s", tr.Name, log)
		}
	}
	if len(got.Trials) != 3 {
		t.Fatalf("%d trials in results.json, want 3", len(got.Trials))
	}
	scripts, _ := filepath.Glob(filepath.Join(dir, "slurm", "slurm", "submit-*.sh"))
	if len(scripts) != 1 {
		t.Errorf("batch scripts %v, want the one array's", scripts)
	}
}

// longSlurmSweep is two trials of a few seconds, long enough to be
// cancelled after their first checkpoint.
const longSlurmSweep = `
base:
  dataset: synthetic
  synthetic_size: 4096
  epochs: 4
  batch_size: 32
  model: {hidden: [256, 128]}
trials:
  - {name: first}
  - {name: second, lr: 0.02}
`

// TestSlurmCancelledTask: a task cancelled with scancel after its trial's
// first checkpoint is a failed attempt with reason cancelled; with
// --retries 1 it is submitted again, resumes from the checkpoint and ends
// with the parameters of a trial never cancelled, and the other trial is
// untouched; without retries the sweep exits 3 and results.json says why.
func TestSlurmCancelledTask(t *testing.T) {
	env := slurmEnv(t)
	dir := t.TempDir()
	file := writeSweepFile(t, dir, longSlurmSweep)
	params := localParams(t, dir, file)
	for _, retries := range []string{"1", "0"} {
		sweepDir := filepath.Join(dir, "slurm-retries-"+retries)
		cmd, done, stderr := sweepToFirstCheckpoint(t, dir, env, sweepDir, file, "--retries", retries)
		task := slurmTaskOf(t, env, 0)
		scancel := exec.Command("scancel", task)
		scancel.Env = append(os.Environ(), env...)
		if out, err := scancel.CombinedOutput(); err != nil {
			t.Fatalf("scancel %s: %v: %s", task, err, out)
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(3 * time.Minute):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			t.Fatalf("the sweep did not end:\n%s", stderr)
		}
		res := readSweepResults(t, sweepDir)
		byName := map[string]sweep.TrialResult{}
		for _, tr := range res.Trials {
			byName[tr.Name] = tr
		}
		first, second := byName["first"], byName["second"]
		if second.State != sweep.TrialSucceeded || second.Summary.ParamsSHA256 != params["second"] {
			t.Errorf("retries %s: the other trial: %s %+v; want succeeded with %s", retries, second.State, second.Summary, params["second"])
		}
		if retries == "1" {
			if err != nil || first.State != sweep.TrialSucceeded || first.Attempts != 2 || first.Summary.ParamsSHA256 != params["first"] ||
				!strings.Contains(stderr.String(), "CANCELLED") || first.Summary.ResumedFromStep == 0 {
				t.Fatalf("retries 1: exit %v, first trial %s after %d attempts (resumed from step %d), params %v; want succeeded on the second attempt, resumed, with %s\n%s",
					err, first.State, first.Attempts, summaryStep(first), first.Summary, params["first"], stderr)
			}
			continue
		}
		var ee *exec.ExitError
		if !asExit(err, &ee) || ee.ExitCode() != 3 || first.State != sweep.TrialFailed || !strings.Contains(first.Reason, "CANCELLED") {
			t.Fatalf("retries 0: exit %v, first trial %s (%s); want exit 3 and the trial failed, cancelled\n%s", err, first.State, first.Reason, stderr)
		}
	}
}

func summaryStep(tr sweep.TrialResult) int {
	if tr.Summary == nil {
		return -1
	}
	return tr.Summary.ResumedFromStep
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// slurmTaskOf is the id (job_index) of the running task of array index i.
func slurmTaskOf(t *testing.T, env []string, i int) string {
	t.Helper()
	var task string
	waitFor(t, "the task's id in squeue", func() bool {
		cmd := exec.Command("squeue", "-h", "-t", "RUNNING", "-o", "%i")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			return false
		}
		for _, id := range strings.Fields(string(out)) {
			if strings.HasSuffix(id, "_"+string(rune('0'+i))) {
				task = id
				return true
			}
		}
		return false
	})
	return task
}

// TestSlurmSweepInterrupted: Ctrl-C checkpoints the running trial through
// its spool, and the task still queued runs no worker (it trains nothing,
// even when Slurm starts it as the running one's task ends), leaving
// nothing of the array in Slurm's queue (exit 130); --resume finishes
// both trials with the parameters of a sweep never interrupted.
func TestSlurmSweepInterrupted(t *testing.T) {
	env := slurmEnv(t)
	dir := t.TempDir()
	file := writeSweepFile(t, dir, longSlurmSweep)
	want := localParams(t, dir, file)
	sweepDir := filepath.Join(dir, "slurm")
	cmd, done, stderr := sweepToFirstCheckpoint(t, dir, env, sweepDir, file, "--parallel", "1")
	_ = cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		t.Fatalf("the sweep did not stop on SIGINT:\n%s", stderr)
	}
	var ee *exec.ExitError
	if !asExit(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted sweep: %v, want exit 130\n%s", err, stderr)
	}
	squeue := exec.Command("squeue", "-h", "-o", "%i %T")
	squeue.Env = append(os.Environ(), env...)
	if out, err := squeue.Output(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("Slurm still queues or runs after the sweep ended: %q, %v", out, err)
	}
	var second sweep.TrialResult
	for _, tr := range readSweepResults(t, sweepDir).Trials {
		if tr.State != sweep.TrialInterrupted || (tr.Name == "first") != strings.Contains(tr.Reason, "checkpoint saved") {
			t.Errorf("trial %s: %s (%s), want interrupted, and the running one checkpointed", tr.Name, tr.State, tr.Reason)
		}
		if tr.Name == "second" {
			second = tr
		}
	}
	// The second trial's task was queued behind the first (--parallel 1):
	// cancelled in the queue, or started by Slurm as the first one's ended
	// and then exiting at the interrupt's mark, it ran no worker.
	log, _ := os.ReadFile(filepath.Join(sweepDir, "second", "worker.log"))
	_, ckErr := os.Stat(filepath.Join(sweepDir, "second", "checkpoint.tlck"))
	if !strings.Contains(second.Reason, "before its worker started") || ckErr == nil || strings.Contains(string(log), "serving through the spool") {
		t.Errorf("the queued trial: %q, checkpoint %v; want interrupted before its worker started, with no checkpoint and no worker in its log:\n%s",
			second.Reason, ckErr == nil, log)
	}
	r := tolaria(t, dir, env, "sweep", "--resume", "--sweep-dir", sweepDir, "--launcher", "slurm")
	if r.code != 0 {
		t.Fatalf("resumed sweep: exit %d\n%s", r.code, r.stderr)
	}
	for _, tr := range readSweepResults(t, sweepDir).Trials {
		if tr.State != sweep.TrialSucceeded || tr.Summary.ParamsSHA256 != want[tr.Name] {
			t.Errorf("resumed trial %s: %s %+v, want succeeded with %s", tr.Name, tr.State, tr.Summary, want[tr.Name])
		}
	}
}

// TestSlurmEval: a sharded evaluation through the cluster, a task per
// shard, merges into the same figures as one run here.
func TestSlurmEval(t *testing.T) {
	env := slurmEnv(t)
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, quick(run)...); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	figures := func(args ...string) string {
		t.Helper()
		r := tolaria(t, dir, env, append([]string{"eval", "--run-dir", run, "--workers", "3"}, args...)...)
		if r.code != 0 {
			t.Fatalf("eval %v: exit %d\n%s", args, r.code, r.stderr)
		}
		var rep eval.Report
		raw, err := os.ReadFile(filepath.Join(run, eval.JSONFile))
		if err == nil {
			err = json.Unmarshal(raw, &rep)
		}
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(rep.Samples, rep.Loss, rep.Accuracy, rep.PerClass, rep.Confusion)
	}
	local := figures()
	if got := figures("--launcher", "slurm"); got != local {
		t.Fatalf("eval through Slurm: %s\nhere: %s", got, local)
	}
	logs, _ := filepath.Glob(filepath.Join(run, eval.Dir, "shard-*.log"))
	for _, l := range logs {
		if raw, _ := os.ReadFile(l); !strings.Contains(string(raw), "tolaria-worker: slurm job ") {
			t.Errorf("%s does not show its Slurm task:\n%s", l, raw)
		}
	}
}

// TestSlurmDryRun: --dry-run prints the batch script and the sbatch
// command, needs no Slurm on the machine, and writes nothing.
func TestSlurmDryRun(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, slurmSweep)
	noSlurm := []string{"PATH=" + binDir}
	sweepDir := filepath.Join(dir, "sweep")
	r := tolaria(t, dir, noSlurm, "sweep", file, "--launcher", "slurm", "--dry-run", "--parallel", "2", "--device", "cuda",
		"--partition", "gpu", "--time-limit", "1:00:00", "--sbatch-arg=--mem=4G", "--sweep-dir", sweepDir)
	if r.code != 0 {
		t.Fatalf("sweep --dry-run: exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"sbatch --parsable", "--array=0,1,2%2", "--gres=gpu:1", "--partition=gpu", "--time=1:00:00", "--mem=4G",
		"serve --spool", "0) spool='" + filepath.Join(sweepDir, "a", "spool")} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the dry run does not print %q:\n%s", want, r.stdout)
		}
	}
	if _, err := os.Stat(sweepDir); err == nil {
		t.Errorf("the dry run created %s", sweepDir)
	}
	run := filepath.Join(dir, "run")
	if q := tolaria(t, dir, nil, quick(run)...); q.code != 0 {
		t.Fatalf("train: exit %d\n%s", q.code, q.stderr)
	}
	before := snapshot(t, run)
	r = tolaria(t, dir, noSlurm, "eval", "--run-dir", run, "--workers", "2", "--launcher", "slurm", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "--array=0,1") || !strings.Contains(r.stdout, "shard-1.log") {
		t.Fatalf("eval --dry-run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	sameFiles(t, before, snapshot(t, run))
	if r := tolaria(t, dir, nil, "sweep", file, "--dry-run", "--sweep-dir", sweepDir); r.code != 2 || !strings.Contains(r.stderr, "--dry-run goes with --launcher slurm") {
		t.Fatalf("--dry-run without slurm: exit %d\n%s", r.code, r.stderr)
	}
}

// localParams runs the sweep file with local workers and returns each
// trial's params_sha256.
func localParams(t *testing.T, dir, file string) map[string]string {
	t.Helper()
	local := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", filepath.Join(dir, "local"))
	if local.code != 0 {
		t.Fatalf("local sweep: exit %d\n%s", local.code, local.stderr)
	}
	params := map[string]string{}
	for _, tr := range readSweepResults(t, filepath.Join(dir, "local")).Trials {
		params[tr.Name] = tr.Summary.ParamsSHA256
	}
	return params
}

// sweepToFirstCheckpoint starts a sweep through Slurm and returns once its
// trial "first" has written its first checkpoint, with the command, its
// exit and its stderr.
func sweepToFirstCheckpoint(t *testing.T, dir string, env []string, sweepDir, file string, extra ...string) (*exec.Cmd, chan error, *lockedBuffer) {
	t.Helper()
	args := append([]string{"sweep", file, "--launcher", "slurm", "--sweep-dir", sweepDir}, extra...)
	cmd := exec.Command(filepath.Join(binDir, "tolaria"), args...)
	cmd.Dir, cmd.Env = dir, append(cleanEnv(), env...)
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, "the first trial's first checkpoint", func() bool {
		_, err := os.Stat(filepath.Join(sweepDir, "first", "checkpoint.tlck"))
		return err == nil
	})
	return cmd, done, stderr
}

// hostileDir is a directory name that runs commands (touching marker files
// M1..M4 in the working directory) wherever it reaches a shell unquoted;
// its % would be read by Slurm as one of its file name patterns.
const hostileDir = "sw $(touch M1) `touch M2` ';touch M3;' \"$(touch M4)\" 100%x"

// hostileComment is an sbatch option whose value runs commands if a shell
// reads it.
const hostileComment = "--comment=$(touch M5);touch M6"

// oneTrialSweep is one short CPU trial.
const oneTrialSweep = `
base:
  dataset: synthetic
  synthetic_size: 512
  epochs: 1
  batch_size: 32
  model: {hidden: [16]}
trials:
  - {name: only}
`

// hostileWorker links tolaria-worker under a hostile directory name and
// returns TOLARIA_WORKER naming it there.
func hostileWorker(t *testing.T, dir string) string {
	t.Helper()
	wdir := filepath.Join(dir, "bin $(touch M7) ';touch M8;'")
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(wdir, "tolaria-worker")
	if err := os.Symlink(filepath.Join(binDir, "tolaria-worker"), path); err != nil {
		t.Fatal(err)
	}
	return "TOLARIA_WORKER=" + path
}

// noMarkers fails the test if a hostile value ran: a marker file in dir.
func noMarkers(t *testing.T, dir, what string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(dir, "M[0-9]")); len(m) > 0 {
		t.Fatalf("%s ran a hostile value: %v", what, m)
	}
	if _, err := os.Stat(filepath.Join(dir, "INJECTED")); err == nil {
		t.Fatalf("%s ran the line a newline made", what)
	}
}

// TestSlurmDryRunRunsNoHostileValue: hostile values in the sweep
// directory, the partition, the account, an sbatch option and the worker's
// path (from the environment) come out of --dry-run quoted: the printed
// sbatch command, run by sh, hands sbatch each value byte for byte, and
// the printed script, run as a task, touches nothing. What cannot be
// quoted, a newline in any of them, is refused with exit 2, the setting
// named, and nothing written; so is a backslash in the sweep directory,
// which Slurm drops from the output path it is given.
func TestSlurmDryRunRunsNoHostileValue(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, oneTrialSweep)
	sweepDir := filepath.Join(dir, hostileDir)
	env := []string{"PATH=" + binDir, hostileWorker(t, dir)}
	partition, account := "debug$(touch${IFS}M9)", "acct`touch${IFS}M0`"
	r := tolaria(t, dir, env, "sweep", file, "--launcher", "slurm", "--dry-run", "--partition", partition, "--account", account,
		"--sbatch-arg="+hostileComment, "--sweep-dir", sweepDir)
	if r.code != 0 {
		t.Fatalf("sweep --dry-run: exit %d\n%s", r.code, r.stderr)
	}
	script, command, ok := strings.Cut(r.stdout, "\n# submitted with:\n")
	if !ok {
		t.Fatalf("no sbatch command in the dry run:\n%s", r.stdout)
	}
	// A fake sbatch records its arguments, one per line.
	fake := filepath.Join(dir, "fakebin")
	if err := os.MkdirAll(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	args := filepath.Join(dir, "sbatch-args")
	if err := os.WriteFile(filepath.Join(fake, "sbatch"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > "+"'"+args+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", strings.TrimSpace(command))
	sh.Dir, sh.Env = dir, append(os.Environ(), "PATH="+fake+":/usr/bin:/bin")
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the printed command %s: %v: %s", command, err, out)
	}
	got, _ := os.ReadFile(args)
	for _, want := range []string{"--partition=" + partition, "--account=" + account, hostileComment,
		"--output=" + strings.ReplaceAll(sweepDir, "%", "%%") + "/slurm/slurm-%A_%a.out"} {
		if !slices.Contains(strings.Split(string(got), "\n"), want) {
			t.Errorf("sbatch was not handed %q; it got:\n%s", want, got)
		}
	}
	task := exec.Command("sh", "-c", script)
	task.Dir, task.Env = dir, append(os.Environ(), "SLURM_ARRAY_TASK_ID=99")
	if out, err := task.CombinedOutput(); err == nil || !strings.Contains(string(out), "no worker for array task 99") {
		t.Errorf("the printed script, as a task of no trial: %v: %s", err, out)
	}
	noMarkers(t, dir, "the dry run's command and script")

	for _, c := range []struct {
		flag, why string
		args      []string
	}{
		{"--sweep-dir", "control character", []string{"--sweep-dir", filepath.Join(dir, "sweep\ntouch INJECTED\n#")}},
		{"--sweep-dir", "backslash", []string{"--sweep-dir", filepath.Join(dir, `back\slash`)}},
		{"--partition", "control character", []string{"--partition", "debug\n#SBATCH --wrap=touch INJECTED"}},
		{"--account", "control character", []string{"--account", "a\x7f"}},
		{"--time-limit", "control character", []string{"--time-limit", "1:00\r"}},
		{"--sbatch-arg", "control character", []string{"--sbatch-arg=--comment=x\ntouch INJECTED"}},
	} {
		before := snapshot(t, dir)
		r := tolaria(t, dir, env, append([]string{"sweep", file, "--launcher", "slurm", "--dry-run"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.flag+": ") || !strings.Contains(r.stderr, c.why) || r.stdout != "" {
			t.Errorf("%s with a %s: exit %d, want 2 naming it:\n%s%s", c.flag, c.why, r.code, r.stdout, r.stderr)
		}
		sameFiles(t, before, snapshot(t, dir))
	}
}

// TestSlurmRunsNoHostileValue: through the one-node cluster, a sweep in a
// hostile directory, with a hostile sbatch option and worker path, trains
// its trial and runs nothing else; a hostile partition is handed to
// sbatch, which refuses it, and runs nothing; a sweep directory holding a
// newline is refused with exit 2 before anything is written (its batch
// script first of all).
func TestSlurmRunsNoHostileValue(t *testing.T) {
	env := slurmEnv(t)
	dir := t.TempDir()
	file := writeSweepFile(t, dir, oneTrialSweep)
	env = append(env, hostileWorker(t, dir))
	sweepDir := filepath.Join(dir, hostileDir)
	r := tolaria(t, dir, env, "sweep", file, "--launcher", "slurm", "--sbatch-arg="+hostileComment, "--sweep-dir", sweepDir)
	if r.code != 0 {
		t.Fatalf("hostile sweep directory through Slurm: exit %d\n%s", r.code, r.stderr)
	}
	if res := readSweepResults(t, sweepDir); len(res.Trials) != 1 || res.Trials[0].State != sweep.TrialSucceeded {
		t.Fatalf("the trial: %+v, want succeeded", res.Trials)
	}
	log, _ := os.ReadFile(filepath.Join(sweepDir, "only", "worker.log"))
	if !strings.Contains(string(log), "tolaria-worker: slurm job ") {
		t.Errorf("the trial's worker.log does not show its Slurm task:\n%s", log)
	}
	noMarkers(t, dir, "the sweep's Slurm task")

	r = tolaria(t, dir, env, "sweep", file, "--launcher", "slurm", "--partition", "debug$(touch${IFS}M9)", "--retries", "0", "--sweep-dir", filepath.Join(dir, "bad-partition"))
	if r.code == 0 {
		t.Errorf("a partition that does not exist was accepted:\n%s", r.stderr)
	}
	noMarkers(t, dir, "sbatch with a hostile partition")

	before := snapshot(t, dir)
	r = tolaria(t, dir, env, "sweep", file, "--launcher", "slurm", "--sweep-dir", filepath.Join(dir, "sweep\ntouch INJECTED\n#"))
	if r.code != 2 || !strings.Contains(r.stderr, "--sweep-dir: ") || !strings.Contains(r.stderr, "control character") {
		t.Errorf("a sweep directory holding newlines: exit %d, want 2 naming --sweep-dir:\n%s", r.code, r.stderr)
	}
	sameFiles(t, before, snapshot(t, dir))
	noMarkers(t, dir, "a refused sweep")
}

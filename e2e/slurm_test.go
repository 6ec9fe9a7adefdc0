package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator"
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
		if tr.State != coordinator.TrialSucceeded || tr.Summary == nil || tr.Summary.ParamsSHA256 != params[tr.Name] || params[tr.Name] == "" {
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
		byName := map[string]coordinator.TrialResult{}
		for _, tr := range res.Trials {
			byName[tr.Name] = tr
		}
		first, second := byName["first"], byName["second"]
		if second.State != coordinator.TrialSucceeded || second.Summary.ParamsSHA256 != params["second"] {
			t.Errorf("retries %s: the other trial: %s %+v; want succeeded with %s", retries, second.State, second.Summary, params["second"])
		}
		if retries == "1" {
			if err != nil || first.State != coordinator.TrialSucceeded || first.Attempts != 2 || first.Summary.ParamsSHA256 != params["first"] ||
				!strings.Contains(stderr.String(), "CANCELLED") || first.Summary.ResumedFromStep == 0 {
				t.Fatalf("retries 1: exit %v, first trial %s after %d attempts (resumed from step %d), params %v; want succeeded on the second attempt, resumed, with %s\n%s",
					err, first.State, first.Attempts, summaryStep(first), first.Summary, params["first"], stderr)
			}
			continue
		}
		var ee *exec.ExitError
		if !asExit(err, &ee) || ee.ExitCode() != 3 || first.State != coordinator.TrialFailed || !strings.Contains(first.Reason, "CANCELLED") {
			t.Fatalf("retries 0: exit %v, first trial %s (%s); want exit 3 and the trial failed, cancelled\n%s", err, first.State, first.Reason, stderr)
		}
	}
}

func summaryStep(tr coordinator.TrialResult) int {
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
// its spool and cancels the task still queued, leaving nothing of the
// array in Slurm's queue (exit 130); --resume finishes both trials with
// the parameters of a sweep never interrupted.
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
	for _, tr := range readSweepResults(t, sweepDir).Trials {
		// The second trial's task was queued; it may have started as the
		// first one's ended, but not trained.
		if tr.State != coordinator.TrialInterrupted || (tr.Name == "first") != strings.Contains(tr.Reason, "checkpoint saved") {
			t.Errorf("trial %s: %s (%s), want interrupted, and the running one checkpointed", tr.Name, tr.State, tr.Reason)
		}
	}
	r := tolaria(t, dir, env, "sweep", "--resume", "--sweep-dir", sweepDir, "--launcher", "slurm")
	if r.code != 0 {
		t.Fatalf("resumed sweep: exit %d\n%s", r.code, r.stderr)
	}
	for _, tr := range readSweepResults(t, sweepDir).Trials {
		if tr.State != coordinator.TrialSucceeded || tr.Summary.ParamsSHA256 != want[tr.Name] {
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
		var rep coordinator.EvalReport
		raw, err := os.ReadFile(filepath.Join(run, coordinator.EvalJSON))
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
	logs, _ := filepath.Glob(filepath.Join(run, coordinator.EvalDir, "shard-*.log"))
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

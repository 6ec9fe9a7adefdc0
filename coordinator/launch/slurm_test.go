package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// planTrial plans a sweep trial's first attempt: its spools and its
// worker.log in its run directory.
func (l *slurmLauncher) planTrial(index int, runDir string) {
	l.plan(index, filepath.Join(runDir, "spool"), filepath.Join(runDir, "worker.log"))
}

// TestParseScontrol: one line per task that has started, and one for the
// range still pending, as `scontrol -o show job` prints them; each state
// maps to its phase and reason.
func TestParseScontrol(t *testing.T) {
	out := strings.Join([]string{
		"JobId=1 ArrayJobId=1 ArrayTaskId=5-7%2 JobState=PENDING Reason=JobArrayTaskLimit ExitCode=0:0",
		"JobId=2 ArrayJobId=1 ArrayTaskId=0 JobState=COMPLETED Reason=None ExitCode=0:0",
		"JobId=3 ArrayJobId=1 ArrayTaskId=1 JobState=CANCELLED Reason=None ExitCode=0:15",
		"JobId=4 ArrayJobId=1 ArrayTaskId=2 JobState=FAILED Reason=NonZeroExitCode ExitCode=2:0",
		"JobId=5 ArrayJobId=1 ArrayTaskId=3 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15",
		"JobId=6 ArrayJobId=1 ArrayTaskId=4 JobState=RUNNING Reason=None ExitCode=0:0",
		"JobId=7 ArrayJobId=1 ArrayTaskId=8 JobState=NODE_FAIL Reason=NodeDown ExitCode=0:0",
		"JobId=8 ArrayJobId=1 ArrayTaskId=9 JobState=FAILED Reason=NonZeroExitCode ExitCode=0:9",
		"",
	}, "\n")
	got, err := parseScontrol(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]struct {
		phase  worker.TaskPhase
		reason string
	}{
		0: {worker.TaskEnded, ""},
		1: {worker.TaskEnded, worker.ReasonCancelled},
		2: {worker.TaskEnded, worker.ReasonExit},
		3: {worker.TaskEnded, worker.ReasonTimeLimit},
		4: {worker.TaskRunning, ""},
		5: {worker.TaskPending, ""}, 6: {worker.TaskPending, ""}, 7: {worker.TaskPending, ""},
		8: {worker.TaskEnded, worker.ReasonNodeFail},
		9: {worker.TaskEnded, worker.ReasonCrashed},
	}
	if len(got) != len(want) {
		t.Fatalf("%d tasks, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if g := got[i]; g.Phase != w.phase || g.Reason != w.reason || !strings.Contains(g.Detail, "state ") {
			t.Errorf("task %d: %+v, want phase %d reason %q", i, g, w.phase, w.reason)
		}
	}
	if _, err := parseScontrol("JobId=1 ArrayTaskId=x-2 JobState=PENDING"); err == nil {
		t.Error("a malformed ArrayTaskId was accepted")
	}
}

func TestArrayIndices(t *testing.T) {
	for in, want := range map[string][]int{
		"3": {3}, "0-2%2": {0, 1, 2}, "1,3-5": {1, 3, 4, 5}, "0-6:3": {0, 3, 6}, "N/A": nil,
	} {
		got, err := arrayIndices(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("arrayIndices(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestSlurmScriptAndCommand: the batch script maps each array index to
// its trial's spool and log, waits for the request, and runs the worker on
// it; sbatch gets the array with its limit, the options asked for, and a
// GPU per task on CUDA.
func TestSlurmScriptAndCommand(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	l := &slurmLauncher{cfg: SlurmConfig{Partition: "gpu", TimeLimit: "1:00:00", Args: []string{"--mem=8G"}}, dir: filepath.Join(dir, "slurm"),
		worker: "/opt/tolaria/bin/tolaria-worker", device: "cuda", parallel: 2, token: "tok", first: map[int]slurmTask{}, firstState: map[int]firstState{}}
	for i, name := range []string{"a", "b'quoted", "c"} {
		l.planTrial(i, filepath.Join(dir, name))
	}
	script, cmd := l.dryRun()
	for _, want := range []string{
		"0) spool='" + filepath.Join(dir, "a", "spool", "tok-1") + "'",
		`1) spool='` + filepath.Join(dir, "b'\\''quoted", "spool", "tok-1") + `'`,
		`while [ ! -e "$spool/` + worker.SpoolIn + `" ]`,
		`exec '/opt/tolaria/bin/tolaria-worker' serve --spool "$spool" >>"$log" 2>&1`,
	} {
		if !strings.Contains(script, want) {
			t.Errorf("the script lacks %q:\n%s", want, script)
		}
	}
	for _, want := range []string{"--array=0,1,2%2", "--gres=gpu:1", "--partition=gpu", "--time=1:00:00", "--mem=8G", "--parsable", "--open-mode=append"} {
		if !slices.Contains(cmd, want) {
			t.Errorf("sbatch %v lacks %s", cmd, want)
		}
	}
	// The script is valid sh, and task 1 finds its spool.
	path := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", path).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v: %s", err, out)
	}
	spool := filepath.Join(dir, "b'quoted", "spool", "tok-1")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, worker.SpoolIn), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "fake-worker")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"serving $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l.worker = fake
	script, _ = l.dryRun()
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	run := exec.Command("sh", path)
	run.Env = append(os.Environ(), "SLURM_ARRAY_TASK_ID=1", "SLURM_ARRAY_JOB_ID=12")
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("task 1: %v: %s", err, out)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "b'quoted", "worker.log"))
	if !strings.Contains(string(log), "slurm job 12_1") || !strings.Contains(string(log), "serving serve --spool "+spool) {
		t.Fatalf("task 1's worker.log:\n%s", log)
	}
	run = exec.Command("sh", path)
	run.Env = append(os.Environ(), "SLURM_ARRAY_TASK_ID=7")
	if out, err := run.CombinedOutput(); err == nil || !strings.Contains(string(out), "no worker for array task 7") {
		t.Fatalf("an index the array does not have: %v: %s", err, out)
	}
}

func TestSlurmConfigRefuses(t *testing.T) {
	for _, c := range []struct {
		cfg   SlurmConfig
		field field.Name
	}{
		{SlurmConfig{Args: []string{"mem=8G"}}, "sbatch_args"},
		{SlurmConfig{Args: []string{"--array=0-3"}}, "sbatch_args"},
		{SlurmConfig{Args: []string{"--output=x"}}, "sbatch_args"},
		{SlurmConfig{Partition: "a b"}, "partition"},
		{SlurmConfig{Account: "x'y"}, "account"},
	} {
		if err := c.cfg.Validate(); !field.Is(err, c.field) {
			t.Errorf("%+v: %v; want a refusal of %s", c.cfg, err, c.field)
		}
	}
	if err := (SlurmConfig{Partition: "gpu", Args: []string{"--mem=8G", "--qos=low"}}).Validate(); err != nil {
		t.Errorf("a good configuration: %v", err)
	}
}

// hostile are values that run a command (touching a marker file in the
// working directory) if they reach a shell unquoted: command
// substitutions, a closing quote, a separator, a variable, a glob.
var hostile = []string{"$(touch M1)", "`touch M2`", "x'; touch M3; '", `"; touch M4; "`, "a;touch M5", "${IFS}$(touch${IFS}M6)", `\'$(touch M7)`, "*", "100%done"}

// TestSlurmScriptRunsNoHostileValue: a sweep directory, trial names and a
// worker path made of the hostile values go into the batch script quoted:
// the script, run as Slurm runs it, touches no marker and hands the worker
// its spool byte for byte; Slurm's own output path keeps a % as %%.
func TestSlurmScriptRunsNoHostileValue(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	tmp := t.TempDir()
	cwd := filepath.Join(tmp, "cwd")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	// A backslash goes in trial names only: Slurm cannot take one in the
	// sweep directory (see TestSlurmRefusesWhatCannotBeQuoted).
	var inDir []string
	for _, h := range hostile {
		if !strings.Contains(h, `\`) {
			inDir = append(inDir, h)
		}
	}
	sweepDir := filepath.Join(tmp, strings.Join(inDir, "-"))
	fake := filepath.Join(tmp, "bin "+hostile[0], "worker"+hostile[2])
	if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nprintf '%s' \"$3\" > \"$3/served\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := newSlurmLauncher(SlurmConfig{}, filepath.Join(sweepDir, "slurm"), fake, "cpu", 0, true)
	if err != nil {
		t.Fatalf("quotable values: %v", err)
	}
	for i, name := range hostile {
		if name == "*" {
			continue // not a directory name to create here
		}
		l.planTrial(i, filepath.Join(sweepDir, name))
	}
	script, cmd := l.dryRun()
	if !slices.Contains(cmd, "--output="+strings.ReplaceAll(sweepDir, "%", "%%")+"/slurm/slurm-%A_%a.out") {
		t.Errorf("sbatch %q: --output does not escape the directory's %%", cmd)
	}
	path := filepath.Join(tmp, "script.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, name := range hostile {
		if name == "*" {
			continue
		}
		spool := filepath.Join(sweepDir, name, "spool", l.token+"-1")
		if err := os.MkdirAll(spool, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(spool, worker.SpoolIn), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		run := exec.Command("sh", path)
		run.Dir, run.Env = cwd, append(os.Environ(), fmt.Sprintf("SLURM_ARRAY_TASK_ID=%d", i), "SLURM_ARRAY_JOB_ID=1")
		if out, err := run.CombinedOutput(); err != nil {
			t.Fatalf("task %d (%q): %v: %s", i, name, err, out)
		}
		if got, _ := os.ReadFile(filepath.Join(spool, "served")); string(got) != spool {
			t.Errorf("task %d: the worker served %q, want %q", i, got, spool)
		}
	}
	if left, _ := os.ReadDir(cwd); len(left) > 0 {
		t.Fatalf("the script ran a hostile value: %s holds %v\n%s", cwd, left, script)
	}
}

// TestSlurmRefusesWhatCannotBeQuoted: no quoting keeps a newline from
// ending a line of the batch script (the comment naming the sweep
// directory once turned its second line into a command every task ran),
// nor a NUL; such values, and other control characters, are refused with
// the setting named, before a launcher exists, so nothing is written.
func TestSlurmRefusesWhatCannotBeQuoted(t *testing.T) {
	tmp := t.TempDir()
	cwd := filepath.Join(tmp, "cwd")
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	injected := filepath.Join(tmp, "sweep\ntouch INJECTED\n#")
	l, err := newSlurmLauncher(SlurmConfig{}, filepath.Join(injected, "slurm"), "/bin/true", "cpu", 0, true)
	if err == nil {
		// Show what it would have done: the script, run as a task.
		l.plan(0, filepath.Join(tmp, "spool"), filepath.Join(tmp, "log"))
		script, _ := l.dryRun()
		run := exec.Command("sh", "-c", script)
		run.Dir, run.Env = cwd, append(os.Environ(), "SLURM_ARRAY_TASK_ID=7")
		_ = run.Run()
		_, touched := os.Stat(filepath.Join(cwd, "INJECTED"))
		t.Fatalf("a sweep directory holding newlines was taken (the script touched the marker: %v):\n%s", touched == nil, script)
	}
	if !errors.Is(err, refusal.ErrConfig) {
		t.Errorf("a directory holding a newline: %v, want a configuration error", err)
	}
	if _, err := newSlurmLauncher(SlurmConfig{}, filepath.Join(tmp, "slurm"), "/opt/w\n/tolaria-worker", "cpu", 0, true); !field.Is(err, "worker") {
		t.Errorf("a worker path holding a newline: %v, want a refusal of worker", err)
	}
	if _, err := newSlurmLauncher(SlurmConfig{}, filepath.Join(tmp, `back\slash`, "slurm"), "/bin/true", "cpu", 0, true); !errors.Is(err, refusal.ErrConfig) {
		t.Errorf("a launcher's directory holding a backslash: %v, want a refusal", err)
	}
	for _, c := range []struct {
		cfg   SlurmConfig
		field field.Name
	}{
		{SlurmConfig{Partition: "gpu\n#SBATCH --wrap=touch"}, "partition"},
		{SlurmConfig{Account: "acct\x00"}, "account"},
		{SlurmConfig{TimeLimit: "1:00:00\r"}, "time_limit"},
		{SlurmConfig{Args: []string{"--comment=a\ntouch INJECTED"}}, "sbatch_args"},
		{SlurmConfig{Args: []string{"--out=/tmp/x"}}, "sbatch_args"},
		{SlurmConfig{Args: []string{"--arr=1-2"}}, "sbatch_args"},
		{SlurmConfig{Args: []string{"-o/tmp/x"}}, "sbatch_args"},
		{SlurmConfig{Args: []string{"-J", "x"}}, "sbatch_args"},
	} {
		if err := c.cfg.Validate(); !field.Is(err, c.field) || !errors.Is(err, refusal.ErrConfig) {
			t.Errorf("%q: %v; want a refusal of %s", c.cfg, err, c.field)
		}
	}
	if err := (SlurmConfig{Args: []string{"--comment=$(touch M)", "--mem=8G", "--exclusive", "-N1"}}).Validate(); err != nil {
		t.Errorf("quotable sbatch options: %v", err)
	}
}

// TestSlurmInterruptHoldsBackQueuedTasks: a Ctrl-C makes the launcher's
// mark before the attempts hear of it, so that the task an array's %
// limit kept queued, which Slurm starts as soon as a stopping worker's
// task ends, runs no worker; after it nothing is submitted, but a task of
// the array already in is claimed (and followed to its end); an earlier
// run's mark stops none of a resumed sweep's tasks.
func TestSlurmInterruptHoldsBackQueuedTasks(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-worker")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"serving $*\"\n: >\"$3/served\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	launcher := func() *slurmLauncher {
		l, err := newSlurmLauncher(SlurmConfig{}, filepath.Join(dir, "slurm"), fake, "cpu", 1, true)
		if err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"running", "queued"} {
			l.planTrial(i, filepath.Join(dir, name))
		}
		return l
	}
	l := launcher()
	spool := filepath.Join(dir, "queued", "spool", l.token+"-1")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, worker.SpoolIn), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	script, _ := l.dryRun()
	path := filepath.Join(dir, "script.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	runTask := func() string {
		t.Helper()
		_ = os.Remove(filepath.Join(spool, "served"))
		run := exec.Command("sh", path)
		run.Env = append(os.Environ(), "SLURM_ARRAY_TASK_ID=1", "SLURM_ARRAY_JOB_ID=12")
		if out, err := run.CombinedOutput(); err != nil {
			t.Fatalf("the queued task: %v: %s", err, out)
		}
		if _, err := os.Stat(filepath.Join(spool, "served")); err == nil {
			return "served"
		}
		log, _ := os.ReadFile(filepath.Join(dir, "queued", "worker.log"))
		return string(log)
	}
	l.arrayID = "12" // the array is in: the running trial's attempt submitted it
	if _, err := l.transport(0, filepath.Join(dir, "running", "spool"), filepath.Join(dir, "running", "worker.log"), 1, 0, 0).Start(context.Background()); err != nil {
		t.Fatal(err)
	}

	parent, cancel := context.WithCancelCause(context.Background())
	ctx, stop := l.holdBack(parent, func(err error) { t.Errorf("making the mark: %v", err) })
	defer stop()
	marked := make(chan bool, 1)
	context.AfterFunc(ctx, func() {
		_, err := os.Stat(l.noStart())
		marked <- err == nil
	})
	if got := runTask(); got != "served" {
		t.Fatalf("before any interrupt the task did not run its worker; its log:\n%s", got)
	}
	cause := errors.New("stopped by interrupt")
	cancel(cause)
	select {
	case m := <-marked:
		if !m {
			t.Fatal("the attempts heard of the interrupt before the mark was made")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the attempts never heard of the interrupt")
	}
	if context.Cause(ctx) != cause {
		t.Errorf("the attempts' context ended by %v, want the interrupt's cause", context.Cause(ctx))
	}
	// The queued task, started now, exits without its worker.
	if got := runTask(); got == "served" || !strings.Contains(got, "not started: tolaria was interrupted") {
		t.Fatalf("the queued task after the interrupt: %s; want no worker", got)
	}
	// Its trial's attempt, begun after the interrupt, claims its task of
	// the array (sbatch is not run: this launcher is a dry run's).
	if task, err := l.transport(1, filepath.Join(dir, "queued", "spool"), filepath.Join(dir, "queued", "worker.log"), 1, 0, 0).Start(ctx); err != nil || task.String() != "slurm job 12_1" {
		t.Errorf("the first array's task after the interrupt: %v, %v; want it claimed", task, err)
	}
	// A retry submits nothing.
	if _, err := l.transport(0, filepath.Join(dir, "running", "spool"), filepath.Join(dir, "running", "worker.log"), 2, 0, 0).Start(ctx); !errors.Is(err, errSlurmInterrupted) {
		t.Errorf("a retry after the interrupt: %v, want %v", err, errSlurmInterrupted)
	}
	// A resumed sweep's launcher has a token of its own.
	time.Sleep(time.Microsecond)
	l2 := launcher()
	if l2.noStart() == l.noStart() {
		t.Fatalf("two runs share the mark %s", l.noStart())
	}
	spool = filepath.Join(dir, "queued", "spool", l2.token+"-1")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, worker.SpoolIn), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	script, _ = l2.dryRun()
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := runTask(); got != "served" {
		t.Fatalf("a resumed sweep's task did not run its worker; its log:\n%s", got)
	}
}

// TestSlurmHoldBackWithoutInterrupt: a sweep that ends without a Ctrl-C
// makes no mark, and its attempts' context ends with it.
func TestSlurmHoldBackWithoutInterrupt(t *testing.T) {
	l, err := newSlurmLauncher(SlurmConfig{}, filepath.Join(t.TempDir(), "slurm"), "/bin/true", "cpu", 0, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := l.holdBack(context.Background(), nil)
	stop()
	if ctx.Err() == nil {
		t.Error("the attempts' context outlives stop")
	}
	if _, err := os.Stat(l.noStart()); err == nil || l.interrupted {
		t.Errorf("a sweep never interrupted made its mark (%v) or counts as interrupted (%v)", err == nil, l.interrupted)
	}
}

// A command names a launcher, with its settings: an unknown name is
// refused naming the setting and the launchers there are; Slurm's
// settings travel in its Kind, checked with the activity's.
func TestNamed(t *testing.T) {
	if _, err := Named("kubernetes", SlurmConfig{}); !field.Is(err, "launcher") || !strings.Contains(err.Error(), "must be local or slurm") {
		t.Errorf("an unknown launcher: %v", err)
	}
	if k, err := Named("", SlurmConfig{}); err != nil || k.Name != LocalName {
		t.Errorf("no launcher named: %+v, %v; want local", k, err)
	}
	if (Kind{}).OrLocal().Name != LocalName {
		t.Error("the zero Kind is not the local launcher")
	}
	k, err := Named(SlurmName, SlurmConfig{Args: []string{"--array=1"}})
	if err != nil || k.Name != SlurmName {
		t.Fatalf("slurm: %+v, %v", k, err)
	}
	if err := k.Check(Config{Dir: t.TempDir(), DirField: "sweep_dir"}); !field.Is(err, "sbatch_args") {
		t.Errorf("Slurm's settings checked with the activity's: %v, want a refusal of sbatch_args", err)
	}
}

package coordinator

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
)

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

// TestSweepRefusesLocalSettingsWithSlurm: settings about this machine's
// devices make no sense for tasks Slurm places.
func TestSweepRefusesLocalSettingsWithSlurm(t *testing.T) {
	sw := &Sweep{Trials: []Trial{{Name: "a"}}}
	base := SweepConfig{Sweep: sw, Device: "auto", RankBy: "test_accuracy", Launcher: LauncherSlurm}
	for f, mod := range map[field.Name]func(*SweepConfig){
		"devices":       func(c *SweepConfig) { c.GPUs = []int{0} },
		"per_device":    func(c *SweepConfig) { c.PerDevice = 2 },
		"device_memory": func(c *SweepConfig) { c.DeviceMemory = 1 << 20 },
		"launcher":      func(c *SweepConfig) { c.Launcher = "kubernetes" },
		"dry_run":       func(c *SweepConfig) { c.Launcher, c.DryRun = LauncherLocal, true },
	} {
		c := base
		mod(&c)
		if err := c.Validate(); !field.Is(err, f) {
			t.Errorf("%s: %v; want a refusal naming it", f, err)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("a Slurm sweep: %v", err)
	}
}

// TestSweepFileLauncher: a sweep file may name its launcher and Slurm
// settings; bad ones are refused with the key at fault.
func TestSweepFileLauncher(t *testing.T) {
	sw, err := parseSweep([]byte("base: {}\ntrials: [{lr: 0.1}]\nlauncher: slurm\nslurm: {partition: gpu, time_limit: '1:00:00', sbatch_args: [--mem=8G]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sw.Launcher != LauncherSlurm || sw.Slurm.Partition != "gpu" || sw.Slurm.TimeLimit != "1:00:00" || !slices.Equal(sw.Slurm.Args, []string{"--mem=8G"}) {
		t.Fatalf("read %q %+v", sw.Launcher, sw.Slurm)
	}
	for text, f := range map[string]field.Name{
		"base: {}\ntrials: [{lr: 0.1}]\nlauncher: nomad\n":                   "launcher",
		"base: {}\ntrials: [{lr: 0.1}]\nslurm: {sbatch_args: [--array=1]}\n": "sbatch_args",
	} {
		if _, err := parseSweep([]byte(text)); !field.Is(err, f) {
			t.Errorf("%q: %v; want a refusal of %s", text, err, f)
		}
	}
}

package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// rlEvent is an event of an agent's events.jsonl: its kind (Event) and
// the fields the tests read.
type rlEvent struct {
	Event    string  `json:"-"`
	Role     string  `json:"role"`
	PID      int     `json:"pid"`
	Device   string  `json:"device"`
	EnvSteps int     `json:"env_steps"`
	Return   float64 `json:"return"`
	Resume   bool    `json:"resume"`
	Attempt  int     `json:"attempt"`
	State    string  `json:"state"`
}

// rlEvents reads an agent's events.jsonl as the events log it is (a line
// torn by a killed coordinator is skipped).
func rlEvents(runDir string, agent int) []rlEvent {
	f, err := os.Open(filepath.Join(rl.AgentDir(runDir, agent), rundir.EventsFile))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []rlEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		e, err := telemetry.DecodeEvent(sc.Bytes())
		if err != nil {
			continue
		}
		raw, err := json.Marshal(e.Fields)
		if err != nil {
			continue
		}
		r := rlEvent{Event: e.Kind}
		if json.Unmarshal(raw, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// rlWorker is the pid of the last worker of role that agent started, and
// the environment steps of its agent's last episode.
func rlWorker(runDir string, agent int, role string) (pid, steps int) {
	for _, e := range rlEvents(runDir, agent) {
		switch {
		case e.Event == "worker" && e.Role == role:
			pid = e.PID
		case e.Event == "episode":
			steps = e.EnvSteps
		}
	}
	return pid, steps
}

func readRLSummary(t *testing.T, runDir string) rl.Summary {
	t.Helper()
	return readJSON[rl.Summary](t, filepath.Join(runDir, rundir.SummaryFile))
}

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// rlWorkerPIDs are every worker pid a run's agents logged.
func rlWorkerPIDs(runDir string, agents int) []int {
	var pids []int
	for i := range agents {
		for _, e := range rlEvents(runDir, i) {
			if e.Event == "worker" {
				pids = append(pids, e.PID)
			}
		}
	}
	return pids
}

// memoryFiles are the memory files a tolaria rl with pid left in /dev/shm.
func memoryFiles(pid int) []string {
	files, _ := filepath.Glob("/dev/shm/tolaria-rl-" + strconv.Itoa(pid) + "-*")
	return files
}

// TestRLActorRestartedLearnerFailsItsAgent: two agents as real worker
// processes. Agent 0's actor, killed with SIGKILL mid-run, is started
// again and the agent finishes every step from where the first actor
// stopped; agent 1's learner, killed, fails agent 1 with the reason while
// agent 0 goes on. The run exits 3 and leaves no process and no memory
// file behind.
func TestRLActorRestartedLearnerFailsItsAgent(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	cmd, stderr := startRun(t, dir, "rl", "--agents", "2", "--total-steps", "30000", "--stop-when-solved=false", "--run-dir", runDir,
		"--config", writeRLConfig(t, dir, "model: {hidden: [32, 32]}\n"))
	var actor int
	waitFor(t, "agent 0's actor past 3,000 steps", func() bool {
		pid, steps := rlWorker(runDir, 0, "actor")
		actor = pid
		return pid > 0 && steps > 3000
	})
	if err := syscall.Kill(actor, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "agent 0's second actor", func() bool {
		pid, _ := rlWorker(runDir, 0, "actor")
		return pid > 0 && pid != actor
	})
	learner, _ := rlWorker(runDir, 1, "learner")
	if err := syscall.Kill(learner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	status, err := waitWithin(cmd, 3*time.Minute)
	if err != nil || status.ExitStatus() != 3 {
		t.Fatalf("exit %v, %v; want 3 (some agents failed)\n%s", status, err, stderr)
	}
	sum := readRLSummary(t, runDir)
	a0, a1 := sum.Agents[0], sum.Agents[1]
	if a0.State != rl.AgentSucceeded || a0.ActorRestarts != 1 || a0.EnvSteps != 30000 {
		t.Errorf("agent 0: %s, %d actor restarts, %d env steps; want succeeded after 1 restart, at 30000", a0.State, a0.ActorRestarts, a0.EnvSteps)
	}
	if a1.State != rl.AgentFailed || !strings.Contains(a1.Reason, "learner") || !strings.Contains(a1.Reason, "killed") {
		t.Errorf("agent 1: %s (%s); want failed, its learner killed", a1.State, a1.Reason)
	}
	// The second actor went on from the buffer: its episodes end past
	// the step at which the first was killed, and none is counted twice.
	var restartAt, last int
	for _, e := range rlEvents(runDir, 0) {
		switch e.Event {
		case "actor_restart":
			restartAt = e.EnvSteps
		case "episode":
			if e.EnvSteps < last {
				t.Fatalf("episode at step %d after one at %d", e.EnvSteps, last)
			}
			last = e.EnvSteps
		}
	}
	if restartAt < 3000 || last <= restartAt {
		t.Errorf("actor restarted at step %d, last episode at %d", restartAt, last)
	}
	for _, pid := range rlWorkerPIDs(runDir, 2) {
		if alive(pid) {
			t.Errorf("worker %d outlived the run", pid)
		}
	}
	if left := memoryFiles(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("memory files left behind: %v", left)
	}
	if !strings.Contains(stderr.String(), "1 of 2 agents failed") {
		t.Errorf("stderr does not say which failed:\n%s", stderr)
	}

	// --resume: agent 0 finished and is kept; agent 1, whose learner left
	// no checkpoint, starts again from step 0, its earlier events set
	// aside rather than counted.
	r := tolaria(t, dir, nil, "rl", "--resume", "--run-dir", runDir)
	if r.code != 0 {
		t.Fatalf("--resume after a failed learner: exit %d\n%s", r.code, r.stderr)
	}
	resumed := readRLSummary(t, runDir)
	if resumed.Agents[0] != a0 {
		t.Errorf("agent 0 changed on resume: %+v, was %+v", resumed.Agents[0], a0)
	}
	b1 := resumed.Agents[1]
	aside, _ := filepath.Glob(filepath.Join(rl.AgentDir(runDir, 1), "events-before-*.jsonl"))
	var starts []rlEvent
	last = 0
	for _, e := range rlEvents(runDir, 1) {
		switch e.Event {
		case "start":
			starts = append(starts, e)
		case "episode":
			if e.EnvSteps < last {
				t.Errorf("agent 1's episodes go back from step %d to %d", last, e.EnvSteps)
			}
			last = e.EnvSteps
		}
	}
	if b1.State != rl.AgentSucceeded || b1.EnvSteps != 30000 || uint64(b1.Episodes) != b1.Epoch || len(aside) != 1 ||
		len(starts) != 1 || starts[0].Resume || starts[0].EnvSteps != 0 {
		t.Errorf("agent 1 after --resume: %s, %d env steps, %d episodes (epoch %d), earlier events %v, starts %+v; want it started again from 0 and finished",
			b1.State, b1.EnvSteps, b1.Episodes, b1.Epoch, aside, starts)
	}
}

func writeRLConfig(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRLInterruptAndResume: Ctrl-C stops every actor and learner; each
// learner checkpoints and the coordinator saves each replay buffer (exit
// 130, no process or memory file left). --resume continues each agent
// from its step count, its learner's steps and its buffer, to the end.
func TestRLInterruptAndResume(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	cfg := writeRLConfig(t, dir, "model: {hidden: [32, 32]}\n")
	cmd, stderr := startRun(t, dir, "rl", "--agents", "2", "--total-steps", "40000", "--stop-when-solved=false", "--run-dir", runDir, "--config", cfg)
	waitFor(t, "both agents past 4,000 steps", func() bool {
		_, s0 := rlWorker(runDir, 0, "actor")
		_, s1 := rlWorker(runDir, 1, "actor")
		return s0 > 4000 && s1 > 4000
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	status, err := waitWithin(cmd, time.Minute)
	if err != nil || status.ExitStatus() != 130 {
		t.Fatalf("after SIGINT: %v, %v\n%s", status, err, stderr)
	}
	for _, pid := range rlWorkerPIDs(runDir, 2) {
		if alive(pid) {
			t.Errorf("worker %d outlived the run", pid)
		}
	}
	if left := memoryFiles(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("memory files left behind: %v", left)
	}
	before := readRLSummary(t, runDir)
	for _, a := range before.Agents {
		d := rl.AgentDir(runDir, a.Agent)
		for _, f := range []string{trainer.CheckpointFile, rl.ReplayFile} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("agent %d after Ctrl-C: %v", a.Agent, err)
			}
		}
		if a.State != rl.AgentInterrupted || a.EnvSteps < 4000 || a.EnvSteps >= 40000 || a.LearnerSteps == 0 {
			t.Fatalf("agent %d after Ctrl-C: %s (%s) at env step %d, learner step %d", a.Agent, a.State, a.Reason, a.EnvSteps, a.LearnerSteps)
		}
	}
	if r := tolaria(t, dir, nil, "rl", "--resume", "--run-dir", runDir, "--agents", "3"); r.code != 2 || !strings.Contains(r.stderr, "--agents (num_agents): cannot change a run being resumed") {
		t.Errorf("--resume --agents 3: exit %d\n%s", r.code, r.stderr)
	}
	// An edited config.yaml is refused, with nothing written.
	cfgPath := filepath.Join(runDir, rundir.ConfigFile)
	saved, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(saved), "gamma: 0.99", "gamma: 0.5", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	files := snapshot(t, runDir)
	if r := tolaria(t, dir, nil, "rl", "--resume", "--run-dir", runDir); r.code != 2 || !strings.Contains(r.stderr, "edited") {
		t.Errorf("--resume with gamma edited in config.yaml: exit %d\n%s", r.code, r.stderr)
	}
	sameFiles(t, files, snapshot(t, runDir))
	if err := os.WriteFile(cfgPath, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	r := tolaria(t, dir, nil, "rl", "--resume", "--run-dir", runDir)
	if r.code != 0 {
		t.Fatalf("--resume: exit %d\n%s", r.code, r.stderr)
	}
	after := readRLSummary(t, runDir)
	for i, a := range after.Agents {
		was := before.Agents[i]
		if a.State != rl.AgentSucceeded || a.EnvSteps != 40000 || a.LearnerSteps <= was.LearnerSteps || a.Episodes <= was.Episodes {
			t.Errorf("agent %d resumed: %s, %d env steps, %d learner steps (was %d), %d episodes (was %d)",
				i, a.State, a.EnvSteps, a.LearnerSteps, was.LearnerSteps, a.Episodes, was.Episodes)
		}
		var starts []rlEvent
		for _, e := range rlEvents(runDir, i) {
			if e.Event == "start" {
				starts = append(starts, e)
			}
		}
		if len(starts) != 2 || !starts[1].Resume || starts[1].EnvSteps != was.EnvSteps {
			t.Errorf("agent %d's starts %+v; want a second, resumed at env step %d", i, starts, was.EnvSteps)
		}
	}
	if r := tolaria(t, dir, nil, "rl", "--resume", "--run-dir", runDir); r.code != 2 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Errorf("--resume of a finished run: exit %d\n%s", r.code, r.stderr)
	}
}

// TestRLRefusesBadInput: a bad configuration or flag is refused (exit 2)
// naming the key, before anything is written.
func TestRLRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	for _, tc := range []struct {
		config string
		args   []string
		want   string
	}{
		{"num_agent: 2\n", nil, "num_agent"},
		{"target_update: 0\n", nil, "target_update"},
		{"seed: 1.5\n", nil, "seed: must be a whole number, got 1.5"},
		{"model: {hidden: [32.5]}\n", nil, "model.hidden: must be a whole number"},
		{"", []string{"--agents", "0"}, "--agents (num_agents)"},
		{"", []string{"--resume"}, "--resume: needs --run-dir"},
		{"", []string{"--device", "tpu"}, "device"},
		{"", []string{"--metrics-addr", "nonsense"}, "--metrics-addr"},
		{"", []string{"--resume", "--run-dir", filepath.Join(dir, "nothere")}, "holds no tolaria rl run"},
	} {
		args := append([]string{"rl", "--config", writeRLConfig(t, dir, tc.config)}, tc.args...)
		if !strings.Contains(strings.Join(tc.args, " "), "--resume") {
			args = append(args, "--run-dir", runDir)
		} else {
			args = append([]string{"rl"}, tc.args...)
		}
		r := tolaria(t, dir, nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q %v: exit %d, want 2 naming %q\n%s", tc.config, tc.args, r.code, tc.want, r.stderr)
		}
		if _, err := os.Stat(runDir); err == nil {
			t.Fatalf("%q %v: %s was created", tc.config, tc.args, runDir)
		}
	}

	// A run directory that holds a run is refused, naming the flags as
	// they are spelled.
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(runDir, rundir.ConfigFile), []byte("seed: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := tolaria(t, dir, nil, "rl", "--run-dir", runDir)
	if r.code != 2 || !strings.Contains(r.stderr, "--resume") || !strings.Contains(r.stderr, "--run-dir") || strings.Contains(r.stderr, "run_dir") {
		t.Errorf("a new run in a run's directory: exit %d\n%s", r.code, r.stderr)
	}

	// GPUs asked of a CPU-only worker: tolaria asks the worker for its
	// GPUs first, and says there are none, before a run directory is made
	// (an agent failing at once for want of a GPU is tested on the
	// emulated driver).
	for _, args := range [][]string{{"--devices", "0"}, {"--device", "cuda"}} {
		r = tolaria(t, dir, nil, append([]string{"rl", "--run-dir", filepath.Join(dir, "cuda")}, args...)...)
		if _, err := os.Stat(filepath.Join(dir, "cuda")); r.code != 1 || !strings.Contains(r.stderr, "built without CUDA") || !os.IsNotExist(err) {
			t.Errorf("%v with a CPU worker: exit %d (want 1 before a run directory is made)\n%s", args, r.code, r.stderr)
		}
	}
}

// TestRLShortRunLearns: one agent as an actor and a learner process, with
// a fixed seed, beats a random policy (about 22 on CartPole-v1) clearly
// within 15,000 environment steps: the mean return of its last 20
// episodes is at least three times that; --plot draws the curve.
func TestRLShortRunLearns(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	r := tolaria(t, dir, nil, "rl", "--total-steps", "15000", "--seed", "1", "--run-dir", runDir, "--plot",
		"--config", writeRLConfig(t, dir, "epsilon_decay_steps: 8000\n"))
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var returns []float64
	for _, e := range rlEvents(runDir, 0) {
		if e.Event == "episode" {
			returns = append(returns, e.Return)
		}
	}
	if len(returns) < 20 {
		t.Fatalf("%d episodes", len(returns))
	}
	mean := 0.0
	for _, x := range returns[len(returns)-20:] {
		mean += x / 20
	}
	t.Logf("%d episodes; mean return of the last 20: %.1f", len(returns), mean)
	if mean < 66 {
		t.Errorf("mean return of the last 20 episodes %.1f, want at least 66 (three times a random policy's 22)", mean)
	}
	if st, err := os.Stat(filepath.Join(runDir, "returns.png")); err != nil || st.Size() < 1000 {
		t.Errorf("--plot: %v", err)
	}
}

// TestRLCoordinatorKilledLeavesNoMemory: the agents' memory has no name
// in /dev/shm (the workers map a memfd), so a SIGKILL of the tolaria rl
// coordinator leaves no memory file, and it is freed once the workers
// have gone. The learner, told by its closed input to stop, checkpoints;
// --resume continues the agent from that checkpoint with an empty buffer
// rather than from step 0.
func TestRLCoordinatorKilledLeavesNoMemory(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	cmd, stderr := startRun(t, dir, "rl", "--agents", "1", "--total-steps", "40000", "--stop-when-solved=false", "--run-dir", runDir,
		"--config", writeRLConfig(t, dir, "model: {hidden: [32, 32]}\nlearning_starts: 500\n"))
	pid := cmd.Process.Pid
	var learner int
	waitFor(t, "the actor past 3,000 steps", func() bool {
		var steps int
		learner, _ = rlWorker(runDir, 0, "learner")
		_, steps = rlWorker(runDir, 0, "actor")
		return learner > 0 && steps > 3000
	})
	maps, err := os.ReadFile("/proc/" + strconv.Itoa(learner) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	if name := "/memfd:tolaria-rl-" + strconv.Itoa(pid) + "-agent0"; !strings.Contains(string(maps), name) {
		t.Errorf("the learner maps no %s", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := waitWithin(cmd, time.Minute); err != nil {
		t.Fatal(err)
	}
	workers := rlWorkerPIDs(runDir, 1)
	waitFor(t, "the workers to end", func() bool {
		for _, w := range workers {
			if !gone(w) {
				return false
			}
		}
		return true
	})
	if left, _ := filepath.Glob(filepath.Join("/dev/shm", "tolaria-rl-"+strconv.Itoa(pid)+"*")); len(left) > 0 {
		t.Errorf("memory files left behind by the killed coordinator: %v", left)
	}
	ck, err := trainer.LoadCheckpoint(filepath.Join(rl.AgentDir(runDir, 0), trainer.CheckpointFile))
	if err != nil {
		t.Fatalf("no checkpoint after the coordinator was killed: %v\n%s", err, stderr)
	}
	r := tolaria(t, dir, nil, "rl", "--resume", "--run-dir", runDir)
	if r.code != 0 || !strings.Contains(r.stderr, "empty buffer") {
		t.Fatalf("--resume without a saved buffer: exit %d\n%s", r.code, r.stderr)
	}
	var starts []rlEvent
	for _, e := range rlEvents(runDir, 0) {
		if e.Event == "start" {
			starts = append(starts, e)
		}
	}
	a := readRLSummary(t, runDir).Agents[0]
	if len(starts) != 2 || !starts[1].Resume || starts[1].EnvSteps < 3000 || a.State != rl.AgentSucceeded ||
		a.EnvSteps != 40000 || a.LearnerSteps <= ck.Step {
		t.Errorf("after --resume: starts %+v, agent %s at %d env steps and %d learner steps; want it resumed from step %d of its checkpoint",
			starts, a.State, a.EnvSteps, a.LearnerSteps, ck.Step)
	}
}

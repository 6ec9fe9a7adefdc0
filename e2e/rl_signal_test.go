package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/trainer"
)

// startForage starts tolaria rl on a small Forage world of two agents
// (a shared actor and a learner each) that will not finish by itself, and
// waits until both agents have trained.
func startForage(t *testing.T) (cmd *exec.Cmd, pid int, runDir string, stderr *lockedBuffer) {
	t.Helper()
	dir := t.TempDir()
	runDir = filepath.Join(dir, "run")
	cfg := writeRLConfig(t, dir, "env: {name: Forage, width: 8, height: 8, food: 4, max_steps: 40, last_move: 1}\nnum_agents: 2\nnum_envs: 2\n"+
		"model: {hidden: [16]}\nlearning_starts: 500\ntotal_steps: 10000000\neval_interval: 0\n")
	c, errb := startRun(t, dir, "rl", "--seed", "1", "--run-dir", runDir, "--config", cfg)
	t.Cleanup(func() { _ = c.Process.Kill() })
	waitFor(t, "both agents past 2,000 environment steps", func() bool {
		_, s0 := rlWorker(runDir, 0, "learner")
		_, s1 := rlWorker(runDir, 1, "learner")
		return s0 > 2000 && s1 > 2000
	})
	return c, c.Process.Pid, runDir, errb
}

// noTemps fails the test if a temporary file of an atomic write is left
// in the run directory or an agent's.
func noTemps(t *testing.T, runDir string) {
	t.Helper()
	for _, d := range []string{runDir, rl.AgentDir(runDir, 0), rl.AgentDir(runDir, 1)} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if atomicfile.IsTemp(e.Name()) {
				t.Errorf("temporary file left: %s", filepath.Join(d, e.Name()))
			}
		}
	}
}

// TestRLSignalDeliveredTwiceIsOneInterrupt: timeout -s INT delivers its
// SIGINT twice at once (to tolaria, then to its process group). That is
// one request: every learner checkpoints, every buffer and the shared
// world are saved, the run says so and exits 130 with its summary
// written.
func TestRLSignalDeliveredTwiceIsOneInterrupt(t *testing.T) {
	cmd, pid, runDir, stderr := startForage(t)
	for range 2 {
		if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
	}
	err := cmd.Wait()
	if code := exitCodeOf(err); code != 130 {
		t.Fatalf("after SIGINT twice at once: %v (exit %d), want exit 130\n%s", err, code, stderr)
	}
	want := "tolaria: interrupted: the learners of agents 0, 1 checkpointed and their replay buffers were saved; the shared world was saved; continue with tolaria rl --resume --run-dir " + runDir
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("the last words do not say %q:\n%s", want, stderr)
	}
	sum := readRLSummary(t, runDir)
	if !sum.Interrupted || sum.WorldSaved == nil || !*sum.WorldSaved {
		t.Errorf("summary.json: interrupted %v, world saved %v", sum.Interrupted, sum.WorldSaved)
	}
	for _, a := range sum.Agents {
		if a.State != rl.AgentInterrupted || a.Saved == nil || !a.Saved.Checkpointed || !a.Saved.Buffer {
			t.Errorf("agent %d: %s (%s), saved %+v", a.Agent, a.State, a.Reason, a.Saved)
		}
		for _, f := range []string{trainer.CheckpointFile, rl.ReplayFile} {
			if _, err := os.Stat(filepath.Join(rl.AgentDir(runDir, a.Agent), f)); err != nil {
				t.Errorf("agent %d: %v", a.Agent, err)
			}
		}
	}
	noTemps(t, runDir)
}

// TestRLSecondInterruptReportsWhatWasNotSaved: a second Ctrl-C while the
// learners cannot checkpoint (frozen) kills every worker; tolaria still
// writes the summary and says that no learner checkpointed and what
// --resume will do, then ends by the signal. No temporary file is left.
func TestRLSecondInterruptReportsWhatWasNotSaved(t *testing.T) {
	cmd, pid, runDir, stderr := startForage(t)
	var learners []int
	for i := range 2 {
		p, _ := rlWorker(runDir, i, "learner")
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !gone(p) {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
		})
		learners = append(learners, p)
	}
	for _, p := range learners {
		waitFor(t, "the learner to stop", func() bool { return stopped(p) })
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// The cancel waiting in a frozen learner's input shows that tolaria
	// took the first signal; the second comes later than
	// SameRequestWithin, as a person's second Ctrl-C does.
	waitFor(t, "tolaria to cancel the learners", func() bool { return pendingInput(t, learners[0]) > 0 })
	time.Sleep(coordinator.SameRequestWithin)
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if st, ok := waitStatusOf(err); !ok || !st.Signaled() || st.Signal() != syscall.SIGINT {
		t.Fatalf("after a second SIGINT: %v, want death by SIGINT\n%s", err, stderr)
	}
	for _, want := range []string{
		"tolaria: interrupted: agents 0, 1: the learner did not checkpoint and has no earlier checkpoint, so no replay buffer was saved: --resume starts the agent again from step 0",
		"continue with tolaria rl --resume --run-dir " + runDir,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the last words do not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr.String(), "learners of agents 0, 1 checkpointed") {
		t.Errorf("tolaria says the learners checkpointed:\n%s", stderr)
	}
	sum := readRLSummary(t, runDir)
	for _, a := range sum.Agents {
		if a.State != rl.AgentInterrupted || a.Saved == nil || a.Saved.Checkpointed || a.Saved.CheckpointStep != -1 {
			t.Errorf("agent %d: %s (%s), saved %+v", a.Agent, a.State, a.Reason, a.Saved)
		}
		if _, err := os.Stat(filepath.Join(rl.AgentDir(runDir, a.Agent), trainer.CheckpointFile)); err == nil {
			t.Errorf("agent %d has a checkpoint", a.Agent)
		}
	}
	for _, p := range learners {
		if !gone(p) {
			t.Errorf("learner %d outlived tolaria", p)
		}
	}
	noTemps(t, runDir)
}

// waitStatusOf is how a process ended, from cmd.Wait's error.
func waitStatusOf(err error) (syscall.WaitStatus, bool) {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, false
	}
	st, ok := ee.Sys().(syscall.WaitStatus)
	return st, ok
}

// exitCodeOf is the exit code cmd.Wait's error gives (0 for none, -1 for
// a death by a signal).
func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	st, ok := waitStatusOf(err)
	if !ok {
		return -1
	}
	return st.ExitStatus()
}

package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/telemetry"
)

// lockstepRLConfig is a small configuration for two agents in lockstep
// runs: rounds of 20 transitions and 15 training steps, a buffer that
// wraps.
const lockstepRLConfig = "model: {hidden: [32]}\nlearning_starts: 300\nbuffer_capacity: 1000\neval_interval: 500\neval_episodes: 10\n" +
	"lockstep_collect: 20\nlockstep_train: 15\n"

// rlLockstepTwice runs tolaria rl --lockstep twice with the same
// configuration (env and extra flags added) and checks that both runs
// end every agent with the same learner checkpoint and replay.buf, byte
// for byte, and the same episodes and evaluations in its events. It
// returns the first run's directory.
func rlLockstepTwice(t *testing.T, env []string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := writeRLConfig(t, dir, lockstepRLConfig)
	var runs []string
	for _, name := range []string{"a", "b"} {
		runDir := filepath.Join(dir, name)
		args := append([]string{"rl", "--lockstep", "--agents", "2", "--total-steps", "1500", "--stop-when-solved=false",
			"--config", cfg, "--run-dir", runDir, "--metrics-linger", "0"}, extra...)
		if r := tolaria(t, dir, env, args...); r.code != 0 {
			t.Fatalf("tolaria rl --lockstep (run %s): exit %d\n%s", name, r.code, r.stderr)
		}
		runs = append(runs, runDir)
	}
	if raw, err := os.ReadFile(filepath.Join(runs[0], "config.yaml")); err != nil || !strings.Contains(string(raw), "\nlockstep: true\n") {
		t.Errorf("config.yaml does not record lockstep: true (%v):\n%s", err, raw)
	}
	for _, a := range readRLSummary(t, runs[0]).Agents {
		if a.State != rl.AgentSucceeded || a.EnvSteps != 1500 || a.LearnerSteps != 15*(1500/20-300/20+1) || a.Fallbacks != 0 {
			t.Errorf("agent %d: %s (%s), %d env steps, %d learner steps (want %d), %d eager fallbacks",
				a.Agent, a.State, a.Reason, a.EnvSteps, a.LearnerSteps, 15*(1500/20-300/20+1), a.Fallbacks)
		}
		for _, f := range []string{"checkpoint.tlck", "replay.buf"} {
			x, errA := os.ReadFile(filepath.Join(rl.AgentDir(runs[0], a.Agent), f))
			y, errB := os.ReadFile(filepath.Join(rl.AgentDir(runs[1], a.Agent), f))
			if errA != nil || errB != nil || !bytes.Equal(x, y) {
				t.Errorf("agent %d: the two runs' %s differ (%d and %d bytes; %v, %v)", a.Agent, f, len(x), len(y), errA, errB)
			}
		}
		if x, y := lockstepPlay(runs[0], a.Agent), lockstepPlay(runs[1], a.Agent); len(x) == 0 || !reflect.DeepEqual(x, y) {
			t.Errorf("agent %d: the two runs played different episodes or evaluations: %d and %d events", a.Agent, len(x), len(y))
		}
	}
	return runs[0]
}

// lockstepPlay is an agent's episodes, then its evaluations, as its
// events record them, without their durations. (An evaluation is
// reported at once and episodes every half second, so the two kinds
// interleave in the log as the reports fall.)
func lockstepPlay(runDir string, agent int) []map[string]any {
	raw, err := os.ReadFile(filepath.Join(rl.AgentDir(runDir, agent), rundir.EventsFile))
	if err != nil {
		return nil
	}
	var episodes, evals []map[string]any
	for _, line := range bytes.Split(raw, []byte("\n")) {
		e, err := telemetry.DecodeEvent(line)
		switch {
		case err != nil:
		case e.Kind == "episode":
			episodes = append(episodes, e.Fields)
		case e.Kind == "eval":
			delete(e.Fields, "seconds")
			evals = append(evals, e.Fields)
		}
	}
	return append(episodes, evals...)
}

// TestRLLockstepRepeatable: tolaria rl --lockstep on the CPU gives the
// same checkpoints, buffers, episodes and evaluations twice over.
func TestRLLockstepRepeatable(t *testing.T) {
	rlLockstepTwice(t, nil, "--device", "cpu")
}

// rlLockstepOnEmulatedDriver: tolaria rl --lockstep --device cuda, each
// agent's actor and learner in CUDA workers on the emulated driver with
// graphs on, gives the same checkpoints, buffers, episodes and
// evaluations twice over.
func rlLockstepOnEmulatedDriver(t *testing.T, emu string) {
	rlLockstepTwice(t, []string{"LD_LIBRARY_PATH=" + emu, "CUDAEMU_DEVICES=2"}, "--device", "cuda", "--enable-graphs",
		"--worker", filepath.Join(emu, "tolaria-worker"))
}

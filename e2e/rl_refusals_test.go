package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
)

// TestRLRunDirInUseAndDamagedWorld: while tolaria rl runs in a directory,
// a new run there, --resume of it and tolaria train there are each
// refused, exit 2, as in use by that process, named by its pid. Once it
// is interrupted, a damaged world.json is refused by --resume, exit 2,
// naming the file and what to do, before any worker starts.
func TestRLRunDirInUseAndDamagedWorld(t *testing.T) {
	cmd, pid, runDir, stderr := startForage(t)
	dir := filepath.Dir(runDir)
	busy := fmt.Sprintf("--run-dir: %s is in use by another tolaria (pid %d, tolaria rl); wait for it or choose another --run-dir", runDir, pid)
	for _, args := range [][]string{
		{"rl", "--run-dir", runDir},
		{"rl", "--resume", "--run-dir", runDir},
		{"train", "--dataset", "synthetic", "--run-dir", runDir},
	} {
		r := tolaria(t, dir, nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, busy) {
			t.Errorf("%v: exit %d, want 2 and %q:\n%s", args, r.code, busy, r.stderr)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitCodeOf(cmd.Wait()); code != 130 {
		t.Fatalf("interrupted: exit %d, want 130\n%s", code, stderr)
	}

	world := filepath.Join(runDir, rl.WorldFile)
	if err := os.WriteFile(world, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	actorLog := filepath.Join(runDir, rl.SharedActorLog)
	starts := func() int {
		raw, _ := os.ReadFile(actorLog)
		return strings.Count(string(raw), "=== ")
	}
	before := starts()
	r := tolaria(t, dir, nil, "rl", "--resume", "--run-dir", runDir)
	for _, w := range []string{"--resume: ", world, "the shared world's saved state cannot be restored", "remove it to start the worlds afresh",
		"every agent's checkpoint, replay buffer and events are kept"} {
		if r.code != 2 || !strings.Contains(r.stderr, w) {
			t.Errorf("--resume with a damaged %s: exit %d, want 2 and %q:\n%s", rl.WorldFile, r.code, w, r.stderr)
		}
	}
	if after := starts(); after != before {
		t.Errorf("the refused resume started the shared actor (%d starts in %s, %d before)", after, actorLog, before)
	}
}

// TestRLWithoutLearningRefused: --total-steps equal to learning_starts
// would end every agent "succeeded" without a training step; it is
// refused, exit 2, naming both keys and what to give, and nothing is
// written.
func TestRLWithoutLearningRefused(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	r := tolaria(t, dir, nil, "rl", "--total-steps", "1000", "--run-dir", runDir)
	want := "--total-steps (total_steps): 1000 leaves the learners no training step: they train only once their buffers hold learning_starts (1000) transitions; give a --total-steps (total_steps) above 1000, or a smaller learning_starts"
	if r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, want 2 and %q:\n%s", r.code, want, r.stderr)
	}
	if strings.Contains(r.stderr, "device auto") {
		t.Errorf("the configuration was refused only after the device was chosen:\n%s", r.stderr)
	}
	if _, err := os.Stat(runDir); err == nil {
		t.Errorf("the refused run made %s", runDir)
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/trainer"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRunDirectoriesOfTheWrongKindOrInUse: each command given a run
// directory it cannot take says what the directory is and what to do, in
// the command's flags, and exits 2: a run another tolaria holds, a
// complete run, a tolaria rl run, a sweep's directory.
func TestRunDirectoriesOfTheWrongKindOrInUse(t *testing.T) {
	dir := t.TempDir()
	busy := filepath.Join(dir, "busy")
	writeFile(t, filepath.Join(busy, rundir.ConfigFile), "data: {dataset: synthetic}\n")
	held, err := rundir.Hold(busy, "tolaria train", "")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()

	done := filepath.Join(dir, "done")
	writeFile(t, filepath.Join(done, rundir.ConfigFile), "data: {dataset: synthetic}\n")
	writeFile(t, filepath.Join(done, trainer.CheckpointFile), "x")
	if err := rundir.WriteSummary(filepath.Join(done, rundir.SummaryFile), trainer.Summary{Steps: 8}); err != nil {
		t.Fatal(err)
	}

	rl := filepath.Join(dir, "rl1")
	writeFile(t, filepath.Join(rl, rundir.ConfigFile), "# tolaria rl configuration\nenv: CartPole-v1\nnum_agents: 1\n")
	writeFile(t, filepath.Join(rl, rundir.LockFile), "pid 1")

	sw := filepath.Join(dir, "sw1")
	writeFile(t, filepath.Join(sw, "sweep.yaml"), "base: {data: {dataset: synthetic}}\ngrid: {optimizer.lr: [0.1, 0.2]}\n")
	writeFile(t, filepath.Join(sw, "results.json"), `{"trials": [{"rank": 1, "name": "lr=0.2"}, {"rank": 2, "name": "lr=0.1"}]}`)
	writeFile(t, filepath.Join(sw, "lr=0.2", trainer.CheckpointFile), "x")

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"eval", "--run-dir", busy}, []string{fmt.Sprintf("--run-dir: %s is in use by another tolaria (pid %d, tolaria train)", busy, os.Getpid()),
			"wait for it to end, or evaluate a copy"}},
		{[]string{"train", "--run-dir", done, "--dataset", "synthetic"}, []string{"--run-dir: " + done + " already holds a run, and it is complete",
			"nothing to resume", "choose another --run-dir"}},
		{[]string{"eval", "--run-dir", rl}, []string{"--run-dir: " + rl + " is a tolaria rl run (its config.yaml has env, num_agents), not a tolaria train run",
			"point --run-dir at a run made by tolaria train"}},
		{[]string{"sample", "--run-dir", rl}, []string{rl + " is a tolaria rl run", "point --run-dir at a run made by tolaria train"}},
		{[]string{"train", "--resume", "--run-dir", rl}, []string{"--resume: " + rl + " is a tolaria rl run", "continue it with tolaria rl --resume --run-dir " + rl}},
		{[]string{"train", "--run-dir", rl, "--dataset", "synthetic"}, []string{rl + " is a tolaria rl run", "a new run needs an empty or new --run-dir"}},
		{[]string{"train", "--resume", "--run-dir", sw}, []string{sw + " is a tolaria sweep directory", "continue the sweep with tolaria sweep --resume --sweep-dir " + sw,
			"such as --run-dir " + filepath.Join(sw, "lr=0.2")}},
		{[]string{"eval", "--run-dir", sw}, []string{sw + " is a tolaria sweep directory", "point --run-dir at one of its trials' run directories, such as " + filepath.Join(sw, "lr=0.2")}},
	} {
		code, _, stderr := runTolaria(t, c.args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", c.args, code, exitUsage, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", c.args, w, stderr)
			}
		}
		if strings.Contains(stderr, "--config") {
			t.Errorf("%v: speaks of a configuration file the user did not give:\n%s", c.args, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(busy, "eval")); err == nil {
		t.Error("the refused evaluation of a run in use wrote its eval directory")
	}
}

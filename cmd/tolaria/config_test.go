package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A key comes from a flag, a TOLARIA_* variable (the flag's name or the
// key's path) or the file (nested, or in its deprecated flat spelling,
// with a warning); an error names the key as its source spelled it, and
// nothing is written.
func TestTrainNamesAKeyAsItsSourceSpelledIt(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "job.yaml")
	for _, c := range []struct {
		name, file string
		env        [][2]string
		flags      []string
		want       []string
		unwanted   []string
	}{
		{name: "nested in the file", file: "optimizer: {lr: 20}\n",
			want: []string{"invalid configuration: optimizer.lr: must be in (0, 10], got 20"}, unwanted: []string{"deprecated"}},
		{name: "written whole in the file", file: "optimizer.lr: 20\n",
			want: []string{"invalid configuration: optimizer.lr: must be in (0, 10], got 20"}},
		{name: "flat in the file", file: "lr: 20\nepochs: 1\n",
			want: []string{"lr is deprecated: write optimizer.lr", "epochs is deprecated: write schedule.epochs", "invalid configuration: lr: must be in (0, 10], got 20"}},
		{name: "flat optimizer kind", file: "optimizer: lion\n",
			want: []string{"optimizer is deprecated: write optimizer.kind", `invalid configuration: optimizer: unknown kind "lion"`}},
		{name: "a flag over the file", file: "optimizer: {lr: 0.1}\n", flags: []string{"--lr", "20"},
			want: []string{"invalid configuration: --lr: must be in (0, 10], got 20"}},
		{name: "the flag's variable", env: [][2]string{{"TOLARIA_LR", "20"}},
			want: []string{"invalid configuration: TOLARIA_LR: must be in (0, 10], got 20"}},
		{name: "the key's variable", env: [][2]string{{"TOLARIA_OPTIMIZER_LR", "20"}},
			want: []string{"invalid configuration: TOLARIA_OPTIMIZER_LR: must be in (0, 10], got 20"}, unwanted: []string{"not a tolaria setting"}},
		{name: "a variable named as a section", env: [][2]string{{"TOLARIA_OPTIMIZER", "lion"}},
			want: []string{`invalid configuration: TOLARIA_OPTIMIZER: unknown kind "lion"`}},
		{name: "a section's variable hides none of its keys", env: [][2]string{{"TOLARIA_OPTIMIZER", "sgd"}, {"TOLARIA_LR", "20"}},
			want: []string{"invalid configuration: TOLARIA_LR: must be in (0, 10], got 20"}},
		{name: "an unknown variable", env: [][2]string{{"TOLARIA_OPTIMIZER_LRR", "1"}, {"TOLARIA_LR", "20"}},
			want: []string{"TOLARIA_OPTIMIZER_LRR is not a tolaria setting"}},
		{name: "both variables of a key", env: [][2]string{{"TOLARIA_LR", "0.01"}, {"TOLARIA_OPTIMIZER_LR", "0.02"}},
			want: []string{"TOLARIA_OPTIMIZER_LR=0.02 and TOLARIA_LR=0.01 both set optimizer.lr; give one"}},
		{name: "an unknown key", file: "optimizer: {lrr: 0.1}\n",
			want: []string{"unknown key optimizer.lrr (optimizer holds lr, kind, momentum, weight_decay, clip_norm, warmup_steps)"}},
		{name: "a file's value that does not parse", file: "schedule: {epochs: 2.5}\n",
			want: []string{"schedule.epochs: must be a whole number, got 2.5 (set by the config file)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, kv := range c.env {
				t.Setenv(kv[0], kv[1])
			}
			run := filepath.Join(dir, "run")
			args := []string{"train", "--device", "cpu", "--dataset", "synthetic", "--run-dir", run}
			if c.file != "" {
				if err := os.WriteFile(config, []byte(c.file), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", config)
			}
			code, _, stderr := runTolaria(t, append(args, c.flags...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d:\n%s", code, exitUsage, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			for _, w := range c.unwanted {
				if strings.Contains(stderr, w) {
					t.Errorf("stderr says %q:\n%s", w, stderr)
				}
			}
			if _, err := os.Stat(run); err == nil {
				t.Errorf("a refused configuration left %s", run)
			}
		})
	}
}

// TestAFileOfAnotherCommand: each example file given to a command it is
// not for is refused, exit 2, naming the command it is for; nothing is
// written.
func TestAFileOfAnotherCommand(t *testing.T) {
	dir := t.TempDir()
	examples := filepath.Join("..", "..", "examples")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--config", filepath.Join(examples, "forage.yaml"), "--run-dir", filepath.Join(dir, "a")}, "is a file for tolaria rl --config (it has env, num_agents"},
		{[]string{"train", "--config", filepath.Join(examples, "sweep.yaml"), "--run-dir", filepath.Join(dir, "a")}, "is a file for tolaria sweep (it has base"},
		{[]string{"rl", "--config", filepath.Join(examples, "cnn.yaml"), "--run-dir", filepath.Join(dir, "a")}, "is a file for tolaria train --config (it has data, schedule"},
		{[]string{"rl", "--config", filepath.Join(examples, "sweep.yaml"), "--run-dir", filepath.Join(dir, "a")}, "is a file for tolaria sweep"},
		{[]string{"sweep", filepath.Join(examples, "acrobot.yaml"), "--sweep-dir", filepath.Join(dir, "a")}, "is a file for tolaria rl --config"},
		{[]string{"sweep", filepath.Join(examples, "cnn.yaml"), "--sweep-dir", filepath.Join(dir, "a")}, "is a file for tolaria train --config"},
	} {
		code, _, stderr := runTolaria(t, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q\n%s", c.args, code, c.want, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
			t.Fatalf("%v wrote %s", c.args, filepath.Join(dir, "a"))
		}
	}
}

// TestRLPlotWithoutItsPlotter: --plot without run_graph_bench (next to
// tolaria or on the PATH) is refused before anything runs, exit 2, saying
// how to get it; nothing is written.
func TestRLPlotWithoutItsPlotter(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	run := filepath.Join(t.TempDir(), "rl")
	code, _, stderr := runTolaria(t, "rl", "--plot", "--device", "cpu", "--total-steps", "100", "--run-dir", run)
	if want := "--plot: no run_graph_bench next to tolaria or on the PATH: build it with make build"; code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, want 2 and %q:\n%s", code, want, stderr)
	}
	if _, err := os.Stat(run); err == nil {
		t.Errorf("a refused --plot wrote %s", run)
	}
}

// TestAMistypedFlag: an unknown flag a letter or two off one of the
// command's is named, exit 2, with where the flags are listed; another
// unknown flag is said as it is; neither reads as an invalid configuration.
func TestAMistypedFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--epoch", "3"}, "tolaria: unknown flag: --epoch (did you mean --epochs?); see tolaria train --help"},
		{[]string{"sweep", "x.yaml", "--paralel", "2"}, "tolaria: unknown flag: --paralel (did you mean --parallel?); see tolaria sweep --help"},
		{[]string{"eval", "--zzz"}, "tolaria: unknown flag: --zzz; see tolaria eval --help"},
	} {
		code, _, stderr := runTolaria(t, c.args...)
		if code != exitUsage || strings.TrimSpace(stderr) != c.want {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

package jobconfig

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
)

func flag(k field.Name) string { return "--" + string(k) }

func write(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrecedence: a flag beats a variable, a variable the file, the file
// the default, key by key; Written names each key as the layer that gave
// it wrote it, and Source says which layer that was.
func TestPrecedence(t *testing.T) {
	file := write(t, filepath.Join(t.TempDir(), "job.yaml"), "lr: 0.5\nschedule: {epochs: 4, batch_size: 16}\nmodel: {activation: relu}\nmetrics_addr: ':9464'\n")
	c, err := Resolve(Sources{
		Flags:    map[field.Name]any{"schedule.batch_size": 32},
		FlagName: flag,
		Env:      []string{"TOLARIA_EPOCHS=7", "TOLARIA_SEED=", "PATH=/bin"},
		File:     file,
		Extra:    []field.Name{"metrics_addr", "worker"},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Spec
	if s.BatchSize != 32 || s.Epochs != 7 || s.LR != 0.5 || s.Activation != "relu" || s.Seed != 1 {
		t.Errorf("batch %d (flag 32), epochs %d (variable 7), lr %g (file 0.5), activation %q (file relu), seed %d (an empty variable: the default 1)",
			s.BatchSize, s.Epochs, s.LR, s.Activation, s.Seed)
	}
	for key, want := range map[field.Name]string{"schedule.epochs": "TOLARIA_EPOCHS", "optimizer.lr": "lr", "model.activation": "model.activation", "seed": "TOLARIA_SEED"} {
		if got := c.Written[key]; got != want {
			t.Errorf("Written[%s] = %q, want %q", key, got, want)
		}
	}
	if _, ok := c.Written["schedule.batch_size"]; ok {
		t.Errorf("a key a flag gave is in Written: %v", c.Written)
	}
	for key, want := range map[field.Name]string{"schedule.batch_size": "flag --schedule.batch_size", "schedule.epochs": "environment variable TOLARIA_EPOCHS", "optimizer.lr": "the config file"} {
		if got := c.Source(key); got != want {
			t.Errorf("Source(%s) = %q, want %q", key, got, want)
		}
	}
	if got := c.Extra; len(got) != 1 || got["metrics_addr"] != ":9464" {
		t.Errorf("Extra = %v, want only the file's metrics_addr", got)
	}
	if want := "lr is deprecated: write optimizer.lr"; !slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
		t.Errorf("Warnings %q lack %q", c.Warnings, want)
	}
}

// TestRefusals: two variables of one key that disagree, a value that does
// not fit, and layers beside the hidden shorthand are refused, each naming
// the key and what set it.
func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		src  Sources
		want string
	}{
		{"two variables", Sources{Env: []string{"TOLARIA_LR=0.1", "TOLARIA_OPTIMIZER_LR=0.2"}},
			"TOLARIA_OPTIMIZER_LR=0.2 and TOLARIA_LR=0.1 both set optimizer.lr; give one"},
		{"not a number", Sources{Env: []string{"TOLARIA_EPOCHS=many"}},
			`schedule.epochs: must be a whole number, got "many" (set by environment variable TOLARIA_EPOCHS)`},
		{"layers beside hidden", Sources{Flags: map[field.Name]any{"model.layers": "[{linear: {out: 10}}]"}, Env: []string{"TOLARIA_MODEL_HIDDEN=64"}},
			"model.layers: describes the whole model, but model.hidden is set too (by environment variable TOLARIA_MODEL_HIDDEN)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.src.FlagName = flag
			_, err := Resolve(c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestResume: a resumed run takes its recorded configuration, less the
// keys of one invocation, under the file and the flags.
func TestResume(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "config.yaml"), "schedule: {epochs: 3, max_steps: 9, batch_size: 8}\noptimizer: {lr: 0.25}\nrun_dir: elsewhere\n")
	file := write(t, filepath.Join(t.TempDir(), "more.yaml"), "schedule: {batch_size: 16}\n")
	src := Sources{Flags: map[field.Name]any{"resume": true, "run_dir": dir}, FlagName: flag, File: file, RunConfig: "config.yaml"}
	c, err := Resolve(src)
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Spec; s.Epochs != 3 || s.LR != 0.25 || s.BatchSize != 16 || s.MaxSteps != 0 || s.RunDir != dir {
		t.Errorf("epochs %d lr %g batch %d max_steps %d run_dir %q; want the recorded 3 and 0.25, the file's 16, no recorded max_steps, the flag's %s",
			s.Epochs, s.LR, s.BatchSize, s.MaxSteps, s.RunDir, dir)
	}
	delete(src.Flags, "resume")
	if c, err := Resolve(src); err != nil || c.Spec.Epochs == 3 {
		t.Errorf("a run not resumed read the recorded configuration: epochs %d, %v", c.Spec.Epochs, err)
	}
}

// TestDataDir: data.dir left unset is the dataset's own; set, it is kept.
func TestDataDir(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want string
	}{
		{nil, data.DefaultFashionMNISTDir},
		{[]string{"TOLARIA_DATASET=text"}, data.DefaultFortunesDir},
		{[]string{"TOLARIA_DATASET=text", "TOLARIA_DATA_DIR=/corpus"}, "/corpus"},
	} {
		c2, err := Resolve(Sources{Env: c.env, FlagName: flag})
		if err != nil || c2.Spec.DataDir != c.want {
			t.Errorf("%v: data dir %q, %v; want %q", c.env, c2.Spec.DataDir, err, c.want)
		}
	}
}

// TestResumeOfAnRLRun: resuming a directory whose config.yaml is a tolaria
// rl run's is refused as an rl run, with the command that continues it,
// not as a configuration file of tolaria rl's (the user gave none).
func TestResumeOfAnRLRun(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "config.yaml"), "env: CartPole-v1\nnum_agents: 2\nseed: 1\n")
	_, err := Resolve(Sources{Flags: map[field.Name]any{"resume": true, "run_dir": dir}, FlagName: flag, RunConfig: "config.yaml"})
	if err == nil || !field.Is(err, "resume") {
		t.Fatalf("got %v, want a refusal of resume", err)
	}
	for _, want := range []string{dir + " is a tolaria rl run (its config.yaml has env, num_agents)", "continue it with tolaria rl --resume --run-dir " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "--config") {
		t.Errorf("%v\nspeaks of a configuration file", err)
	}
}

// TestEmptyFileIsSaid: a config file that sets no key (empty, or only
// comments) is taken, with a warning that nothing came from it; a file
// that sets one gets no such warning.
func TestEmptyFileIsSaid(t *testing.T) {
	dir := t.TempDir()
	for text, want := range map[string]bool{"": true, "# a comment only\n": true, "seed: 3\n": false} {
		file := write(t, filepath.Join(dir, "job.yaml"), text)
		c, err := Resolve(Sources{FlagName: flag, File: file})
		if err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		said := slices.ContainsFunc(c.Warnings, func(w string) bool { return strings.Contains(w, file+" sets no key") })
		if said != want {
			t.Errorf("%q: warnings %q; want the empty-file warning: %v", text, c.Warnings, want)
		}
	}
}

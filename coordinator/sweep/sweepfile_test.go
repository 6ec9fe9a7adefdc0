package sweep

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
)

func writeSweep(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sweep.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadSweep(t *testing.T) {
	for _, c := range []struct {
		name, text string
		trials     []string // names, in order
		check      func(t *testing.T, s *Sweep)
	}{
		{"trials", `
base: {dataset: synthetic, epochs: 2, model: {hidden: [16]}}
trials:
  - {name: small, lr: 0.01}
  - {model: {hidden: [32, 16]}}
`, []string{"small", "trial-2"}, func(t *testing.T, s *Sweep) {
			if s.Trials[0].Spec.LR != 0.01 || s.Trials[0].Spec.Epochs != 2 || s.Trials[0].Spec.Dataset != "synthetic" {
				t.Errorf("trial small: %+v", s.Trials[0].Spec)
			}
			if h := s.Trials[1].Spec.Hidden; len(h) != 2 || h[0] != 32 || s.Trials[1].Overrides["model.hidden"] == nil {
				t.Errorf("trial-2: hidden %v, overrides %v", h, s.Trials[1].Overrides)
			}
		}},
		{"grid crossed in file order", `
base: {dataset: synthetic}
grid:
  lr: [0.1, 0.01]
  batch_size: [16, 32]
  model.hidden: [[8], [16, 8]]
`, []string{
			"lr=0.1,batch_size=16,hidden=8", "lr=0.1,batch_size=16,hidden=16-8",
			"lr=0.1,batch_size=32,hidden=8", "lr=0.1,batch_size=32,hidden=16-8",
			"lr=0.01,batch_size=16,hidden=8", "lr=0.01,batch_size=16,hidden=16-8",
			"lr=0.01,batch_size=32,hidden=8", "lr=0.01,batch_size=32,hidden=16-8",
		}, func(t *testing.T, s *Sweep) {
			if sp := s.Trials[7].Spec; sp.LR != 0.01 || sp.BatchSize != 32 || len(sp.Hidden) != 2 {
				t.Errorf("last point: %+v", sp)
			}
		}},
		// A layer list is spelled by its layers and their settings, not
		// by how Go prints a map.
		{"grid of layer lists", `
base: {dataset: synthetic, model: {input: [1, 8, 8]}}
grid:
  model.layers:
    - [{flatten: {}}, {linear: {out: 10}}]
    - [{conv: {out: 4, kernel: 3}}, {residual: [{conv: {out: 4, kernel: 3, padding: 1}}]}, {flatten: {}}, {linear: {out: 10}}]
`, []string{"layers=flatten-linear_out_10", "layers=conv_kernel_3_out_4-residual_conv_kernel_3_out_4_padding_1-flatten-linear_out_10"},
			func(t *testing.T, s *Sweep) {
				if n := len(s.Trials[1].Spec.Layers); n != 4 {
					t.Errorf("the second trial has %d layers, want 4", n)
				}
			}},
		{"trials crossed with the grid", `
trials: [{name: sgd, optimizer: sgd}, {name: adamw}]
grid: {seed: [1, 2]}
`, []string{"sgd,seed=1", "sgd,seed=2", "adamw,seed=1", "adamw,seed=2"}, func(t *testing.T, s *Sweep) {
			if s.Trials[1].Spec.Seed != 2 || s.Trials[1].Spec.Optimizer != "sgd" || s.Trials[3].Spec.Optimizer != "adamw" {
				t.Errorf("crossed: %+v / %+v", s.Trials[1].Spec, s.Trials[3].Spec)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := ReadSweep(writeSweep(t, c.text))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tr := range s.Trials {
				names = append(names, tr.Name)
			}
			if strings.Join(names, " ") != strings.Join(c.trials, " ") {
				t.Fatalf("trials %q, want %q", names, c.trials)
			}
			c.check(t, s)
		})
	}
}

func TestReadSweepRefuses(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []string // in the message, besides the file's path
	}{
		{"empty file", ``, []string{"is empty"}},
		{"no trials", "base: {epochs: 2}\n", []string{"has no trials"}},
		{"empty trial list", "trials: []\n", []string{"has no trials"}},
		{"unknown top-level key", "base: {}\ntrial: [{lr: 0.1}]\n", []string{"unknown key trial (did you mean trials?)", "base:, trials:, grid:, and optionally launcher: and slurm:"}},
		{"unknown base key", "base: {epochz: 2}\ntrials: [{}]\n", []string{"base:", "unknown key epochz"}},
		{"bad base value", "base: {epochs: 2.5}\ntrials: [{}]\n", []string{"base:", "epochs: must be a whole number, got 2.5"}},
		{"unknown trial key", "trials: [{name: a, lr: 0.1}, {name: b, learning_rate: 0.1}]\n", []string{`trial "b"`, "unknown key learning_rate"}},
		{"dashed trial key", "trials: [{batch-size: 8}]\n", []string{`trial "trial-1"`, "batch-size (write batch_size)"}},
		{"bad trial value", "trials: [{name: fast, lr: 50}]\n", []string{`trial "fast"`, "lr:", "(0, 10]"}},
		{"bad trial type", "trials: [{name: x, epochs: many}]\n", []string{`trial "x"`, "epochs:", "many"}},
		{"duplicate names", "trials: [{name: a}, {name: b}, {name: a, lr: 0.1}]\n", []string{`trial "a"`, "used twice"}},
		{"bad name", "trials: [{name: ../up}]\n", []string{"trials[1]: name \"../up\""}},
		{"run_dir set", "trials: [{name: a, run_dir: /tmp/x}]\n", []string{`trial "a"`, "run_dir: is set by the sweep"}},
		{"device in base", "base: {device: cuda}\ntrials: [{}]\n", []string{"base:", "device: is set by the sweep", "--devices"}},
		{"max_steps in base", "base: {max_steps: 5}\ntrials: [{}]\n", []string{"base:", "max_steps: is set by the sweep", "give schedule.epochs"}},
		{"max_steps in the grid", "grid: {max_steps: [5, 10]}\n", []string{"grid: max_steps: is set by the sweep"}},
		{"grid not a map", "grid: [1, 2]\n", []string{"grid: must map keys"}},
		{"grid unknown key", "grid: {lrate: [1]}\n", []string{"grid: unknown key lrate"}},
		{"grid no values", "grid: {lr: []}\n", []string{"grid: lr: has no values"}},
		{"grid not a list", "grid: {lr: 0.1}\n", []string{"grid: lr: must be a list"}},
		{"grid bad value", "grid: {lr: [0.1, -1]}\n", []string{`trial "lr=-1"`, "lr:", "(0, 10]"}},
		{"trial and grid set one key", "trials: [{name: a, lr: 0.1}]\ngrid: {lr: [0.2]}\n", []string{`trial "a"`, "lr is set by both"}},
		{"not YAML", "trials: [\n", []string{"yaml"}},
		// A grid without keys made one trial named "", whose run directory
		// was the sweep directory itself.
		{"empty grid", "grid: {}\n", []string{"grid: has no keys"}},
		{"empty grid with trials", "trials: [{name: a}]\ngrid: {}\n", []string{"grid: has no keys"}},
		{"empty trial list with a grid", "trials: []\ngrid: {lr: [0.1]}\n", []string{"trials: is empty"}},
		{"grid key twice", "grid: {lr: [0.1], seed: [1], lr: [0.2]}\n", []string{"grid: lr: is given twice"}},
		// Names of the sweep directory's own files and directories.
		{"reserved name results.json", "trials: [{name: results.json}]\n", []string{`trial "results.json"`, "reserved"}},
		{"reserved name trials", "trials: [{name: trials}]\n", []string{`trial "trials"`, "reserved"}},
		{"reserved name sweep.yaml", "trials: [{name: sweep.yaml}]\n", []string{`trial "sweep.yaml"`, "reserved"}},
		{"reserved name journal.jsonl", "trials: [{name: journal.jsonl}]\n", []string{`trial "journal.jsonl"`, "reserved"}},
		{"reserved name slurm", "trials: [{name: slurm}]\n", []string{`trial "slurm"`, "reserved"}},
		{"reserved name in another case", "trials: [{name: Results.CSV}]\n", []string{`trial "Results.CSV"`, "reserved"}},
		{"names differing in case", "trials: [{name: fast}, {name: Fast}]\n", []string{`trial "Fast"`, `"fast"`, "only in case"}},
		{"name too long", "trials: [{name: " + strings.Repeat("n", 100) + "}]\ngrid: {data_dir: [" + strings.Repeat("d", 300) + "]}\n",
			[]string{"is 410 bytes long", "at most 250"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeSweep(t, c.text)
			_, err := ReadSweep(path)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, refusal.ErrConfig) {
				t.Errorf("not refusal.ErrConfig: %v", err)
			}
			msg := err.Error()
			for _, w := range append(c.want, "sweep file "+path) {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}
	if _, err := ReadSweep(filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}

// seq is n numbers from 1, as a YAML list.
func seq(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strconv.Itoa(i + 1)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// TestReadSweepBoundsTheTrials: a sweep of more trials than the limit is
// refused, naming max_trials and the count, before its trials are made
// (a grid of a billion points is refused as fast as one of ten thousand
// and one); a higher limit accepts it.
func TestReadSweepBoundsTheTrials(t *testing.T) {
	over := writeSweep(t, "base: {dataset: synthetic}\ntrials: [{name: a}, {name: b}]\ngrid: {epochs: "+seq(101)+", seed: "+seq(50)+"}\n")
	_, err := ReadSweep(over)
	if !errors.Is(err, refusal.ErrConfig) || !field.Is(err, "max_trials") || !strings.Contains(err.Error(), "makes 10100 trials, more than 10000; give max_trials 10100") {
		t.Fatalf("%d trials: %v", 10100, err)
	}
	sw, err := ReadSweepMax(over, 10100)
	if err != nil || len(sw.Trials) != 10100 {
		t.Fatalf("with max 10100: %v", err)
	}
	if _, err := ReadSweepMax(over, 0); err != nil {
		t.Fatalf("with no limit: %v", err)
	}
	huge := writeSweep(t, "base: {dataset: synthetic}\ngrid: {epochs: "+seq(1000)+", seed: "+seq(1000)+", batch_size: "+seq(1000)+", log_every: "+seq(1000)+"}\n")
	if _, err := ReadSweep(huge); !field.Is(err, "max_trials") || !strings.Contains(err.Error(), "makes 1000000000000 trials") {
		t.Fatalf("a grid of 10^12 points: %v", err)
	}
}

// A trial's data_dir, given by neither the base nor the trial, is its
// dataset's default: the fortunes for text, Fashion-MNIST's directory else.
func TestSweepTrialsTakeTheirDatasetsDataDir(t *testing.T) {
	s, err := ReadSweep(writeSweep(t, `base:
  dataset: text
  context: 8
  model:
    input: [8]
    layers: [{embedding: {vocab: 256, dim: 8}}, {positional: {}}, {transformer_block: {heads: 2, mlp: 16}}, {lm_head: {}}]
trials:
  - {name: plain}
  - {name: own, data_dir: /tmp/corpus}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Trials[0].Spec.DataDir; got != data.DefaultFortunesDir {
		t.Errorf("a text trial without data_dir reads %q, want %q", got, data.DefaultFortunesDir)
	}
	if got := s.Trials[1].Spec.DataDir; got != "/tmp/corpus" {
		t.Errorf("a trial's own data_dir became %q", got)
	}
	s, err = ReadSweep(writeSweep(t, "base: {dataset: text, data_dir: /tmp/base, context: 8, model: {input: [8], layers: [{embedding: {vocab: 256, dim: 8}}, {lm_head: {}}]}}\ntrials: [{name: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Trials[0].Spec.DataDir; got != "/tmp/base" {
		t.Errorf("the base's data_dir became %q", got)
	}
	s, err = ReadSweep(writeSweep(t, "trials: [{name: a, epochs: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Trials[0].Spec.DataDir; got != data.DefaultFashionMNISTDir {
		t.Errorf("a fashion-mnist trial reads %q, want %q", got, data.DefaultFashionMNISTDir)
	}
}

// A sweep file in the nested layout: base, trials and grid take train's
// sections, a grid key written whole or nested, and trials are named by
// each grid key's last part. Overrides are keyed by the key, however the
// file spelled it.
func TestReadSweepNested(t *testing.T) {
	s, err := ReadSweep(writeSweep(t, `
base:
  data: {dataset: synthetic, synthetic_size: 256}
  schedule: {epochs: 2, batch_size: 32}
  model: {hidden: [16]}
trials:
  - name: sgd
    optimizer: {kind: sgd, momentum: 0.8}
  - name: adamw
    optimizer.kind: adamw
grid:
  optimizer: {lr: [0.01, 0.1]}
  graphs.enabled: [true]
`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tr := range s.Trials {
		names = append(names, tr.Name)
	}
	want := []string{"sgd,lr=0.01,enabled=true", "sgd,lr=0.1,enabled=true", "adamw,lr=0.01,enabled=true", "adamw,lr=0.1,enabled=true"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("trials %q, want %q", names, want)
	}
	first := s.Trials[0]
	if sp := first.Spec; sp.Optimizer != "sgd" || sp.Momentum != 0.8 || sp.LR != 0.01 || !sp.EnableGraphs || sp.Epochs != 2 || sp.BatchSize != 32 || sp.SyntheticSize != 256 {
		t.Errorf("trial %s: %+v", first.Name, sp)
	}
	if first.Overrides["optimizer.lr"] != 0.01 || first.Overrides["optimizer.kind"] != "sgd" || len(s.Warnings) != 0 {
		t.Errorf("overrides %v, warnings %v", first.Overrides, s.Warnings)
	}
}

// The flat keys of earlier releases still read, with a warning each
// (once, however many trials use them), and trials keep their names.
func TestReadSweepFlatKeysWarn(t *testing.T) {
	s, err := ReadSweep(writeSweep(t, "base: {dataset: synthetic, epochs: 2}\ntrials: [{name: a, lr: 0.01}, {name: b, lr: 0.1}]\ngrid: {batch_size: [16, 32]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Trials[0].Name != "a,batch_size=16" || s.Trials[0].Spec.LR != 0.01 || s.Trials[0].Overrides["optimizer.lr"] != 0.01 {
		t.Errorf("first trial %s: lr %v, overrides %v", s.Trials[0].Name, s.Trials[0].Spec.LR, s.Trials[0].Overrides)
	}
	got := strings.Join(s.Warnings, "\n")
	for _, w := range []string{"base: dataset is deprecated: write data.dataset", "base: epochs is deprecated: write schedule.epochs",
		"trials: lr is deprecated: write optimizer.lr", "grid: batch_size is deprecated: write schedule.batch_size"} {
		if strings.Count(got, w) != 1 {
			t.Errorf("warnings %q: want %q once", s.Warnings, w)
		}
	}
}

// A refusal names the key as the file wrote it: the path, or the flat key.
func TestReadSweepNamesKeysAsWritten(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"trials: [{name: fast, optimizer: {lr: 50}}]\n", `trial "fast": optimizer.lr: must be in (0, 10], got 50`},
		{"trials: [{name: fast, lr: 50}]\n", `trial "fast": lr: must be in (0, 10], got 50`},
		{"grid: {optimizer.lr: [0.1, 50]}\n", `trial "lr=50": optimizer.lr: must be in (0, 10], got 50`},
		{"base: {schedule: {max_steps: 5}}\ntrials: [{}]\n", "base: schedule.max_steps: is set by the sweep"},
		{"base: {optimizer: {lrr: 1}}\ntrials: [{}]\n", "base: unknown key optimizer.lrr"},
		{"grid: {optimizer: {lrr: [1]}}\n", "grid: unknown key optimizer.lrr"},
		{"trials: [{name: a, optimizer: {lr: 0.1}}]\ngrid: {lr: [0.2]}\n", `trial "a": optimizer.lr is set by both the trial and the grid`},
		{"base: {lr: 0.1, optimizer: {lr: 0.2}}\ntrials: [{}]\n", "base: lr and optimizer.lr both set optimizer.lr"},
	} {
		_, err := ReadSweep(writeSweep(t, c.text))
		if err == nil || !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.text, err, c.want)
		}
	}
}

// TestReadSweepNamesEveryTopLevelMistake: the sweep file's own keys are
// read by key, as tolaria train reads its file: every unknown key at
// once, by its path as written, with the key it is nearest; a value of
// the wrong shape by its key and the shape it must have. No message
// names a Go type or YAML's tags.
func TestReadSweepNamesEveryTopLevelMistake(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       string
	}{
		{"unknown keys, all at once", "base: {dataset: synthetic}\ngrd: {optimizer.lr: [0.1]}\ntrails: [{name: a}]\nslurm: {partiton: x, acount: y, mem: 8G}\n",
			"unknown keys grd (did you mean grid?); trails (did you mean trials?); slurm.partiton (did you mean slurm.partition?); slurm.acount (did you mean slurm.account?); " +
				"slurm.mem (slurm holds partition, account, time_limit, sbatch_args) (a sweep file has base:, trials:, grid:, and optionally launcher: and slurm:)"},
		{"a job's key at the top", "epochs: 2\ntrials: [{name: a}]\n", "unknown key epochs (a job's setting: put it under base:, or a trial's under trials:)"},
		{"base a list", "base: [1, 2]\ntrials: [{name: a}]\n", "base: must be a mapping of a job's settings (the keys of a tolaria train configuration file), e.g. base: {dataset: synthetic, schedule: {epochs: 2}}; got a list"},
		{"trials a mapping", "trials: {a: 1}\n", "trials: must be a list of trials, each a mapping of its settings, e.g. trials: [{name: fast, optimizer: {lr: 0.1}}]; got a mapping"},
		{"a trial a number", "trials: [5, {name: b}, [1]]\n", "trials[1]: must be a mapping of the trial's settings, e.g. {name: fast, optimizer: {lr: 0.1}}; got \"5\"; trials[3]: must be a mapping of the trial's settings, e.g. {name: fast, optimizer: {lr: 0.1}}; got a list"},
		{"grid a list", "grid: [1, 2]\n", "grid: must map keys to lists of values, e.g. grid: {optimizer.lr: [0.01, 0.1]}; got a list"},
		{"grid's value not a list", "grid: {lr: 0.1}\n", "grid: lr: must be a list of values, e.g. [0.01, 0.1]"},
		{"launcher a list", "trials: [{name: a}]\nlauncher: [slurm]\n", "launcher: must be the name of a launcher (local or slurm); got a list"},
		{"slurm a list", "trials: [{name: a}]\nslurm: [gpu]\n", "slurm: must be a mapping of its settings (partition, account, time_limit, sbatch_args), e.g. slurm: {partition: gpu}; got a list"},
		{"slurm values of the wrong shape", "trials: [{name: a}]\nslurm: {partition: [a, b], sbatch_args: --mem=8G}\n",
			"slurm.partition: must be a string; got a list; slurm.sbatch_args: must be a list of strings, e.g. [--mem=8G, --qos=normal]; got \"--mem=8G\""},
		{"a key twice", "trials: [{name: a}]\ntrials: [{name: b}]\n", "trials: is given twice; give each key once"},
		{"not a mapping", "- base\n", "must be a mapping of keys (a sweep file has base:, trials:, grid:, and optionally launcher: and slurm:)"},
		{"a train file", "data: {dataset: synthetic}\nschedule: {epochs: 2}\n", "is a file for tolaria train --config"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseSweep([]byte(c.text))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v\nwant %q", err, c.want)
			}
			for _, leak := range []string{"!!", "yaml.Node", "sweepYAML", "SlurmConfig", "not found in type", "unmarshal"} {
				if strings.Contains(err.Error(), leak) {
					t.Errorf("the message names %q: %v", leak, err)
				}
			}
			if strings.HasPrefix(c.name, "unknown") && !errors.Is(err, field.ErrUnknownKey) {
				t.Errorf("an unknown key's refusal is not field.ErrUnknownKey: %v", err)
			}
		})
	}
	// Aliases and an empty trial stand as they did.
	sw, err := parseSweep([]byte("base: &b {dataset: synthetic}\ntrials: [~, {name: b}]\nslurm: {partition: gpu, sbatch_args: [--mem=8G]}\n"))
	if err != nil || len(sw.Trials) != 2 || sw.Slurm.Partition != "gpu" || len(sw.Slurm.Args) != 1 {
		t.Errorf("a file of the right shapes: %v, %+v", err, sw)
	}
}

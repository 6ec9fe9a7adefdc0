package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/trainer"
)

// cnnLayers is a small CNN for the synthetic set's 64 features read as an
// [1, 8, 8] image: a convolution block of width channels, pooled to 4×4,
// a residual block of one convolution and batchnorm, and a classifier
// with dropout, as a flow-style layer list.
func cnnLayers(width int) string {
	conv := fmt.Sprintf("{conv: {out: %d, kernel: 3, padding: 1}}", width)
	return "[" + strings.Join([]string{
		conv, "{batchnorm: {}}", "{relu: {}}", "{maxpool: {kernel: 2}}",
		"{residual: [" + conv + ", {batchnorm: {}}]}", "{relu: {}}",
		"{flatten: {}}", "{linear: {out: 16}}", "{dropout: {p: 0.2}}", "{linear: {out: 10}}",
	}, ", ") + "]"
}

// cnnModelName is the name that a summary and a checkpoint give
// cnnLayers(width) on [1, 8, 8]: every layer with every setting, defaults
// filled in.
func cnnModelName(width int) string {
	conv := fmt.Sprintf("conv(out=%d,kernel=3,stride=1,padding=1)", width)
	bn := "batchnorm(eps=1e-05,momentum=0.1)"
	return "[1,8,8] " + conv + " " + bn + " relu maxpool(kernel=2,stride=2,padding=0) residual(" + conv + " " + bn +
		") relu flatten linear(out=16) dropout(p=0.2) linear(out=10) cross_entropy"
}

// cnnSweep is two trials of a layer-list CNN, one epoch of 8 steps each:
// narrow keeps base's 4 channels, wide has 8 and another lr.
var cnnSweep = `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 1
  batch_size: 32
  log_every: 4
  enable_graphs: true
  model:
    input: [1, 8, 8]
    layers: ` + cnnLayers(4) + `
trials:
  - {name: narrow, lr: 0.003}
  - {name: wide, lr: 0.01, model: {layers: ` + cnnLayers(8) + `}}
`

// cnnTrial is what a trial of cnnSweep must record: its model's name and,
// counted by hand, its parameters (convolutions (3·3·c_in)·c_out + c_out,
// batchnorms 2·C, linears in·out + out) and running state (2·C per
// batchnorm, then the dropout generator's 4 words).
type cnnTrial struct {
	name            string
	model           string
	params, running int
}

var cnnTrials = []cnnTrial{
	{"narrow", cnnModelName(4), 40 + 8 + 148 + 8 + 64*16 + 16 + 170, 8 + 8 + 4},
	{"wide", cnnModelName(8), 80 + 16 + 584 + 16 + 128*16 + 16 + 170, 16 + 16 + 4},
}

// TestSweepOfALayerListCNN: a sweep of a CNN described as a layer list
// runs on the CPU device as an MLP's does. Both trials succeed with
// captured graphs; each trial's summary, checkpoint, results row and
// journal entry name its own architecture, with finite figures; tolaria
// train with a trial's resolved configuration ends with the same
// parameters; the finished sweep resumes to nothing and refuses to run
// again in its directory. A trial with a bad layer list is refused before
// anything runs, with exit 2, naming the trial and the layer.
func TestSweepOfALayerListCNN(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, cnnSweep)
	sweepDir := filepath.Join(dir, "sweep")
	r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", sweepDir)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	res := readSweepResults(t, sweepDir)
	if len(res.Trials) != 2 || res.Counts["succeeded"] != 2 {
		t.Fatalf("results: %+v", res)
	}
	ended := journalEnds(t, sweepDir)
	for _, want := range cnnTrials {
		row := resultRow(t, res, want.name)
		if row.State != sweep.TrialSucceeded || row.Device != "cpu" || row.Rank == 0 || row.Summary == nil {
			t.Fatalf("trial %s: row %+v", want.name, row)
		}
		checkCNNSummary(t, want, *row.Summary)
		checkCNNSummary(t, want, readSummary(t, filepath.Join(row.RunDir, "summary.json")))
		ck, err := trainer.LoadCheckpoint(filepath.Join(row.RunDir, trainer.CheckpointFile))
		if err != nil {
			t.Fatalf("trial %s: %v", want.name, err)
		}
		if ck.Model != want.model || ck.Params != want.params || ck.Running != want.running || ck.Step != row.Summary.Steps {
			t.Errorf("trial %s: checkpoint of model %q, %d parameters, %d running-state values, step %d; want %q, %d, %d, step %d",
				want.name, ck.Model, ck.Params, ck.Running, ck.Step, want.model, want.params, want.running, row.Summary.Steps)
		}
		if got, ok := ended[want.name]; !ok || got.State != sweep.TrialSucceeded || got.Summary == nil || got.Summary.Model != want.model {
			t.Errorf("trial %s: the journal's end entry is %+v", want.name, got)
		}

		alone := filepath.Join(dir, "alone-"+want.name)
		tr := tolaria(t, dir, nil, "train", "--config", row.Config, "--run-dir", alone)
		if tr.code != 0 {
			t.Fatalf("tolaria train with trial %s's configuration: exit %d\n%s", want.name, tr.code, tr.stderr)
		}
		if sum := readSummary(t, filepath.Join(alone, "summary.json")); sum.Model != want.model || sum.ParamsSHA256 != row.Summary.ParamsSHA256 {
			t.Errorf("trial %s: model %q, params %s from tolaria train; %q, %s in the sweep",
				want.name, sum.Model, sum.ParamsSHA256, row.Summary.Model, row.Summary.ParamsSHA256)
		}
	}

	before := snapshot(t, sweepDir)
	if r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", sweepDir, "--device", "cpu"); r.code != 0 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Errorf("--resume of the finished sweep: exit %d\n%s", r.code, r.stderr)
	}
	if r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--sweep-dir", sweepDir); r.code != 2 || !strings.Contains(r.stderr, "holds a sweep (its results.json); continue it with --resume") {
		t.Errorf("the sweep again in its directory: exit %d\n%s", r.code, r.stderr)
	}
	sameFiles(t, before, snapshot(t, sweepDir))

	t.Run("bad layer list", func(t *testing.T) {
		for _, c := range []struct{ name, layers, want string }{
			{"no flatten", "[{conv: {out: 4, kernel: 3}}, {linear: {out: 10}}]",
				"layers[1] (linear): takes a vector, got the image [4, 6, 6]"},
			{"residual changes the shape", "[{conv: {out: 4, kernel: 3, padding: 1}}, {residual: [{conv: {out: 8, kernel: 3, padding: 1}}]}, {flatten: {}}, {linear: {out: 10}}]",
				"layers[1] (residual): its body turns [4, 8, 8] into [8, 8, 8]"},
			{"inside a residual", "[{conv: {out: 4, kernel: 3, padding: 1}}, {residual: [{maxpool: {kernel: 16}}]}, {flatten: {}}, {linear: {out: 10}}]",
				"layers[1].residual[0] (maxpool): its 16×16 window is larger than its input [4, 8, 8]"},
			// Checked on the dataset, when the sweep plans its trials.
			{"too few classes", "[{flatten: {}}, {linear: {out: 5}}]",
				"layers[1] (linear): the model ends in [5] but the dataset has 10 classes"},
		} {
			dir := t.TempDir()
			file := writeSweepFile(t, dir, cnnSweep+"  - {name: bad, model: {layers: "+c.layers+"}}\n")
			sweepDir := filepath.Join(dir, "sweep")
			r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", sweepDir)
			if want := "sweep file " + file + `: trial "bad": model.layers: ` + c.want; r.code != 2 || !strings.Contains(r.stderr, want) {
				t.Errorf("%s: exit %d, want 2 and %q\n%s", c.name, r.code, want, r.stderr)
			}
			if strings.Contains(r.stderr, "started on") {
				t.Errorf("%s: a trial started:\n%s", c.name, r.stderr)
			}
			if _, err := os.Stat(sweepDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: a refused sweep wrote %s", c.name, sweepDir)
			}
		}
	})
}

// checkCNNSummary fails the test unless s is a finished run of want's
// model, trained mostly by graph replay, with finite figures.
func checkCNNSummary(t *testing.T, want cnnTrial, s trainer.Summary) {
	t.Helper()
	if s.Model != want.model {
		t.Errorf("trial %s: summary of model %q, want %q", want.name, s.Model, want.model)
	}
	if s.Device != "cpu" || !s.GraphEnabled || s.Steps != 8 || s.GraphReplays == 0 || s.GraphReplays+s.EagerSteps != s.Steps {
		t.Errorf("trial %s: device %s, graphs %v, %d steps: %d replayed, %d eager; want 8 steps on cpu, replayed but for the warm-up",
			want.name, s.Device, s.GraphEnabled, s.Steps, s.GraphReplays, s.EagerSteps)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"train_loss", s.TrainLoss}, {"test_loss", s.TestLoss}, {"train_accuracy", s.TrainAccuracy}, {"test_accuracy", s.TestAccuracy}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || strings.HasSuffix(f.name, "accuracy") && f.v > 1 {
			t.Errorf("trial %s: %s %g", want.name, f.name, f.v)
		}
	}
}

// resultRow is the row of results.json for the trial name.
func resultRow(t *testing.T, res sweep.Results, name string) sweep.TrialResult {
	t.Helper()
	for _, row := range res.Trials {
		if row.Name == name {
			return row
		}
	}
	t.Fatalf("results.json has no row for trial %s: %+v", name, res.Trials)
	return sweep.TrialResult{}
}

// journalEnds reads a sweep's journal: each trial's row at its end entry.
func journalEnds(t *testing.T, sweepDir string) map[string]sweep.TrialResult {
	t.Helper()
	f, err := os.Open(filepath.Join(sweepDir, sweep.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ends := map[string]sweep.TrialResult{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			Event string             `json:"event"`
			Trial string             `json:"trial"`
			Row   *sweep.TrialResult `json:"row"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("journal line %q: %v", sc.Text(), err)
		}
		if e.Event == "end" && e.Row != nil {
			ends[e.Trial] = *e.Row
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ends
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
)

func TestTrainHelpListsEveryLayer(t *testing.T) {
	code, help, stderr := runTolaria(t, "train", "--help")
	if code != exitOK {
		t.Fatalf("train --help: exit %d: %s", code, stderr)
	}
	for _, k := range nn.LayerKinds() {
		if !strings.Contains(help, "\n  "+string(k)+" ") {
			t.Errorf("train --help does not list the layer %s", k)
		}
	}
	for _, want := range []string{"{out, kernel, stride (1), padding (0)}", "{kernel, stride (kernel), padding (0)}",
		"{eps (1e-5), momentum (0.1)}", "{p}", "[layers...]", "(h, w, c) order", "--layers string", "--input ints"} {
		if !strings.Contains(help, want) {
			t.Errorf("train --help does not say %q", want)
		}
	}
}

// A model whose shapes do not fit is a usage error, exit 2, that names
// the layer and both shapes, before anything is written.
func TestTrainRefusesAMisfitModel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	config := filepath.Join(t.TempDir(), "model.yaml")
	if err := os.WriteFile(config, []byte(`data: {dataset: synthetic}
model:
  input: [1, 8, 8]
  layers:
    - conv: {out: 4, kernel: 3, padding: 1}
    - residual: [{conv: {out: 8, kernel: 3, padding: 1}}, {relu: {}}]
    - flatten: {}
    - linear: {out: 10}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"residual", []string{"--config", config},
			"tolaria: invalid configuration: model.layers: layers[1] (residual): its body turns [4, 8, 8] into [8, 8, 8]; a residual block's output is added to its input, so it must keep its shape\n"},
		{"classes", []string{"--dataset", "synthetic", "--layers", "[{linear: {out: 3}}]"},
			"tolaria: invalid configuration: --layers: layers[0] (linear): the model ends in [3] but the dataset has 10 classes, so it must end in [10]; give the last layer out: 10\n"},
		{"unknown key", []string{"--dataset", "synthetic", "--layers", "[{maxpool: {size: 2}}]"},
			`tolaria: invalid configuration: --layers: layers[0] (maxpool): unknown key "size"; the keys of maxpool are kernel, stride, padding (set by flag --layers)` + "\n"},
		{"beside hidden", []string{"--dataset", "synthetic", "--hidden", "64", "--layers", "[{linear: {out: 10}}]"},
			"tolaria: invalid configuration: --layers: describes the whole model, but --hidden is set too (by flag --hidden); give the model either as layers or as --hidden and --activation\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runTolaria(t, append([]string{"train", "--device", "cpu", "--run-dir", dir}, c.args...)...)
			if code != exitUsage || stderr != c.want {
				t.Errorf("exit %d, stderr\n%s\nwant exit 2 and\n%s", code, stderr, c.want)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("a refused model left %s behind", dir)
			}
		})
	}
}

// examples/cnn.yaml is a model that resolves, and its parameters are those
// counted in docs/models.md.
func TestExampleCNN(t *testing.T) {
	m, err := job.ReadConfigFile("../../examples/cnn.yaml", extraKeys)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Warnings(); len(w) > 0 {
		t.Errorf("the example uses deprecated keys: %v", w)
	}
	spec := job.Default()
	if err := m.Apply(&spec); err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := nn.Net{Input: spec.Input, Layers: spec.Layers, Loss: nn.Loss(spec.Loss)}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Fits(784, 10); err != nil {
		t.Fatal(err)
	}
	// By hand (docs/models.md): convs 3·3·1·32 + 32 and 3·3·32·64 + 64, the
	// residual body's two 3·3·64·64 + 64, batchnorms 2·(32 + 3·64), linears
	// 7·7·64·128 + 128 and 128·10 + 10.
	if want := (9*32 + 32) + (9*32*64 + 64) + 2*(9*64*64+64) + 2*(32+3*64) + (7*7*64*128 + 128) + (128*10 + 10); want != 495946 || a.Params != want {
		t.Errorf("examples/cnn.yaml has %d parameters, docs/models.md counts 495946", a.Params)
	}
}

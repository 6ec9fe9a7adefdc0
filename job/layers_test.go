package job

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
)

const cnnYAML = `
- conv: {out: 32, kernel: 3, padding: 1}
- batchnorm: {}
- relu: {}
- maxpool: {kernel: 2}
- residual: [{conv: {out: 32, kernel: 3, padding: 1}}, {batchnorm: {}}, {relu: {}}]
- flatten: {}
- linear: {out: 10}
`

func cnnLayers() Layers {
	return Layers{
		nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU(), nn.MaxPool(2),
		nn.Residual(nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU()),
		nn.Flatten(), nn.Linear(10),
	}
}

func TestParseLayers(t *testing.T) {
	for _, c := range []struct {
		name string
		in   any
		want Layers
	}{
		{"the example CNN", cnnYAML, cnnLayers()},
		{"flow text", "[{conv: {out: 8, kernel: 5, stride: 2, padding: 2}}, {avgpool: {kernel: 3, stride: 1, padding: 1}}, {global_avgpool: {}}]",
			Layers{nn.Conv(8, 5).WithStride(2).WithPadding(2), nn.AvgPool(3).WithStride(1).WithPadding(1), nn.GlobalAvgPool()}},
		{"settings left out or null", "[{relu: }, {gelu: {}}, {tanh: null}, {sigmoid: {}}, {flatten: {}}, {dropout: {p: 0.25}}]",
			Layers{nn.ReLU(), nn.GELU(), nn.Tanh(), nn.Sigmoid(), nn.Flatten(), nn.Dropout(0.25)}},
		{"batchnorm settings", "[{batchnorm: {eps: 0.001, momentum: 0}}]", Layers{nn.BatchNorm().WithEps(0.001).WithMomentum(0)}},
		{"JSON numbers", []any{map[string]any{"linear": map[string]any{"out": float64(10)}}}, Layers{nn.Linear(10)}},
		{"text numbers", []any{map[string]any{"maxpool": map[string]any{"kernel": "2"}}}, Layers{nn.MaxPool(2)}},
		{"nothing", "", nil},
		{"nil", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseLayers(c.in)
			must(t, err)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %v\nwant %v", got, c.want)
			}
		})
	}
}

func TestParseLayersRefuses(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{
		{"[{convolution: {out: 8}}]",
			`model.layers: layers[0]: unknown layer "convolution"; layers are attention, avgpool, batchnorm, conv, dropout, embedding, flatten, gelu, global_avgpool, layernorm, linear, lm_head, maxpool, positional, relu, residual, sigmoid, tanh, transformer_block`},
		{"[{conv: {out: 8, kernal: 3}}]",
			`model.layers: layers[0] (conv): unknown key "kernal"; the keys of conv are out, kernel, stride, padding`},
		{"[{relu: {inplace: true}}]",
			`model.layers: layers[0] (relu): unknown key "inplace"; relu has no keys`},
		{"[{relu: {}}, {residual: [{relu: {}}, {batchnorm: {epsilon: 0.1}}]}]",
			`model.layers: layers[1].residual[1] (batchnorm): unknown key "epsilon"; the keys of batchnorm are eps, momentum`},
		{"[{conv: {out: 8}}]",
			"model.layers: layers[0] (conv): kernel is required, e.g. conv: {out: 32, kernel: 3}"},
		{"[{dropout: {}}]",
			"model.layers: layers[0] (dropout): p is required, e.g. dropout: {p: 0.5}"},
		{"[{linear: {out: 2.5}}]",
			"model.layers: layers[0] (linear): out: must be a whole number, got 2.5"},
		{"[{linear: 10}]",
			"model.layers: layers[0] (linear): give its settings as a map, e.g. linear: {out: 10}"},
		{"[{residual: {relu: {}}}]",
			"model.layers: layers[0] (residual): give its layers as a list, e.g. residual: [{conv: {out: 32, kernel: 3, padding: 1}}, {relu: {}}]"},
		{"[{rellu: {}}]",
			`model.layers: layers[0]: unknown layer "rellu" (did you mean relu?); layers are attention, avgpool, batchnorm, conv, dropout, embedding, flatten, gelu, global_avgpool, layernorm, linear, lm_head, maxpool, positional, relu, residual, sigmoid, tanh, transformer_block`},
		{"[{conv: {out: 8, kernel: 3}}, {flaten: {}}, {linear: {out: 2}}]",
			`model.layers: layers[1]: unknown layer "flaten" (did you mean flatten?); layers are attention, avgpool, batchnorm, conv, dropout, embedding, flatten, gelu, global_avgpool, layernorm, linear, lm_head, maxpool, positional, relu, residual, sigmoid, tanh, transformer_block`},
		{"[relu]",
			"model.layers: layers[0] is relu, a kind without its settings: write {relu: {}}"},
		{"[{relu: {}}, conv]",
			"model.layers: layers[1] is conv, a kind without its settings: write {conv: {out: 32, kernel: 3}}"},
		{"[[relu, flatten]]",
			"model.layers: layers[0] is [relu, flatten], not a layer: a layer is its kind with its settings, e.g. {conv: {out: 32, kernel: 3}} or {relu: {}}"},
		{"[{}]",
			"model.layers: layers[0] is empty: a layer is its kind with its settings, e.g. {conv: {out: 32, kernel: 3}} or {relu: {}}"},
		{"[{relu: {}, flatten: {}}]",
			"model.layers: layers[0] has 2 kinds, flatten and relu: write each layer as its own list item ([{flatten: {}}, {relu: {}}])"},
		{"[{residual: [{conv: {out: 8, kernel: 3}, relu: {}, batchnorm: {eps: 0.1}}]}]",
			"model.layers: layers[0].residual[0] has 3 kinds, batchnorm, conv and relu: write each layer as its own list item ([{batchnorm: {...}}, {conv: {...}}, {relu: {}}])"},
		{"{relu: {}}",
			"model.layers: is a list of layers, one kind each, not a map: write [{relu: {}}]"},
		{"{conv: {out: 8, kernel: 3}, relu: {}}",
			"model.layers: is a list of layers, one kind each, not a map: write [{conv: {...}}, {relu: {}}]"},
		{"relu",
			"model.layers: is a list of layers, one kind each, e.g. [{conv: {out: 32, kernel: 3}}, {relu: {}}]; got relu"},
	} {
		_, err := ParseLayers(c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", c.in, err, c.want)
		}
		if !field.Is(err, "model.layers") {
			t.Errorf("%s: not an error of model.layers", c.in)
		}
	}
}

// TestParseLayersRefusesInTheFileForm: layers read from a configuration
// file are refused with the fix written as the file writes it, list items
// one a line, and never in Go's map syntax.
func TestParseLayersRefusesInTheFileForm(t *testing.T) {
	for _, c := range []struct {
		name, file, want string
	}{
		{"two kinds in one item", "model:\n  layers:\n    - conv: {out: 8, kernel: 3}\n      relu: {}\n",
			"model.layers: layers[0] has 2 kinds, conv and relu: write each layer as its own list item (- conv: {...} then - relu: {})"},
		{"a map, not a list", "model:\n  layers:\n    conv: {out: 8, kernel: 3}\n    relu: {}\n",
			"model.layers: is a list of layers, one kind each, not a map: write - conv: {...} then - relu: {}"},
		{"a kind alone", "model:\n  layers:\n    - linear: {out: 8}\n    - gelu\n",
			"model.layers: layers[1] is gelu, a kind without its settings: write - gelu: {}"},
		{"a misspelt kind", "model:\n  layers:\n    - linear: {out: 8}\n    - rellu: {}\n",
			`model.layers: layers[1]: unknown layer "rellu" (did you mean relu?); layers are ` + kindNames()},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			must(t, os.WriteFile(path, []byte(c.file), 0o600))
			m, err := ReadConfigFile(path, nil)
			if err == nil {
				s := Default()
				err = m.Apply(&s)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n got %v\nwant it to hold %s", err, c.want)
			}
			if strings.Contains(err.Error(), "map[") {
				t.Errorf("the error shows Go's map syntax: %v", err)
			}
			if !field.Is(err, "model.layers") {
				t.Errorf("not an error of model.layers: %v", err)
			}
		})
	}
}

// A spec with layers survives the run's config.yaml and a worker's JSON.
func TestLayersRoundTrip(t *testing.T) {
	s := Default()
	s.Input, s.Layers = []int{1, 28, 28}, cnnLayers()
	raw, err := s.ConfigFile()
	must(t, err)
	path := filepath.Join(t.TempDir(), "config.yaml")
	must(t, os.WriteFile(path, raw, 0o600))
	m, err := ReadConfigFile(path, nil)
	must(t, err)
	if m.Has("model.hidden") {
		t.Errorf("config.yaml records model.hidden beside model.layers:\n%s", raw)
	}
	back := Default()
	must(t, m.Apply(&back))
	if !reflect.DeepEqual(back, s) {
		t.Errorf("read back from config.yaml:\n got %+v\nwant %+v\n%s", back, s, raw)
	}
	wire, err := json.Marshal(s)
	must(t, err)
	var got Spec
	must(t, json.Unmarshal(wire, &got))
	if !reflect.DeepEqual(got, s) {
		t.Errorf("read back from JSON:\n got %+v\nwant %+v", got, s)
	}
	// The shorthand's config.yaml is as it was: no input, no layers.
	raw, err = Default().ConfigFile()
	must(t, err)
	m, err = ReadConfigFile(writeFile(t, raw), nil)
	must(t, err)
	if model := m.Map()["model"].(map[string]any); len(model) != 3 || model["hidden"] == nil {
		t.Errorf("the default model is recorded as %v", model)
	}
}

func writeFile(t *testing.T, raw []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	must(t, os.WriteFile(path, raw, 0o600))
	return path
}

func TestSetLayers(t *testing.T) {
	s := Default()
	must(t, s.Set("model.layers", "[{linear: {out: 10}}]"))
	must(t, s.Set("model.input", "1,8,8"))
	if !reflect.DeepEqual(s.Layers, Layers{nn.Linear(10)}) || !reflect.DeepEqual(s.Input, []int{1, 8, 8}) {
		t.Errorf("layers %v input %v", s.Layers, s.Input)
	}
	err := s.Set("model.layers", "[{linear: {outs: 10}}]")
	if want := `model.layers: layers[0] (linear): unknown key "outs"; the keys of linear are out`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// synthetic is the synthetic dataset: 64 features, 10 classes.
func synthetic(t *testing.T) (Spec, data.Examples, data.Examples) {
	t.Helper()
	s := Default()
	s.Dataset, s.SyntheticSize, s.Epochs = "synthetic", 200, 1
	train, test, err := s.LoadData()
	must(t, err)
	return s, train, test
}

func TestPlanChecksTheModel(t *testing.T) {
	base, train, test := synthetic(t)
	for _, c := range []struct {
		name   string
		input  []int
		layers string
		want   string
	}{
		{"linear after conv", []int{1, 8, 8}, "[{conv: {out: 4, kernel: 3}}, {linear: {out: 10}}]",
			"model.layers: layers[1] (linear): takes a vector, got the image [4, 6, 6]; put flatten before it (it gives [144])"},
		{"conv on the dataset's vector", nil, "[{conv: {out: 4, kernel: 3}}, {flatten: {}}, {linear: {out: 10}}]",
			"model.layers: layers[0] (conv): takes an image [C, H, W], got the vector [64]; give model.input as [C, H, W]"},
		{"residual changes the shape", []int{1, 8, 8}, "[{residual: [{conv: {out: 4, kernel: 3, padding: 1}}]}, {flatten: {}}, {linear: {out: 10}}]",
			"model.layers: layers[0] (residual): its body turns [1, 8, 8] into [4, 8, 8]; a residual block's output is added to its input, so it must keep its shape"},
		{"pool window too large", []int{1, 8, 8}, "[{maxpool: {kernel: 4}}, {maxpool: {kernel: 4}}, {flatten: {}}, {linear: {out: 10}}]",
			"model.layers: layers[1] (maxpool): its 4×4 window is larger than its input [1, 2, 2] padded by 0: use a kernel of at most 2, or padding of at least 1"},
		{"classes", nil, "[{linear: {out: 32}}, {relu: {}}, {linear: {out: 5}}]",
			"model.layers: layers[2] (linear): the model ends in [5] but the dataset has 10 classes, so it must end in [10]; give the last layer out: 10"},
		{"input size", []int{1, 28, 28}, "[{flatten: {}}, {linear: {out: 10}}]",
			"model.input: [1, 28, 28] holds 784 values per example but the dataset has 64 features"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := base
			s.Input = c.input
			must(t, s.Set("model.layers", c.layers))
			_, err := s.Plan(train, test)
			if err == nil || err.Error() != c.want {
				t.Fatalf("Plan:\n got %v\nwant %s", err, c.want)
			}
			if c.input != nil && c.name != "input size" {
				// With the input's shape given, Validate finds it before the data is loaded.
				if err := s.Validate(); err == nil || err.Error() != c.want {
					t.Errorf("Validate:\n got %v\nwant %s", err, c.want)
				}
			}
		})
	}
}

// A CNN plans the net's step: the trainer gets the net and its outline
// (inputs, classes, loss), and the checkpoint knows it by its layers.
func TestLayersOfACNN(t *testing.T) {
	s, train, test := synthetic(t)
	s.Input = []int{1, 8, 8}
	must(t, s.Set("model.layers", "[{conv: {out: 4, kernel: 3}}, {batchnorm: {}}, {relu: {}}, {flatten: {}}, {dropout: {p: 0.1}}, {linear: {out: 10}}]"))
	cfg, err := s.config(train, test)
	must(t, err)
	if want := (nn.Spec{Inputs: 64, Outputs: 10, Act: device.ActNone, Loss: nn.LossCrossEntropy}); !reflect.DeepEqual(cfg.Spec, want) {
		t.Errorf("spec %+v, want the outline %+v", cfg.Spec, want)
	}
	want := "[1,8,8] conv(out=4,kernel=3,stride=1,padding=0) batchnorm(eps=1e-05,momentum=0.1) relu flatten dropout(p=0.1) linear(out=10) cross_entropy"
	if cfg.ModelName() != want {
		t.Errorf("name %q, want %q", cfg.ModelName(), want)
	}
	must(t, cfg.Validate())
	if _, err := s.Plan(train, test); err != nil {
		t.Fatal(err)
	}
}

// The MLP written as layers plans the same step as the shorthand, and the
// checkpoint knows it by the same name.
func TestLayersOfTheMLP(t *testing.T) {
	s, train, test := synthetic(t)
	s.Hidden, s.Activation = []int{32, 16}, "relu"
	short, err := s.config(train, test)
	must(t, err)
	s.Input = []int{1, 8, 8}
	must(t, s.Set("model.layers", "[{flatten: {}}, {linear: {out: 32}}, {relu: {}}, {linear: {out: 16}}, {relu: {}}, {linear: {out: 10}}]"))
	long, err := s.config(train, test)
	must(t, err)
	if !reflect.DeepEqual(long.Spec, short.Spec) {
		t.Errorf("layers plan %+v, the shorthand %+v", long.Spec, short.Spec)
	}
	if long.ModelName() != short.ModelName() || short.ModelName() != "64-32-16-10 relu cross_entropy" {
		t.Errorf("names %q and %q", long.ModelName(), short.ModelName())
	}
	if len(long.Net.Layers) != 6 || len(short.Net.Layers) != 0 {
		t.Errorf("Net recorded %v and %v", long.Net, short.Net)
	}
	must(t, long.Validate())
}

func TestInputGoesWithLayers(t *testing.T) {
	s := Default()
	s.Input = []int{1, 28, 28}
	err := s.Validate()
	want := "model.input: goes with model.layers: the model.hidden shorthand takes the dataset's features as they are; give the layers too, or leave model.input out"
	if err == nil || err.Error() != want || !field.Is(err, "model.input") {
		t.Errorf("got %v\nwant %s", err, want)
	}
	s.Input = []int{1, 28}
	must(t, s.Set("model.layers", "[{linear: {out: 10}}]"))
	var fe *field.Error
	if err := s.Validate(); !errors.As(err, &fe) || fe.Field != "model.input" {
		t.Errorf("a 2-D input: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package job

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cast"
	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Keys are a Spec's configuration keys, as written in a configuration
// file: the yaml names of its fields, with the model's under model. A
// build without the test switches (TestHooks) has no test-only key, so
// its commands neither offer nor accept one.
func Keys() []field.Name {
	t := reflect.TypeFor[Spec]()
	keys := make([]field.Name, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if testOnlyKeys[name] && !TestHooks {
			continue
		}
		if modelKeys[name] {
			name = "model." + name
		}
		keys = append(keys, field.Name(name))
	}
	return keys
}

// Usage says in a line what the setting key does; "" for a key that is
// not one of Keys.
func Usage(key field.Name) string { return usages[key] }

var usages = map[field.Name]string{
	"device":             "device to train on: auto, cpu or cuda",
	"enable_graphs":      "capture the training step into a graph and replay it",
	"epochs":             "number of epochs",
	"batch_size":         "examples per step",
	"lr":                 "peak learning rate",
	"optimizer":          "sgd or adamw",
	"momentum":           "SGD momentum",
	"weight_decay":       "decoupled weight decay",
	"clip_norm":          "clip gradients to this global norm (0: off)",
	"lr_warmup_steps":    "linear learning-rate warm-up steps before cosine decay",
	"seed":               "random seed (initialisation and data order)",
	"dataset":            "fashion-mnist, synthetic or text (byte windows of a text corpus, for sequence models)",
	"data_dir":           "directory of the Fashion-MNIST .gz files; for dataset text, a text file or a directory of them (left unset: " + data.DefaultFortunesDir + ")",
	"synthetic_size":     "training examples of the synthetic dataset",
	"context":            "input bytes per example of dataset text; the targets are the next bytes (0: " + strconv.Itoa(data.DefaultTextContext) + ")",
	"model.hidden":       "hidden layer sizes, e.g. 256,128",
	"model.activation":   "hidden activation: relu, gelu, tanh or none",
	"model.loss":         "cross_entropy or mse",
	"model.input":        "with model.layers, the input's shape: [C,H,W] for images, [features] for vectors (default: the dataset's features)",
	"model.layers":       "the model as a YAML list of layers, e.g. '[{conv: {out: 8, kernel: 3}}, {relu: {}}, {flatten: {}}, {linear: {out: 10}}]', in place of model.hidden and model.activation",
	"warmup_batches":     "eager steps before capture",
	"graph_pool_reuse":   "share the process-wide graph pool",
	"prefetch_to_device": "let staging copy ahead without the capture guard (switched off around each capture)",
	"ragged":             "short last batch: pad, drop or eager",
	"staging_slots":      "pinned host slots in the staging ring",
	"loaders":            "loader goroutines",
	"log_every":          "steps between metric reads and progress lines",
	"run_dir":            "run directory (default runs/<time>)",
	"resume":             "continue the run in the run directory from its checkpoint",
	"rank":               "this worker's stride shard of the training set (0..world-1)",
	"world":              "number of stride shards of the training set",
	"max_steps":          "stop (with a checkpoint) after this many steps in this invocation (0: no limit)",
	"checkpoint_every":   "also checkpoint every this many steps inside an epoch (0: at each epoch's end and at a stop only)",
	"cpu_threads":        "threads of the CPU device's kernels (0: GOMAXPROCS)",
	"slow_stage_copy_ms": "test only: slow every CPU-device staging copy by this many ms",
}

// testOnlyKeys are the settings only test builds have (TestHooks).
var testOnlyKeys = map[string]bool{"slow_stage_copy_ms": true}

// modelKeys nest under model: in a configuration file.
var modelKeys = map[string]bool{"hidden": true, "activation": true, "loss": true, "input": true, "layers": true}

// Get is the value of key in s, or nil for a key that is not one of Keys.
func (s Spec) Get(key field.Name) any {
	f, ok := specField(reflect.ValueOf(&s).Elem(), key)
	if !ok {
		return nil
	}
	return f.Interface()
}

// Set reads v into s's setting key: a value as a flag, an environment
// variable (text) or a YAML file (typed) gives it. Whole numbers refuse
// fractions (3.7 is an error, not 3), and layer sizes are a list or text
// such as "256,128". A refusal names key.
func (s *Spec) Set(key field.Name, v any) error {
	f, ok := specField(reflect.ValueOf(s).Elem(), key)
	if !ok {
		return field.Errorf(key, "is not a setting of a job")
	}
	var err error
	switch {
	case f.Type() == reflect.TypeFor[Layers]():
		var layers Layers
		if layers, err = ParseLayers(v); err != nil {
			return err // it names model.layers and the layer
		}
		f.Set(reflect.ValueOf(layers))
		return nil
	case f.Kind() == reflect.Int:
		var n int
		n, err = strictInt(v)
		f.SetInt(int64(n))
	case f.Kind() == reflect.Uint64:
		var n uint64
		n, err = strictUint(v)
		f.SetUint(n)
	case f.Kind() == reflect.Float64:
		var x float64
		x, err = cast.ToFloat64E(v)
		f.SetFloat(x)
	case f.Kind() == reflect.Bool:
		var b bool
		b, err = cast.ToBoolE(v)
		f.SetBool(b)
	case f.Kind() == reflect.String:
		var str string
		str, err = cast.ToStringE(v)
		f.SetString(str)
	default: // the layer sizes
		var sizes []int
		sizes, err = layerSizes(v)
		f.Set(reflect.ValueOf(sizes))
	}
	if err != nil {
		return field.Errorf(key, "cannot use %q: %w", fmt.Sprint(v), err)
	}
	return nil
}

// specField is the field of the Spec v that key names.
func specField(v reflect.Value, key field.Name) (reflect.Value, bool) {
	for i, k := range Keys() {
		if k == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// strictInt converts a flag, environment or YAML value to an int.
func strictInt(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return strconv.Atoi(strings.TrimSpace(x))
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("%v is not a whole number", x)
		}
		if x < math.MinInt64 || x >= math.MaxInt64 {
			return 0, fmt.Errorf("%v is out of range", x)
		}
		return int(x), nil
	}
	return cast.ToIntE(v)
}

// strictUint reads a non-negative whole number (the seed) as strictInt
// reads an int: a fraction is refused, never truncated, from a flag, an
// environment variable or a file alike.
func strictUint(v any) (uint64, error) {
	switch x := v.(type) {
	case string:
		return strconv.ParseUint(strings.TrimSpace(x), 10, 64)
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) || math.IsNaN(x) {
			return 0, fmt.Errorf("%v is not a whole number", x)
		}
		if x < 0 || x >= math.MaxUint64 {
			return 0, fmt.Errorf("%v is out of range: give a whole number from 0", x)
		}
		return uint64(x), nil
	case float32:
		return strictUint(float64(x))
	}
	return cast.ToUint64E(v)
}

// layerSizes reads hidden layer sizes from text ("256,128", "[256,128]")
// or a list.
func layerSizes(v any) ([]int, error) {
	var items []string
	switch x := v.(type) {
	case string:
		x = strings.Trim(strings.TrimSpace(x), "[]")
		if x != "" {
			items = strings.Split(x, ",")
		}
	case []string:
		items = x
	case []int:
		return append([]int(nil), x...), nil
	case []any:
		for _, it := range x {
			items = append(items, fmt.Sprint(it))
		}
	default:
		return nil, fmt.Errorf("want a list of whole numbers such as 256,128")
	}
	sizes := []int{}
	for _, it := range items {
		n, err := strictInt(strings.TrimSpace(it))
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", it)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// ConfigFile is the spec in the layout of a configuration file: the keys
// as written there, model.hidden, model.activation and model.loss nested
// under model:, so a run's recorded configuration can be read back.
func (s Spec) ConfigFile() ([]byte, error) {
	raw, err := yaml.Marshal(s)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	model := map[string]any{}
	for _, k := range []string{"hidden", "activation", "loss", "input", "layers"} {
		if v, ok := m[k]; ok {
			model[k] = v
		}
		delete(m, k)
	}
	if len(s.Layers) > 0 {
		// The layers are the model: the shorthand's keys would only
		// contradict them when the file is read back.
		delete(model, "hidden")
		delete(model, "activation")
	}
	m["model"] = model
	return yaml.Marshal(m)
}

// ReadConfigFile reads a configuration file in the layout ConfigFile
// writes. It refuses keys that are neither a Spec's (Keys) nor among
// extra, so that a typo is an error rather than a setting silently
// ignored, and it drops the keys in skip.
func ReadConfigFile(path string, extra []field.Name, skip ...field.Name) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("config file %s is not valid YAML: %w", path, err)
	}
	if err := CheckConfig(m, extra, skip...); err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return m, nil
}

// CheckConfig checks settings m in the layout of a configuration file
// (model keys nested under model:, or written model.hidden): it refuses
// keys that are neither a Spec's (Keys) nor among extra, naming them all,
// and it drops the keys in skip.
func CheckConfig(m map[string]any, extra []field.Name, skip ...field.Name) error {
	known := append(Keys(), extra...)
	var bad []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			key := field.Name(prefix + k)
			switch sub, isMap := val.(map[string]any); {
			case strings.Contains(k, "-"):
				bad = append(bad, fmt.Sprintf("%s (write %s)", key, strings.ReplaceAll(string(key), "-", "_")))
			case slices.Contains(skip, key):
				delete(m, k)
			case isMap && !slices.Contains(known, key):
				walk(string(key)+".", sub)
			case !slices.Contains(known, key):
				bad = append(bad, string(key))
			}
		}
	}
	walk("", m)
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("unknown keys %s (keys are written with underscores; model.hidden, model.activation, model.loss, model.input and model.layers nest under model:)",
			strings.Join(bad, ", "))
	}
	return nil
}

// Settings flattens settings that CheckConfig accepted into their keys:
// model: {hidden: ...} becomes model.hidden.
func Settings(m map[string]any) map[field.Name]any {
	out := map[field.Name]any{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			key := field.Name(prefix + k)
			if sub, isMap := val.(map[string]any); isMap && Usage(key) == "" {
				walk(string(key)+".", sub)
				continue
			}
			out[key] = val
		}
	}
	walk("", m)
	return out
}

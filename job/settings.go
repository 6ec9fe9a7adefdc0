package job

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Keys are a Spec's configuration keys, in the order of its fields: each
// a path of sections (optimizer.lr), as a configuration file nests it. A
// build without the test switches (TestHooks) has no test-only key, so
// its commands neither offer nor accept one.
func Keys() []field.Name {
	t := reflect.TypeFor[Spec]()
	keys := make([]field.Name, 0, t.NumField())
	for i := range t.NumField() {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("key"), ",")
		if testOnlyKeys[field.Name(key)] && !TestHooks {
			continue
		}
		keys = append(keys, field.Name(key))
	}
	return keys
}

// Flat is key's spelling before keys were nested in sections: lr for
// optimizer.lr; key itself for one that never moved (seed, model.hidden).
// A flat spelling still names the key's flag (--lr) and TOLARIA_*
// variable (TOLARIA_LR), and configuration files may use it for one more
// release, with a warning (field.Setting.Warning).
func Flat(key field.Name) field.Name {
	if f, ok := specField(reflect.TypeFor[Spec](), key); ok {
		if flat := f.Tag.Get("flat"); flat != "" {
			return field.Name(flat)
		}
	}
	return key
}

// Key is the key that name sets: name itself when it is a key, the key
// of a deprecated flat spelling (optimizer.lr for lr); false for a name
// that is neither.
func Key(name field.Name) (field.Name, bool) {
	for _, k := range Keys() {
		if k == name || Flat(k) == name {
			return k, true
		}
	}
	return "", false
}

// Usage says in a line what the setting key (or its flat spelling) does;
// "" for a name that is neither.
func Usage(key field.Name) string {
	k, _ := Key(key)
	return usages[k]
}

var usages = map[field.Name]string{
	"device":                     "device to train on: auto, cpu or cuda",
	"graphs.enabled":             "capture the training step into a graph and replay it",
	"schedule.epochs":            "number of epochs",
	"schedule.batch_size":        "examples per step",
	"optimizer.lr":               "peak learning rate",
	"optimizer.kind":             "sgd or adamw",
	"optimizer.momentum":         "SGD momentum",
	"optimizer.weight_decay":     "decoupled weight decay",
	"optimizer.clip_norm":        "clip gradients to this global norm (0: off)",
	"optimizer.warmup_steps":     "linear learning-rate warm-up steps before cosine decay",
	"seed":                       "random seed (initialisation and data order)",
	"data.dataset":               "fashion-mnist, synthetic or text (byte windows of a text corpus, for sequence models)",
	"data.dir":                   "directory of the Fashion-MNIST .gz files (left unset: " + data.DefaultFashionMNISTDir + "); for dataset text, a text file or a directory of them (left unset: " + data.DefaultFortunesDir + ")",
	"data.synthetic_size":        "training examples of the synthetic dataset",
	"data.context":               "input bytes per example of dataset text; the targets are the next bytes (0: model.input's T when given, else " + strconv.Itoa(data.DefaultTextContext) + ")",
	"model.hidden":               "hidden layer sizes, e.g. 256,128",
	"model.activation":           "hidden activation: relu, gelu, tanh or none",
	"model.loss":                 "cross_entropy or mse",
	"model.input":                "with model.layers, the input's shape: [C,H,W] for images, [features] for vectors (default: the dataset's features)",
	"model.layers":               "the model as a YAML list of layers, e.g. '[{conv: {out: 8, kernel: 3}}, {relu: {}}, {flatten: {}}, {linear: {out: 10}}]', in place of model.hidden and model.activation",
	"graphs.warmup_batches":      "eager steps before capture",
	"graphs.pool_reuse":          "share the process-wide graph pool",
	"staging.prefetch_to_device": "let staging copy ahead without the capture guard (switched off around each capture)",
	"data.ragged":                "short last batch: pad, drop, eager or graph",
	"staging.slots":              "pinned host slots in the staging ring",
	"data.loaders":               "loader goroutines",
	"schedule.log_every":         "steps between metric reads and progress lines",
	"run_dir":                    "run directory (default runs/<time>)",
	"resume":                     "continue the run in the run directory from its checkpoint",
	"data.rank":                  "this worker's stride shard of the training set (0..world-1)",
	"data.world":                 "number of stride shards of the training set",
	"schedule.max_steps":         "stop (with a checkpoint) after this many steps in this invocation (0: no limit)",
	"schedule.checkpoint_every":  "also checkpoint every this many steps inside an epoch (0: at each epoch's end and at a stop only)",
	"cpu_threads":                "threads of the CPU device's kernels (0: GOMAXPROCS)",
	"staging.slow_copy_ms":       "test only: slow every CPU-device staging copy by this many ms",
}

// testOnlyKeys are the settings only test builds have (TestHooks).
var testOnlyKeys = map[field.Name]bool{"staging.slow_copy_ms": true}

// Get is the value of key (or its flat spelling) in s, or nil for a
// name that is neither.
func (s Spec) Get(key field.Name) any {
	f, ok := specValue(reflect.ValueOf(&s).Elem(), key)
	if !ok {
		return nil
	}
	return f.Interface()
}

// Set reads v into s's setting key (or its flat spelling): a value as a
// flag, an environment variable (text) or a YAML file (typed) gives it.
// Whole numbers refuse fractions (3.7 is an error, not 3), and layer
// sizes are a list or text such as "256,128" (field.Assign). A refusal
// names key as given.
func (s *Spec) Set(key field.Name, v any) error {
	f, ok := specValue(reflect.ValueOf(s).Elem(), key)
	if !ok {
		return field.Errorf(key, "is not a setting of a job")
	}
	if f.Type() == reflect.TypeFor[Layers]() {
		layers, err := ParseLayers(v)
		if err != nil {
			return err // it names model.layers and the layer
		}
		f.Set(reflect.ValueOf(layers))
		return nil
	}
	if err := field.Assign(f.Addr().Interface(), v); err != nil {
		return field.Errorf(key, "%w", err)
	}
	return nil
}

// specField is the field of Spec that key (or its flat spelling) names.
func specField(t reflect.Type, name field.Name) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("key"), ",")
		if testOnlyKeys[field.Name(key)] && !TestHooks {
			continue
		}
		if field.Name(key) == name || (f.Tag.Get("flat") != "" && field.Name(f.Tag.Get("flat")) == name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// specValue is the field of the Spec v that key (or its flat spelling)
// names.
func specValue(v reflect.Value, key field.Name) (reflect.Value, bool) {
	f, ok := specField(v.Type(), key)
	if !ok {
		return reflect.Value{}, false
	}
	return v.FieldByIndex(f.Index), true
}

// ConfigFile is the spec as a configuration file: every key nested in
// its sections (optimizer: {kind: adamw, lr: 0.001}), the optional ones
// left out at zero, so a run's recorded configuration reads back to the
// same spec (ReadConfigFile, Settings.Apply).
func (s Spec) ConfigFile() ([]byte, error) {
	t := reflect.TypeFor[Spec]()
	root := map[string]any{}
	for _, key := range Keys() {
		f, _ := specField(t, key)
		v := reflect.ValueOf(s).FieldByIndex(f.Index)
		if strings.HasSuffix(f.Tag.Get("key"), ",omitempty") && (v.IsZero() || v.Kind() == reflect.Slice && v.Len() == 0) {
			continue
		}
		if len(s.Layers) > 0 && (key == "model.hidden" || key == "model.activation") {
			// The layers are the model: the shorthand's keys would only
			// contradict them when the file is read back.
			continue
		}
		m := root
		path := strings.Split(string(key), ".")
		for _, section := range path[:len(path)-1] {
			if _, ok := m[section]; !ok {
				m[section] = map[string]any{}
			}
			m = m[section].(map[string]any)
		}
		m[path[len(path)-1]] = v.Interface()
	}
	return yaml.Marshal(root)
}

// Schema is the keys of a job's configuration file: Keys, their flat
// spellings (deprecated), and extra, the keys of the command that reads
// it (metrics_addr, ...).
func Schema(extra ...field.Name) field.Schema {
	sc := field.Schema{Keys: append(Keys(), extra...), Flat: map[field.Name]field.Name{}}
	for _, k := range Keys() {
		if f := Flat(k); f != k {
			sc.Flat[f] = k
		}
	}
	return sc
}

// Settings are what a configuration file gives, in the file's order, each
// with its key as the file wrote it.
type Settings []field.Setting

// ParseSettings reads a job's settings from the YAML mapping n, nested
// in sections or written as their deprecated flat keys, refusing every
// key that is neither a job's nor among extra (see field.Schema).
func ParseSettings(n *yaml.Node, extra ...field.Name) (Settings, error) {
	st, err := Schema(extra...).Settings(n)
	return Settings(st), err
}

// trainCommand is the command whose files ReadConfigFile reads.
const trainCommand = "tolaria train --config"

// ReadConfigFile reads a configuration file (nested, as ConfigFile
// writes it, or with the deprecated flat keys of earlier releases): a
// key that is neither a job's nor among extra is refused, so that a typo
// is an error rather than a setting silently ignored, and the keys in
// skip are dropped.
func ReadConfigFile(path string, extra []field.Name, skip ...field.Name) (Settings, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	sc := Schema(extra...)
	sc.Command = trainCommand
	st, err := sc.Read(raw)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return Settings(st).Without(skip...), nil
}

// OtherRunError is a run directory whose recorded configuration is
// another command's: the directory of a tolaria rl run, read as a
// training run's. Its message says so in the run's terms (the user named
// a run directory, not a configuration file); the caller adds what to do.
type OtherRunError struct {
	Dir     string
	File    string   // the configuration file, in Dir
	Command string   // the command that made the run: "tolaria rl"
	Keys    []string // the file's keys that tell
}

func (e *OtherRunError) Error() string {
	keys := e.Keys[:min(len(e.Keys), 2)] // two tell enough
	return fmt.Sprintf("%s is a %s run (its %s has %s), not a tolaria train run",
		e.Dir, e.Command, filepath.Base(e.File), strings.Join(keys, ", "))
}

// Unwrap is field.ErrOtherCommand, as the file's own refusal is.
func (e *OtherRunError) Unwrap() error { return field.ErrOtherCommand }

// ReadRunConfig reads path, the configuration file a run recorded in its
// directory dir, as ReadConfigFile reads it; a file of another command's
// (a tolaria rl run's config.yaml) is an *OtherRunError.
func ReadRunConfig(dir, path string, extra []field.Name, skip ...field.Name) (Settings, error) {
	st, err := ReadConfigFile(path, extra, skip...)
	if errors.Is(err, field.ErrOtherCommand) {
		raw, rerr := os.ReadFile(path)
		if rerr != nil {
			return nil, err
		}
		sc := Schema(extra...)
		sc.Command = trainCommand
		if command, keys := sc.Whose(raw); command != "" {
			return nil, &OtherRunError{Dir: dir, File: path, Command: strings.TrimSuffix(command, " --config"), Keys: keys}
		}
	}
	return st, err
}

// Without is st less the settings of keys.
func (st Settings) Without(keys ...field.Name) Settings {
	return slices.DeleteFunc(slices.Clone(st), func(s field.Setting) bool { return slices.Contains(keys, s.Key) })
}

// Has reports whether st sets key.
func (st Settings) Has(key field.Name) bool {
	return slices.ContainsFunc(st, func(s field.Setting) bool { return s.Key == key })
}

// Written is how the file wrote key ("" when it did not give it).
func (st Settings) Written(key field.Name) field.Name {
	for _, s := range st {
		if s.Key == key {
			return s.Written
		}
	}
	return ""
}

// Apply sets st into spec in the order of their keys (so the same
// settings give the same spec however a file orders them). A refusal
// names the key as the file wrote it.
func (st Settings) Apply(spec *Spec) error {
	sorted := slices.SortedFunc(slices.Values(st), func(a, b field.Setting) int { return strings.Compare(string(a.Key), string(b.Key)) })
	for _, s := range sorted {
		if _, isJob := Key(s.Key); !isJob {
			continue // a key of the command's (extra)
		}
		if err := spec.Set(s.Key, s.Value); err != nil {
			return st.Spell(err)
		}
	}
	return nil
}

// Spell is err with every key that st gave in a deprecated flat
// spelling named as written, as the user knows it (the last setting of a
// key, when st holds several).
func (st Settings) Spell(err error) error {
	return field.Respell(err, func(k field.Name) string {
		// The last setting of k is the one in force (a trial's over the
		// sweep's base).
		for _, s := range slices.Backward(st) {
			if s.Key == k && s.Deprecated() {
				return string(s.Written)
			} else if s.Key == k {
				return ""
			}
		}
		return ""
	})
}

// Warnings are the deprecation warnings of st's flat spellings, one a
// key.
func (st Settings) Warnings() []string {
	var out []string
	for _, s := range st {
		if w := s.Warning(); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// Map is st as nested maps, every key under its sections: the layout a
// configuration layer such as viper's takes.
func (st Settings) Map() map[string]any {
	root := map[string]any{}
	for _, s := range st {
		m := root
		path := strings.Split(string(s.Key), ".")
		for _, section := range path[:len(path)-1] {
			sub, ok := m[section].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[section] = sub
			}
			m = sub
		}
		m[path[len(path)-1]] = s.Value
	}
	return root
}

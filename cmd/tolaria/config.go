package main

import (
	"errors"
	"fmt"
	"github.com/tolaria-ml/tolaria/worker"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
)

// errUsage marks errors in the user's configuration; they exit with 2.
var errUsage = errors.New("invalid configuration")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// option is one configuration key: its flag, its default and how to read
// it into the job specification. Keys with a dot nest in YAML files
// (model.hidden) and use an underscore in TOLARIA_* variables.
type option struct {
	key, flag, usage string
	def              any
	set              func(s *job.Spec, v any) error
}

func intOpt(p func(*job.Spec) *int) func(*job.Spec, any) error {
	return func(s *job.Spec, v any) (err error) { *p(s), err = strictInt(v); return }
}

// strictInt converts a flag, environment or YAML value to an int, refusing
// fractions (3.7 is an error, not 3).
func strictInt(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return strconv.Atoi(strings.TrimSpace(x))
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("%v is not a whole number", x)
		}
		return int(x), nil
	}
	return cast.ToIntE(v)
}
func floatOpt(p func(*job.Spec) *float64) func(*job.Spec, any) error {
	return func(s *job.Spec, v any) (err error) { *p(s), err = cast.ToFloat64E(v); return }
}
func boolOpt(p func(*job.Spec) *bool) func(*job.Spec, any) error {
	return func(s *job.Spec, v any) (err error) { *p(s), err = cast.ToBoolE(v); return }
}
func strOpt(p func(*job.Spec) *string) func(*job.Spec, any) error {
	return func(s *job.Spec, v any) (err error) { *p(s), err = cast.ToStringE(v); return }
}

func options() []option {
	d := job.Default()
	return []option{
		{"device", "device", "device to train on: auto, cpu or cuda", d.Device, strOpt(func(s *job.Spec) *string { return &s.Device })},
		{"enable_graphs", "enable-graphs", "capture the training step into a graph and replay it", d.EnableGraphs, boolOpt(func(s *job.Spec) *bool { return &s.EnableGraphs })},
		{"epochs", "epochs", "number of epochs", d.Epochs, intOpt(func(s *job.Spec) *int { return &s.Epochs })},
		{"batch_size", "batch-size", "examples per step", d.BatchSize, intOpt(func(s *job.Spec) *int { return &s.BatchSize })},
		{"lr", "lr", "peak learning rate", d.LR, floatOpt(func(s *job.Spec) *float64 { return &s.LR })},
		{"optimizer", "optimizer", "sgd or adamw", d.Optimizer, strOpt(func(s *job.Spec) *string { return &s.Optimizer })},
		{"momentum", "momentum", "SGD momentum", d.Momentum, floatOpt(func(s *job.Spec) *float64 { return &s.Momentum })},
		{"weight_decay", "weight-decay", "decoupled weight decay", d.WeightDecay, floatOpt(func(s *job.Spec) *float64 { return &s.WeightDecay })},
		{"clip_norm", "clip-norm", "clip gradients to this global norm (0: off)", d.ClipNorm, floatOpt(func(s *job.Spec) *float64 { return &s.ClipNorm })},
		{"lr_warmup_steps", "lr-warmup-steps", "linear learning-rate warm-up steps before cosine decay", d.WarmupSteps, intOpt(func(s *job.Spec) *int { return &s.WarmupSteps })},
		{"seed", "seed", "random seed (initialisation and data order)", int(d.Seed), func(s *job.Spec, v any) (err error) { s.Seed, err = cast.ToUint64E(v); return }},
		{"dataset", "dataset", "fashion-mnist or synthetic", d.Dataset, strOpt(func(s *job.Spec) *string { return &s.Dataset })},
		{"data_dir", "data-dir", "directory of the Fashion-MNIST .gz files", d.DataDir, strOpt(func(s *job.Spec) *string { return &s.DataDir })},
		{"synthetic_size", "synthetic-size", "training examples of the synthetic dataset", d.SyntheticSize, intOpt(func(s *job.Spec) *int { return &s.SyntheticSize })},
		{"model.hidden", "hidden", "hidden layer sizes, e.g. 256,128", d.Hidden, func(s *job.Spec, v any) error { return setHidden(s, v) }},
		{"model.activation", "activation", "hidden activation: relu, gelu or none", d.Activation, strOpt(func(s *job.Spec) *string { return &s.Activation })},
		{"model.loss", "loss", "cross_entropy or mse", d.Loss, strOpt(func(s *job.Spec) *string { return &s.Loss })},
		{"warmup_batches", "warmup-batches", "eager steps before capture", d.WarmupBatches, intOpt(func(s *job.Spec) *int { return &s.WarmupBatches })},
		{"graph_pool_reuse", "graph-pool-reuse", "share the process-wide graph pool", d.GraphPoolReuse, boolOpt(func(s *job.Spec) *bool { return &s.GraphPoolReuse })},
		{"prefetch_to_device", "prefetch-to-device", "let staging copy ahead without the capture guard (switched off around each capture)", d.PrefetchToDevice, boolOpt(func(s *job.Spec) *bool { return &s.PrefetchToDevice })},
		{"ragged", "ragged", "short last batch: pad, drop or eager", d.Ragged, strOpt(func(s *job.Spec) *string { return &s.Ragged })},
		{"staging_slots", "staging-slots", "pinned host slots in the staging ring", d.Slots, intOpt(func(s *job.Spec) *int { return &s.Slots })},
		{"loaders", "loaders", "loader goroutines", d.Loaders, intOpt(func(s *job.Spec) *int { return &s.Loaders })},
		{"log_every", "log-every", "steps between metric reads and progress lines", d.LogEvery, intOpt(func(s *job.Spec) *int { return &s.LogEvery })},
		{"run_dir", "run-dir", "run directory (default runs/<time>)", "", strOpt(func(s *job.Spec) *string { return &s.RunDir })},
		{"resume", "resume", "continue the run in --run-dir from its checkpoint", false, boolOpt(func(s *job.Spec) *bool { return &s.Resume })},
		{"rank", "rank", "this worker's stride shard of the training set (0..world-1)", d.Rank, intOpt(func(s *job.Spec) *int { return &s.Rank })},
		{"world", "world", "number of stride shards of the training set", d.World, intOpt(func(s *job.Spec) *int { return &s.World })},
		{"max_steps", "max-steps", "stop (with a checkpoint) after this many steps in this invocation (0: no limit)", 0, intOpt(func(s *job.Spec) *int { return &s.MaxSteps })},
		{"slow_stage_copy_ms", "slow-stage-copy-ms", "test only: slow every CPU-device staging copy by this many ms", 0.0, floatOpt(func(s *job.Spec) *float64 { return &s.SlowStageCopyMS })},
	}
}

func setHidden(s *job.Spec, v any) error {
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
		s.Hidden = append([]int(nil), x...)
		return nil
	case []any:
		for _, it := range x {
			items = append(items, fmt.Sprint(it))
		}
	default:
		return fmt.Errorf("want a list of layer sizes such as 256,128")
	}
	s.Hidden = []int{}
	for _, it := range items {
		n, err := strictInt(strings.TrimSpace(it))
		if err != nil {
			return fmt.Errorf("%q is not a layer size", it)
		}
		s.Hidden = append(s.Hidden, n)
	}
	return nil
}

// flagOf spells a configuration key as its flag, for messages; "" for a
// key with no flag.
func flagOf(key field.Name) string {
	for _, o := range options() {
		if o.key == string(key) {
			return "--" + o.flag
		}
	}
	if f, ok := extraKeys[string(key)]; ok {
		return "--" + f
	}
	return ""
}

// settings are the non-job keys of train.
type settings struct {
	warnings                                 []string // unknown TOLARIA_* variables, to log
	config, summaryJSON, metricsAddr, worker string
	isolate                                  bool
	workerStart                              time.Duration // the worker's start-up limit
	metricsLinger                            time.Duration // /metrics stays up this long after the run
}

func addFlags(fs *pflag.FlagSet) {
	for _, o := range options() {
		switch d := o.def.(type) {
		case bool:
			fs.Bool(o.flag, d, o.usage)
		case int:
			fs.Int(o.flag, d, o.usage)
		case float64:
			fs.Float64(o.flag, d, o.usage)
		case []int:
			fs.IntSlice(o.flag, d, o.usage)
		default:
			fs.String(o.flag, fmt.Sprint(d), o.usage)
		}
	}
	fs.String("config", "", "YAML configuration file (flags > TOLARIA_* environment > file > defaults)")
	fs.String("summary-json", "", "also write summary.json to this path")
	fs.String("metrics-addr", "", "serve Prometheus metrics here, e.g. :9464 (loopback when no host is given)")
	fs.String("worker", "", "path of the tolaria-worker binary (default: next to tolaria, or $TOLARIA_WORKER)")
	fs.Bool("isolate", false, "run a CPU job in a tolaria-worker process too (GPU jobs always are)")
	fs.Duration("worker-start-timeout", worker.DefaultHelloTimeout, "how long a tolaria-worker may take to open its device before it is killed")
	fs.Duration("metrics-linger", 15*time.Second, "with --metrics-addr, keep serving /metrics this long after the run so the final values are scraped (0: exit at once)")
}

var extraKeys = map[string]string{"summary_json": "summary-json", "metrics_addr": "metrics-addr", "worker": "worker", "isolate": "isolate",
	"worker_start_timeout": "worker-start-timeout", "metrics_linger": "metrics-linger"}

// envKey turns a configuration key into its TOLARIA_* variable's suffix.
var envKey = strings.NewReplacer(".", "_", "-", "_")

// otherEnv are TOLARIA_* variables that are not configuration keys.
var otherEnv = map[string]bool{"TOLARIA_CONFIG": true, "TOLARIA_WORKER": true, "TOLARIA_PROTOCOL_FD": true}

// unknownEnv lists the TOLARIA_* variables in env that set no key, each
// with the variable meant when one is close. Test switches
// (TOLARIA_E2E_*, TOLARIA_REQUIRE_*) are not configuration and are let be.
func unknownEnv(env []string, known map[string]bool) []string {
	byVar := map[string]string{}
	for k := range known {
		byVar["TOLARIA_"+strings.ToUpper(envKey.Replace(k))] = k
	}
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "TOLARIA_") || otherEnv[name] || byVar[name] != "" ||
			strings.HasPrefix(name, "TOLARIA_E2E_") || strings.HasPrefix(name, "TOLARIA_REQUIRE_") {
			continue
		}
		msg := name + " is not a tolaria setting and is ignored"
		suffix := strings.TrimPrefix(name, "TOLARIA_")
		for v := range byVar {
			if strings.HasSuffix(v, "_"+suffix) {
				msg += "; did you mean " + v + "?"
				break
			}
		}
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// resolve reads flags, TOLARIA_* variables and the YAML file into a spec,
// with precedence flag > environment > file > default.
func resolve(fs *pflag.FlagSet) (job.Spec, settings, error) {
	v := viper.New()
	v.SetEnvPrefix("TOLARIA")
	v.SetEnvKeyReplacer(envKey)
	v.AutomaticEnv()
	opts := options()
	known := map[string]bool{}
	for _, o := range opts {
		known[o.key] = true
		v.SetDefault(o.key, o.def)
		if err := v.BindPFlag(o.key, fs.Lookup(o.flag)); err != nil {
			return job.Spec{}, settings{}, err
		}
	}
	for key, flag := range extraKeys {
		known[key] = true
		if err := v.BindPFlag(key, fs.Lookup(flag)); err != nil {
			return job.Spec{}, settings{}, err
		}
	}
	var set settings
	set.warnings = unknownEnv(os.Environ(), known)
	set.config, _ = fs.GetString("config")
	if set.config == "" {
		set.config = os.Getenv("TOLARIA_CONFIG")
	}
	var given map[string]any
	if set.config != "" {
		var err error
		if given, err = readConfigFile(v, set.config, known, nil); err != nil {
			return job.Spec{}, settings{}, err
		}
	}
	if resume, _ := cast.ToBoolE(v.Get("resume")); resume && v.GetString("run_dir") != "" {
		// A resumed run continues with the settings it was started with:
		// the run's config.yaml is the file layer, under a --config file
		// (merged again on top of it), env and flags.
		base := filepath.Join(v.GetString("run_dir"), coordinator.ConfigFile)
		if _, err := os.Stat(base); err == nil {
			if _, err := readConfigFile(v, base, known, perInvocation); err != nil {
				return job.Spec{}, settings{}, err
			}
			if given != nil {
				// Read afresh: viper may share the first read's nested maps.
				if _, err := readConfigFile(v, set.config, known, nil); err != nil {
					return job.Spec{}, settings{}, err
				}
			}
		}
	}
	spec := job.Default()
	for _, o := range opts {
		if err := o.set(&spec, v.Get(o.key)); err != nil {
			return job.Spec{}, settings{}, usagef("%s: cannot use %q: %v (set by %s)", o.flag, fmt.Sprint(v.Get(o.key)), err, source(fs, o))
		}
	}
	set.summaryJSON, set.metricsAddr, set.worker = v.GetString("summary_json"), v.GetString("metrics_addr"), v.GetString("worker")
	var err error
	if set.isolate, err = cast.ToBoolE(v.Get("isolate")); err != nil {
		return job.Spec{}, settings{}, usagef("isolate: %v", err)
	}
	if set.workerStart, err = cast.ToDurationE(v.Get("worker_start_timeout")); err != nil || set.workerStart <= 0 {
		return job.Spec{}, settings{}, usagef("worker-start-timeout: cannot use %q: give a positive duration such as 30s", fmt.Sprint(v.Get("worker_start_timeout")))
	}
	if set.metricsLinger, err = cast.ToDurationE(v.Get("metrics_linger")); err != nil || set.metricsLinger < 0 {
		return job.Spec{}, settings{}, usagef("metrics-linger: cannot use %q: give a duration such as 15s, or 0", fmt.Sprint(v.Get("metrics_linger")))
	}
	if err := spec.Validate(); err != nil {
		return job.Spec{}, settings{}, usagef("%v", err)
	}
	return spec, set, nil
}

func source(fs *pflag.FlagSet, o option) string {
	if f := fs.Lookup(o.flag); f != nil && f.Changed {
		return "flag --" + o.flag
	}
	env := "TOLARIA_" + strings.ToUpper(envKey.Replace(o.key))
	if _, ok := os.LookupEnv(env); ok {
		return "environment variable " + env
	}
	return "the config file"
}

// perInvocation are the keys a resumed run does not take from the run's
// config.yaml: they describe one invocation, not the run.
var perInvocation = map[string]bool{"resume": true, "max_steps": true, "run_dir": true}

// readConfigFile loads a YAML file into v, refusing unknown keys so that
// a typo is an error rather than a silently ignored setting. Keys in skip
// are dropped.
func readConfigFile(v *viper.Viper, path string, known, skip map[string]bool) (map[string]any, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("config file %s: %v", path, err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return nil, usagef("config file %s is not valid YAML: %v", path, err)
	}
	var bad []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, val := range m {
			key := prefix + k
			switch sub, isMap := val.(map[string]any); {
			case strings.Contains(k, "-"):
				bad = append(bad, fmt.Sprintf("%s (write %s)", key, strings.ReplaceAll(key, "-", "_")))
			case skip[key]:
				delete(m, k)
			case isMap && !known[key]:
				walk(key+".", sub)
			case !known[key]:
				bad = append(bad, key)
			}
		}
	}
	walk("", m)
	if len(bad) > 0 {
		sort.Strings(bad)
		return nil, usagef("config file %s: unknown keys %s; keys are the flag names with underscores, model.hidden, model.activation and model.loss under model: (see `tolaria train --help`)", path, strings.Join(bad, ", "))
	}
	if err := v.MergeConfigMap(m); err != nil {
		return nil, usagef("config file %s: %v", path, err)
	}
	return m, nil
}

// configFile is spec as a configuration file: the keys readConfigFile
// reads, so a run's config.yaml is also a valid --config.
func configFile(spec job.Spec) ([]byte, error) {
	raw, err := yaml.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	model := map[string]any{}
	for _, k := range []string{"hidden", "activation", "loss"} {
		model[k] = m[k]
		delete(m, k)
	}
	m["model"] = model
	return yaml.Marshal(m)
}

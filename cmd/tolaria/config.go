package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/worker"
)

// errUsage marks errors in the user's configuration; they exit with 2.
var errUsage = errors.New("invalid configuration")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// flagName is a configuration key's flag, without its dashes.
func flagName(key field.Name) string {
	return strings.ReplaceAll(strings.TrimPrefix(string(key), "model."), "_", "-")
}

// flagOf spells a configuration key as its flag, for messages; "" for a
// key with no flag.
func flagOf(key field.Name) string {
	if job.Usage(key) != "" || slices.Contains(extraKeys, key) {
		return "--" + flagName(key)
	}
	return ""
}

// settings are what train does besides the run the coordinator prepares.
type settings struct {
	warnings      []string      // unknown TOLARIA_* variables, to log
	metricsLinger time.Duration // /metrics stays up this long after the run
}

func addFlags(fs *pflag.FlagSet) {
	d := job.Default()
	for _, key := range job.Keys() {
		switch def := d.Get(key).(type) {
		case bool:
			fs.Bool(flagName(key), def, job.Usage(key))
		case int:
			fs.Int(flagName(key), def, job.Usage(key))
		case uint64: // the seed
			fs.Int(flagName(key), int(def), job.Usage(key))
		case float64:
			fs.Float64(flagName(key), def, job.Usage(key))
		case []int:
			fs.IntSlice(flagName(key), def, job.Usage(key))
		case job.Layers:
			fs.String(flagName(key), "", job.Usage(key))
		default:
			fs.String(flagName(key), fmt.Sprint(def), job.Usage(key))
		}
	}
	fs.String("config", "", "YAML configuration file (flags > TOLARIA_* environment > file > defaults)")
	fs.String("summary-json", "", "also write summary.json to this path")
	fs.String("metrics-addr", "", "serve Prometheus metrics here, e.g. :9464 (loopback when no host is given)")
	fs.String("worker", "", "path of the tolaria-worker binary (default: next to tolaria, or $TOLARIA_WORKER)")
	fs.Bool("isolate", false, "run a CPU job in a tolaria-worker process too (GPU jobs always are)")
	fs.Duration("worker-start-timeout", worker.DefaultHelloTimeout, "how long a tolaria-worker may take to open its device before it is killed")
	fs.Duration("heartbeat-timeout", worker.DefaultHeartbeatTimeout, "how long a tolaria-worker may send no heartbeat, or make no progress while it sends them, before it is taken for hung and killed (at least 1s)")
	fs.Duration("metrics-linger", 15*time.Second, "with --metrics-addr, keep serving /metrics this long after the run so the final values are scraped (0: exit at once)")
}

// extraKeys are the settings of train that are not the job's.
var extraKeys = []field.Name{"summary_json", "metrics_addr", "worker", "isolate", "worker_start_timeout", "heartbeat_timeout", "metrics_linger"}

// otherEnv are TOLARIA_* variables that are not configuration keys.
var otherEnv = []string{"TOLARIA_CONFIG", "TOLARIA_WORKER", "TOLARIA_PROTOCOL_FD"}

// resolve reads flags, TOLARIA_* variables and the YAML file into the
// run's request, with precedence flag > environment > file > default. The
// coordinator validates it.
func resolve(fs *pflag.FlagSet) (coordinator.Request, settings, error) {
	v := viper.New()
	v.SetEnvPrefix("TOLARIA")
	v.SetEnvKeyReplacer(job.EnvReplacer())
	v.AutomaticEnv()
	d := job.Default()
	keys := append(job.Keys(), extraKeys...)
	for _, key := range keys {
		if def := d.Get(key); def != nil {
			v.SetDefault(string(key), def)
		}
		if err := v.BindPFlag(string(key), fs.Lookup(flagName(key))); err != nil {
			return coordinator.Request{}, settings{}, err
		}
	}
	set := settings{warnings: job.UnknownEnv(os.Environ(), keys, otherEnv...)}
	if err := mergeConfigFiles(fs, v); err != nil {
		return coordinator.Request{}, settings{}, err
	}
	req := coordinator.Request{Spec: job.Default(), SummaryJSON: v.GetString("summary_json"), MetricsAddr: v.GetString("metrics_addr")}
	for _, key := range job.Keys() {
		if err := req.Spec.Set(key, v.Get(string(key))); err != nil {
			return coordinator.Request{}, settings{}, fmt.Errorf("%w: %w (set by %s)", errUsage, err, source(fs, key))
		}
	}
	if err := oneModel(fs, v, req.Spec); err != nil {
		return coordinator.Request{}, settings{}, err
	}
	if !isSet(fs, v, "data_dir") {
		req.Spec.DataDir = job.DefaultDataDir(req.Spec.Dataset)
	}
	p := &req.Placement
	p.Worker = v.GetString("worker")
	var err error
	if p.Isolate, err = cast.ToBoolE(v.Get("isolate")); err != nil {
		return coordinator.Request{}, settings{}, fmt.Errorf("%w: %w", errUsage, field.Errorf("isolate", "%w", err))
	}
	if p.WorkerStart, err = cast.ToDurationE(v.Get("worker_start_timeout")); err != nil || p.WorkerStart <= 0 {
		return coordinator.Request{}, settings{}, usagef("worker-start-timeout: cannot use %q: give a positive duration such as 30s", fmt.Sprint(v.Get("worker_start_timeout")))
	}
	if p.HeartbeatTimeout, err = cast.ToDurationE(v.Get("heartbeat_timeout")); err != nil || p.HeartbeatTimeout < worker.MinHeartbeatTimeout {
		return coordinator.Request{}, settings{}, usagef("heartbeat-timeout: cannot use %q: give a duration of at least %s, such as %s",
			fmt.Sprint(v.Get("heartbeat_timeout")), worker.MinHeartbeatTimeout, worker.DefaultHeartbeatTimeout)
	}
	if set.metricsLinger, err = cast.ToDurationE(v.Get("metrics_linger")); err != nil || set.metricsLinger < 0 {
		return coordinator.Request{}, settings{}, usagef("metrics-linger: cannot use %q: give a duration such as 15s, or 0", fmt.Sprint(v.Get("metrics_linger")))
	}
	return req, set, nil
}

// mergeConfigFiles reads the --config file, and for a resumed run the
// run's config.yaml, into v's file layer.
func mergeConfigFiles(fs *pflag.FlagSet, v *viper.Viper) error {
	config, _ := fs.GetString("config")
	if config == "" {
		config = os.Getenv("TOLARIA_CONFIG")
	}
	if config != "" {
		if err := mergeConfigFile(v, config); err != nil {
			return err
		}
	}
	runDir := v.GetString("run_dir")
	if resume, _ := cast.ToBoolE(v.Get("resume")); !resume || runDir == "" {
		return nil
	}
	base := filepath.Join(runDir, coordinator.ConfigFile)
	if _, err := os.Stat(base); err != nil {
		return nil
	}
	// A resumed run continues with the settings it was started with: the
	// run's config.yaml is the file layer, under a --config file (merged
	// again on top of it: viper may share the first read's nested maps),
	// env and flags.
	if err := mergeConfigFile(v, base, perInvocation...); err != nil || config == "" {
		return err
	}
	return mergeConfigFile(v, config)
}

// oneModel refuses model.layers alongside the model.hidden shorthand (or
// its activation) set by a flag, a variable or a file: the layers replace
// them, so one of the two would be silently ignored.
func oneModel(fs *pflag.FlagSet, v *viper.Viper, spec job.Spec) error {
	if len(spec.Layers) == 0 {
		return nil
	}
	for _, key := range []field.Name{"model.hidden", "model.activation"} {
		if isSet(fs, v, key) {
			return fmt.Errorf("%w: %w", errUsage, field.Errorf("model.layers", "describes the whole model, but %s is set too (by %s); give the model either as layers or as %s and %s",
				key, source(fs, key), field.Name("model.hidden"), field.Name("model.activation")))
		}
	}
	return nil
}

// isSet reports whether key was given by a flag, a TOLARIA_* variable or
// a configuration file, rather than left at its default.
func isSet(fs *pflag.FlagSet, v *viper.Viper, key field.Name) bool {
	_, inEnv := os.LookupEnv(job.EnvVar(key))
	return fs.Changed(flagName(key)) || inEnv || v.InConfig(string(key))
}

func source(fs *pflag.FlagSet, key field.Name) string {
	if f := fs.Lookup(flagName(key)); f != nil && f.Changed {
		return "flag --" + flagName(key)
	}
	env := job.EnvVar(key)
	if _, ok := os.LookupEnv(env); ok {
		return "environment variable " + env
	}
	return "the config file"
}

// perInvocation are the keys a resumed run does not take from the run's
// config.yaml: they describe one invocation, not the run.
var perInvocation = []field.Name{"resume", "max_steps", "run_dir"}

// mergeConfigFile reads a configuration file (see job.ReadConfigFile)
// into v's file layer.
func mergeConfigFile(v *viper.Viper, path string, skip ...field.Name) error {
	m, err := job.ReadConfigFile(path, extraKeys, skip...)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := v.MergeConfigMap(m); err != nil {
		return usagef("config file %s: %v", path, err)
	}
	return nil
}

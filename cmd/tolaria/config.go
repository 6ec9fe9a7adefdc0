package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
)

// trainFlags are train's settings besides the job's keys; the job's
// keys are flags too, each spelled as its key.
type trainFlags struct {
	device  string // bound to the job's device key through viper
	worker  workerFlags
	metrics metricsFlags
	isolate bool
}

func (t *trainFlags) register(fs *pflag.FlagSet) {
	d := job.Default()
	for _, key := range job.Keys() {
		usage := job.Usage(key)
		if strings.Contains(string(key), ".") {
			usage += " (file key " + string(key) + ")"
		}
		switch def := d.Get(key).(type) {
		case bool:
			fs.Bool(flagName(key), def, usage)
		case int:
			fs.Int(flagName(key), def, usage)
		case uint64: // the seed
			fs.Int(flagName(key), int(def), usage)
		case float64:
			fs.Float64(flagName(key), def, usage)
		case []int:
			fs.IntSlice(flagName(key), def, usage)
		case job.Layers:
			fs.String(flagName(key), "", usage)
		default:
			if key == "device" {
				registerDevice(fs, &t.device, "")
				continue
			}
			fs.String(flagName(key), fmt.Sprint(def), usage)
		}
	}
	fs.String("config", "", "YAML configuration file (flags > TOLARIA_* environment > file > defaults)")
	fs.String("summary-json", "", "also write summary.json to this path")
	fs.BoolVar(&t.isolate, "isolate", false, "run a CPU job in a tolaria-worker process too (GPU jobs always are)")
	t.worker.register(fs, "a tolaria-worker")
	t.metrics.register(fs, "")
}

// extraKeys are the settings of train that are not the job's.
var extraKeys = []field.Name{"summary_json", "metrics_addr", "worker", "isolate", "worker_start_timeout", "heartbeat_timeout", "metrics_linger"}

// otherEnv are TOLARIA_* variables that are not configuration keys.
var otherEnv = []string{"TOLARIA_CONFIG", "TOLARIA_WORKER", "TOLARIA_PROTOCOL_FD"}

// writtenAnnotation records, on a key's flag, how the configuration file
// wrote the key when the file gave its value: errors name it so.
const writtenAnnotation = "tolaria.written"

// resolve reads flags, TOLARIA_* variables and the YAML file into the
// run's request, with precedence flag > environment > file > default, and
// returns the warnings to log (unknown TOLARIA_* variables, deprecated
// flat keys in the file). The coordinator validates the job; t's groups
// check their own flags.
func resolve(fs *pflag.FlagSet, t *trainFlags) (coordinator.Request, []string, error) {
	fail := func(err error) (coordinator.Request, []string, error) { return coordinator.Request{}, nil, err }
	v := viper.New()
	d := job.Default()
	keys := append(job.Keys(), extraKeys...)
	envKeys := slices.Clone(keys)
	for _, key := range keys {
		if def := d.Get(key); def != nil {
			v.SetDefault(string(key), def)
		}
		if err := v.BindPFlag(string(key), fs.Lookup(flagName(key))); err != nil {
			return fail(err)
		}
		// Each key's variables are bound by name, the key's path's
		// (TOLARIA_OPTIMIZER_LR) and the flag's (TOLARIA_LR), never
		// through viper's automatic environment: that takes a variable
		// named as a section (TOLARIA_OPTIMIZER, the flag --optimizer's)
		// to hide every key in the section.
		names := []string{job.EnvVar(key)}
		if flat := job.Flat(key); flat != key {
			names = append(names, job.EnvVar(flat))
			envKeys = append(envKeys, flat)
		}
		if err := v.BindEnv(append([]string{string(key)}, names...)...); err != nil {
			return fail(err)
		}
		if len(names) == 2 {
			// One key set by both its variables is ambiguous, as in a file.
			a, aSet := os.LookupEnv(names[0])
			b, bSet := os.LookupEnv(names[1])
			if aSet && bSet && a != b {
				return fail(usagef("%s=%s and %s=%s both set %s; give one", names[0], a, names[1], b, key))
			}
		}
	}
	warnings := job.UnknownEnv(os.Environ(), envKeys, otherEnv...)
	file, err := mergeConfigFiles(fs, v)
	if err != nil {
		return fail(err)
	}
	warnings = append(warnings, file.Warnings()...)
	req := coordinator.Request{Spec: job.Default()}
	for _, key := range job.Keys() {
		switch {
		case fs.Changed(flagName(key)):
		case inEnv(key):
			// A refusal names the variable the user set, not a flag.
			_ = fs.SetAnnotation(flagName(key), writtenAnnotation, []string{envOf(key)})
		case file.Has(key):
			_ = fs.SetAnnotation(flagName(key), writtenAnnotation, []string{string(file.Written(key))})
		}
		if err := req.Spec.Set(key, v.Get(string(key))); err != nil {
			return fail(fmt.Errorf("%w: %w (set by %s)", errUsage, err, source(fs, key)))
		}
	}
	if err := oneModel(fs, v, req.Spec); err != nil {
		return fail(err)
	}
	if !isSet(fs, v, "data.dir") {
		req.Spec.DataDir = job.DefaultDataDir(req.Spec.Dataset)
	}
	// The shared groups read their flags: those no flag gave take the
	// value of the environment or the file.
	for _, key := range extraKeys {
		if f := fs.Lookup(flagName(key)); !f.Changed {
			if err := f.Value.Set(v.GetString(string(key))); err != nil {
				return fail(usagef("--%s: cannot use %q (set by %s): %v", f.Name, v.GetString(string(key)), source(fs, key), err))
			}
		}
	}
	for _, check := range []func() error{t.worker.check, t.metrics.check} {
		if err := check(); err != nil {
			return fail(err)
		}
	}
	req.SummaryJSON, _ = fs.GetString("summary-json")
	req.MetricsAddr = t.metrics.addr
	req.Placement = coordinator.Placement{Isolate: t.isolate, Worker: t.worker.path,
		WorkerStart: t.worker.start, HeartbeatTimeout: t.worker.heartbeat}
	return req, warnings, nil
}

// mergeConfigFiles reads the --config file, and for a resumed run the
// run's config.yaml, into v's file layer, and returns the --config
// file's settings.
func mergeConfigFiles(fs *pflag.FlagSet, v *viper.Viper) (job.Settings, error) {
	config, _ := fs.GetString("config")
	if config == "" {
		config = os.Getenv("TOLARIA_CONFIG")
	}
	var file job.Settings
	if config != "" {
		var err error
		if file, err = mergeConfigFile(v, config); err != nil {
			return nil, err
		}
	}
	runDir := v.GetString("run_dir")
	if resume, _ := cast.ToBoolE(v.Get("resume")); !resume || runDir == "" {
		return file, nil
	}
	base := filepath.Join(runDir, coordinator.ConfigFile)
	if _, err := os.Stat(base); err != nil {
		return file, nil
	}
	// A resumed run continues with the settings it was started with: the
	// run's config.yaml (in either layout: a run of an earlier release
	// recorded the flat keys) is the file layer, under a --config file
	// (merged again on top of it: viper may share the first read's nested
	// maps), env and flags.
	if _, err := mergeConfigFile(v, base, perInvocation...); err != nil || config == "" {
		return file, err
	}
	_, err := mergeConfigFile(v, config)
	return file, err
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
	return fs.Changed(flagName(key)) || inEnv(key) || v.InConfig(string(key))
}

// inEnv reports whether a TOLARIA_* variable sets key: the flag's
// (TOLARIA_LR) or the key's (TOLARIA_OPTIMIZER_LR).
func inEnv(key field.Name) bool {
	return envOf(key) != ""
}

// envOf is the variable that sets key, "" when none does.
func envOf(key field.Name) string {
	for _, name := range []string{job.EnvVar(key), job.EnvVar(job.Flat(key))} {
		if _, ok := os.LookupEnv(name); ok {
			return name
		}
	}
	return ""
}

func source(fs *pflag.FlagSet, key field.Name) string {
	if f := fs.Lookup(flagName(key)); f != nil && f.Changed {
		return "flag --" + flagName(key)
	}
	if env := envOf(key); env != "" {
		return "environment variable " + env
	}
	return "the config file"
}

// perInvocation are the keys a resumed run does not take from the run's
// config.yaml: they describe one invocation, not the run.
var perInvocation = []field.Name{"resume", "schedule.max_steps", "run_dir"}

// mergeConfigFile reads a configuration file (see job.ReadConfigFile)
// into v's file layer.
func mergeConfigFile(v *viper.Viper, path string, skip ...field.Name) (job.Settings, error) {
	st, err := job.ReadConfigFile(path, extraKeys, skip...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if err := v.MergeConfigMap(st.Map()); err != nil {
		return nil, usagef("config file %s: %v", path, err)
	}
	return st, nil
}

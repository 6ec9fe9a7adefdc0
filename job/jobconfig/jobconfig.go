// Package jobconfig resolves a training job's settings from their layers:
// the command line over TOLARIA_* environment variables over configuration
// files over the job's defaults. It knows keys, not flags: a command hands
// it the values its flags gave, by key, and a way to spell a key as its
// flag, and gets back the job, its own keys' values and the warnings to log.
package jobconfig

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cast"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/job"
)

// Sources are the layers of a job's configuration.
type Sources struct {
	// Flags are the values the command line gave, by key (a job's key or
	// one of Extra), typed as the flags read them.
	Flags map[field.Name]any
	// FlagName spells a key as its flag for messages (optimizer.lr as
	// --lr).
	FlagName func(field.Name) string
	// Env is the environment, as os.Environ gives it.
	Env []string
	// OtherEnv are the TOLARIA_* variables that are not settings
	// (TOLARIA_CONFIG, ...): they are not warned about.
	OtherEnv []string
	// File is the configuration file; "" for none.
	File string
	// Extra are the command's own keys (metrics_addr, ...): a variable or
	// the file may give them too.
	Extra []field.Name
	// RunConfig is the name of the configuration a run directory records
	// (config.yaml): a resumed run (resume with run_dir) continues with the
	// settings it was started with, this file's, under File.
	RunConfig string
}

// PerInvocation are the keys a resumed run does not take from its
// recorded configuration: they describe one invocation, not the run.
var PerInvocation = []field.Name{"resume", "schedule.max_steps", "run_dir"}

// Config is a resolved configuration.
type Config struct {
	Spec job.Spec
	// Extra are the values of Extra's keys that no flag gave, but a
	// variable or a file did, as text.
	Extra map[field.Name]string
	// Warnings are for the log: unknown TOLARIA_* variables, deprecated
	// flat keys in File.
	Warnings []string
	// Written spells each key that a variable or File gave as it was
	// written there (TOLARIA_LR, the file's lr), for messages.
	Written map[field.Name]string

	src   Sources
	env   map[string]string
	files job.Settings // the recorded configuration's, then File's
	file  job.Settings // File's alone
}

// Resolve reads the layers into a job, with precedence flag > environment
// > file > default. A refusal names the key and what set it; Written is
// filled even then, so the refusal can be shown as the user wrote the key.
func Resolve(src Sources) (*Config, error) {
	c := &Config{src: src, env: map[string]string{}, Extra: map[field.Name]string{}, Written: map[field.Name]string{}}
	for _, kv := range src.Env {
		if name, value, ok := strings.Cut(kv, "="); ok {
			c.env[name] = value
		}
	}
	keys := append(job.Keys(), src.Extra...)
	envKeys := slices.Clone(keys)
	for _, key := range keys {
		names := c.envNames(key)
		if len(names) == 2 {
			envKeys = append(envKeys, job.Flat(key))
			// One key set by both its variables is ambiguous, as in a file.
			a, aSet := c.env[names[0]]
			b, bSet := c.env[names[1]]
			if aSet && bSet && a != b {
				return c, fmt.Errorf("%s=%s and %s=%s both set %s; give one", names[0], a, names[1], b, key)
			}
		}
	}
	c.Warnings = job.UnknownEnv(src.Env, envKeys, src.OtherEnv...)
	if err := c.readFiles(); err != nil {
		return c, err
	}
	c.Warnings = append(c.Warnings, c.file.Warnings()...)
	if c.src.File != "" && len(c.file) == 0 {
		c.Warnings = append(c.Warnings, fmt.Sprintf("the config file %s sets no key: every setting comes from the flags, TOLARIA_* variables and defaults", c.src.File))
	}
	for _, key := range job.Keys() {
		if _, ok := src.Flags[key]; ok {
			continue
		}
		if env := c.envOf(key); env != "" {
			c.Written[key] = env // a refusal names the variable the user set
		} else if c.file.Has(key) {
			c.Written[key] = string(c.file.Written(key))
		}
	}
	c.Spec = job.Default()
	for _, key := range job.Keys() {
		if err := c.Spec.Set(key, c.value(key)); err != nil {
			return c, fmt.Errorf("%w (set by %s)", err, c.Source(key))
		}
	}
	if err := c.oneModel(); err != nil {
		return c, err
	}
	if !c.isSet("data.dir") {
		c.Spec.DataDir = job.DefaultDataDir(c.Spec.Dataset)
	}
	for _, key := range src.Extra {
		if _, ok := src.Flags[key]; !ok {
			if v := c.value(key); v != nil {
				c.Extra[key] = cast.ToString(v)
			}
		}
	}
	return c, nil
}

// envNames are the variables that set key: the key's path's
// (TOLARIA_OPTIMIZER_LR) and, for a key with a flat spelling, the flat
// one's (TOLARIA_LR). A variable named as a section (TOLARIA_OPTIMIZER)
// sets only the key of that name, never the section's keys.
func (c *Config) envNames(key field.Name) []string {
	names := []string{job.EnvVar(key)}
	if flat := job.Flat(key); flat != key {
		names = append(names, job.EnvVar(flat))
	}
	return names
}

// envOf is the variable that sets key, "" when none does.
func (c *Config) envOf(key field.Name) string {
	for _, name := range c.envNames(key) {
		if _, ok := c.env[name]; ok {
			return name
		}
	}
	return ""
}

// value is key's value from the highest layer that gives it, nil when
// none does and the job has no default for it. An empty variable gives
// nothing.
func (c *Config) value(key field.Name) any {
	if v, ok := c.src.Flags[key]; ok {
		return v
	}
	for _, name := range c.envNames(key) {
		if v := c.env[name]; v != "" {
			return v
		}
	}
	for _, s := range slices.Backward(c.files) {
		if s.Key == key {
			return s.Value
		}
	}
	return job.Default().Get(key)
}

// isSet reports whether a flag, a variable or a file gave key.
func (c *Config) isSet(key field.Name) bool {
	_, flag := c.src.Flags[key]
	return flag || c.envOf(key) != "" || c.files.Has(key)
}

// Source says what gave key: a flag, a variable, or the file.
func (c *Config) Source(key field.Name) string {
	if _, ok := c.src.Flags[key]; ok {
		return "flag " + c.src.FlagName(key)
	}
	if env := c.envOf(key); env != "" {
		return "environment variable " + env
	}
	return "the config file"
}

// readFiles reads File and, for a resumed run, the run's recorded
// configuration under it (in either layout: a run of an earlier release
// recorded the flat keys), less PerInvocation's keys.
func (c *Config) readFiles() error {
	if c.src.File != "" {
		st, err := job.ReadConfigFile(c.src.File, c.src.Extra)
		if err != nil {
			return err
		}
		c.file, c.files = st, st
	}
	runDir := cast.ToString(c.value("run_dir"))
	if resume, _ := cast.ToBoolE(c.value("resume")); !resume || runDir == "" || c.src.RunConfig == "" {
		return nil
	}
	recorded := filepath.Join(runDir, c.src.RunConfig)
	if _, err := os.Stat(recorded); err != nil {
		return nil
	}
	st, err := job.ReadRunConfig(runDir, recorded, c.src.Extra, PerInvocation...)
	if other := (*job.OtherRunError)(nil); errors.As(err, &other) {
		return field.Errorf("resume", "%w; %s", other, resumeOther(other))
	}
	if err != nil {
		return err
	}
	c.files = append(st, c.file...)
	return nil
}

// resumeOther says how to go on with a run of another command that a
// resumed training run was pointed at.
func resumeOther(e *job.OtherRunError) string {
	if e.Command == "tolaria rl" {
		return fmt.Sprintf("continue it with tolaria rl --resume --run-dir %s", shellword.Quote(e.Dir))
	}
	return fmt.Sprintf("point %s at a run of tolaria train", field.Name("run_dir"))
}

// oneModel refuses model.layers alongside the model.hidden shorthand (or
// its activation) set by a flag, a variable or a file: the layers replace
// them, so one of the two would be silently ignored.
func (c *Config) oneModel() error {
	if len(c.Spec.Layers) == 0 {
		return nil
	}
	for _, key := range []field.Name{"model.hidden", "model.activation"} {
		if c.isSet(key) {
			return field.Errorf("model.layers", "describes the whole model, but %s is set too (by %s); give the model either as layers or as %s and %s",
				key, c.Source(key), field.Name("model.hidden"), field.Name("model.activation"))
		}
	}
	return nil
}

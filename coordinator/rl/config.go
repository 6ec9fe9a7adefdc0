package rl

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/rl/dqn"
)

// Resolve completes r from the command line: the configuration read from
// the file at path ("" for none), or with r.Resume from the run's own
// config.yaml, with given (the keys the command line set, typed as a
// file's values) over it; and r's own settings checked. A run being
// resumed takes no other file and no key given: it continues as it was
// configured. Every refusal is an ErrConfig naming the key at fault.
func (r *Request) Resolve(path string, given map[field.Name]any) error {
	// A directory another tolaria holds is refused as such before its
	// files are read: any other answer would be refused in turn.
	if r.Dir != "" {
		if err := rundir.CheckFree(r.Dir); err != nil {
			return err
		}
	}
	if r.Resume {
		switch {
		case path != "":
			return refusal.Config(field.Errorf("resume", "continues with the configuration saved in %s; drop %s", field.Name("run_dir"), field.Name("config")))
		case r.Dir == "":
			return refusal.Config(field.Errorf("resume", "needs %s pointing at the run to continue", field.Name("run_dir")))
		}
		path = filepath.Join(r.Dir, rundir.ConfigFile)
		if _, err := os.Stat(path); err != nil {
			return refusal.Config(field.Errorf("resume", "%s holds no tolaria rl run (no %s); start without %s, or point %s at an earlier run",
				r.Dir, rundir.ConfigFile, field.Name("resume"), field.Name("run_dir")))
		}
		if len(given) > 0 {
			key := slices.Sorted(maps.Keys(given))[0]
			return refusal.Config(field.Errorf(key, "cannot change a run being resumed; it continues with %s", path))
		}
	}
	for _, b := range []struct {
		key      field.Name
		n, least int
	}{{"max_lead", r.MaxLead, 0}, {"actor_restarts", r.ActorRestarts, 0}, {"threads", r.Threads, 1}} {
		if b.n < b.least {
			return refusal.Config(field.Errorf(b.key, "must be at least %d, got %d", b.least, b.n))
		}
	}
	cfg, err := LoadConfig(path, given)
	if r.Resume && errors.Is(err, field.ErrOtherCommand) {
		// The run directory's own file: said as a run of that kind.
		raw, _ := os.ReadFile(path)
		if command, keys := (field.Schema{Keys: dqn.Keys(), Command: dqn.ConfigCommand}).Whose(raw); command != "" {
			command = strings.TrimSuffix(command, " --config")
			return refusal.Config(field.Errorf("run_dir", "%s is a %s run (its %s has %s), not a tolaria rl run; continue it with %s --resume --run-dir %s",
				r.Dir, command, rundir.ConfigFile, strings.Join(keys[:min(len(keys), 2)], ", "), command, shellword.Quote(r.Dir)))
		}
	}
	if err != nil {
		return err
	}
	r.Config, r.ConfigYAML = cfg, cfg.YAML()
	return nil
}

// LoadConfig reads a run's configuration: the file at path ("" for none)
// over dqn's defaults, and the keys the command line gave (given, typed
// as a file's values) over the file; the result is validated. Every
// refusal is an ErrConfig: a file's names its keys as the file wrote
// them, given's and the result's name the key.
func LoadConfig(path string, given map[field.Name]any) (dqn.Config, error) {
	cfg := dqn.DefaultConfig()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return cfg, refusal.Config(field.Errorf("config", "%w", err))
		}
		if cfg, err = dqn.ParseConfig(raw); err != nil {
			if errors.Is(err, field.ErrOtherCommand) { // names no key of ours
				return cfg, refusal.Config(fmt.Errorf("%s: %w", path, err))
			}
			// Spelled now: the keys as the file wrote them, not as flags.
			return cfg, refusal.Config(errors.New(path + ": " + err.Error()))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(given)) {
		if err := cfg.Set(key, given[key]); err != nil {
			return cfg, refusal.Config(err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, refusal.Config(err)
	}
	if err := checkLearns(cfg); err != nil {
		return cfg, refusal.Config(err)
	}
	return cfg, nil
}

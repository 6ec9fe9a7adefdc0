package rl

import (
	"errors"
	"maps"
	"os"
	"slices"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/rl/dqn"
)

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
	return cfg, nil
}

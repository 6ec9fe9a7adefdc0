package rl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestLoadConfig: the file over the defaults, the given keys over the
// file; a file's refusal names its key as written there, a given key's
// refusal names the key, and both are configuration errors.
func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(file, []byte("num_agents: 3\ntotal_steps: 5000\noptimizer.lr: 0.002\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(file, map[field.Name]any{"num_agents": 2, "seed": uint64(7)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NumAgents != 2 || cfg.TotalSteps != 5000 || cfg.Seed != 7 || cfg.Optimizer.LR != 0.002 {
		t.Errorf("agents %d (given 2), total_steps %d (file 5000), seed %d (given 7), lr %g (file 0.002)", cfg.NumAgents, cfg.TotalSteps, cfg.Seed, cfg.Optimizer.LR)
	}
	if cfg, err := LoadConfig("", nil); err != nil || cfg.NumAgents == 2 {
		t.Errorf("no file, nothing given: %+v, %v; want the defaults", cfg.NumAgents, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("num_agents: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		given map[field.Name]any
		want  string
	}{
		{filepath.Join(dir, "none.yaml"), nil, "config: open "},
		{bad, nil, bad + ": num_agents"},
		{"", map[field.Name]any{"total_steps": 2.5}, "total_steps: must be a whole number"},
		{"", map[field.Name]any{"num_agents": 0}, "num_agents"},
	} {
		_, err := LoadConfig(c.path, c.given)
		if !errors.Is(err, refusal.ErrConfig) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("LoadConfig(%q, %v): %v; want a configuration error starting %q", c.path, c.given, err, c.want)
		}
	}
}

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

// TestResolve: a run being resumed takes its own config.yaml and nothing
// else (no file, no key given), needs its directory, and a directory
// without a run is refused; each refusal names the key at fault, as a
// configuration error. A new run reads the file with the keys given over
// it and checks the run's own bounds.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	file := filepath.Join(dir, "rl.yaml")
	for _, p := range []string{file, filepath.Join(run, "config.yaml")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("num_agents: 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	trainRun := filepath.Join(dir, "train-run")
	if err := os.MkdirAll(trainRun, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trainRun, "config.yaml"), []byte("model: {hidden: [8]}\nschedule: {epochs: 1}\ndata: {dataset: synthetic}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := Request{MaxLead: 50, Threads: 1, ActorRestarts: 3}
	for _, c := range []struct {
		name  string
		req   func(*Request)
		path  string
		given map[field.Name]any
		want  string // "" is accepted
	}{
		{"resume with a file", func(r *Request) { r.Resume, r.Dir = true, run }, file, nil, "resume: continues with the configuration saved in run_dir; drop config"},
		{"resume without a directory", func(r *Request) { r.Resume = true }, "", nil, "resume: needs run_dir"},
		{"resume of no run", func(r *Request) { r.Resume, r.Dir = true, dir }, "", nil, "resume: " + dir + " holds no tolaria rl run"},
		{"resume changing a key", func(r *Request) { r.Resume, r.Dir = true, run }, "", map[field.Name]any{"num_agents": 2}, "num_agents: cannot change a run being resumed"},
		{"resume", func(r *Request) { r.Resume, r.Dir = true, run }, "", nil, ""},
		{"resume of a training run", func(r *Request) { r.Resume, r.Dir = true, trainRun }, "", nil,
			"run_dir: " + trainRun + " is a tolaria train run (its config.yaml has schedule, data), not a tolaria rl run; continue it with tolaria train --resume --run-dir " + trainRun},
		{"negative lead", func(r *Request) { r.MaxLead = -1 }, file, nil, "max_lead: must be at least 0, got -1"},
		{"no threads", func(r *Request) { r.Threads = 0 }, file, nil, "threads: must be at least 1, got 0"},
		{"negative restarts", func(r *Request) { r.ActorRestarts = -2 }, file, nil, "actor_restarts: must be at least 0, got -2"},
		{"new run", func(*Request) {}, file, map[field.Name]any{"num_agents": 2}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := base
			c.req(&r)
			err := r.Resolve(c.path, c.given)
			if c.want == "" {
				want := 3
				if c.given != nil {
					want = 2
				}
				if err != nil || r.Config.NumAgents != want || len(r.ConfigYAML) == 0 {
					t.Fatalf("err %v, agents %d (want %d), %d bytes of YAML", err, r.Config.NumAgents, want, len(r.ConfigYAML))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, refusal.ErrConfig) {
				t.Fatalf("err %v, want a configuration error saying %q", err, c.want)
			}
		})
	}
}

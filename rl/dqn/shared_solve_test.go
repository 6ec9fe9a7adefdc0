package dqn

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
)

// TestForageBeatsScripted is the measurement behind examples/forage.yaml,
// not part of the test command: with TOLARIA_RL_SOLVE=1 it trains the
// file's agents in one Forage world through one shared actor (each with
// its own learner), and checks that every agent's last greedy evaluation
// beats the scripted baseline's mean return on the same episodes
// (ScriptedBaseline); it logs every evaluation and the first that beat
// the baseline. TOLARIA_RL_SEEDS and TOLARIA_RL_FIRST_SEED choose
// the seeds measured, one run after another; TOLARIA_RL_CONFIG_FILE
// another file and TOLARIA_RL_CONFIG JSON of Config's fields over it.
func TestForageBeatsScripted(t *testing.T) {
	if os.Getenv("TOLARIA_RL_SOLVE") == "" {
		t.Skip("a measurement of minutes; set TOLARIA_RL_SOLVE=1 to run it")
	}
	seeds, first := 1, 1
	if s := os.Getenv("TOLARIA_RL_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("TOLARIA_RL_FIRST_SEED"); s != "" {
		first, _ = strconv.Atoi(s)
	}
	path := filepath.Join("..", "..", "examples", "forage.yaml")
	if p := os.Getenv("TOLARIA_RL_CONFIG_FILE"); p != "" {
		path = p
	}
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	for seed := first; seed < first+seeds; seed++ {
		raw, err := os.ReadFile(path)
		must(t, err)
		cfg, err := ParseConfig(raw)
		must(t, err)
		if js := os.Getenv("TOLARIA_RL_CONFIG"); js != "" {
			must(t, json.Unmarshal([]byte(js), &cfg))
		}
		cfg.Seed = uint64(seed)
		baseline, err := ScriptedBaseline(cfg)
		must(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		res, err := runSharedInProcess(ctx, dev, cfg, RunOptions{Graphs: true, MaxLead: 50}, "")
		cancel()
		must(t, err)
		for i, r := range res {
			t.Logf("seed %d agent %d: scripted baseline %.2f; %d episodes, %d learner steps, last-100 training mean %.2f, %s",
				seed, i, baseline[i], len(r.Episodes), r.LearnerSteps, r.MeanReturn(100), r.Elapsed.Round(time.Second))
			for _, e := range r.EvalResults {
				t.Logf("  evaluation at step %d: greedy mean %.2f over %d episodes", e.EnvSteps, e.MeanReturn, e.Episodes)
			}
			if len(r.EvalResults) == 0 {
				t.Fatalf("seed %d agent %d: no greedy evaluation", seed, i)
			}
			beat := -1
			for _, e := range r.EvalResults {
				if e.MeanReturn > baseline[i] && beat < 0 {
					beat = e.EnvSteps
				}
			}
			last := r.EvalResults[len(r.EvalResults)-1]
			t.Logf("seed %d agent %d: first beat the baseline at step %d (-1: never); last evaluation %.2f, baseline %.2f",
				seed, i, beat, last.MeanReturn, baseline[i])
			if last.MeanReturn <= baseline[i] {
				t.Errorf("seed %d agent %d: the last greedy evaluation, %.2f, does not beat the scripted baseline's %.2f", seed, i, last.MeanReturn, baseline[i])
			}
		}
	}
}

package dqn

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
)

// TestSolve is the measurement behind the default configuration and
// examples/acrobot.yaml, not part of the test command: with
// TOLARIA_RL_SOLVE=1 it trains agents with DefaultConfig until a greedy
// evaluation solves the environment (Config.Goal: on CartPole-v1 a mean
// return of 475 over 100 episodes), and reports the environment steps it
// took, every evaluation, and when (if ever) the mean of the last 100
// training episodes (epsilon-greedy, as played) reached the goal too.
// TOLARIA_RL_SEEDS sets how many seeds (agents) to measure, one after
// another (TOLARIA_RL_FIRST_SEED the first, default 1); TOLARIA_RL_CONFIG
// changes the configuration measured: JSON of Config's fields, or with
// TOLARIA_RL_CONFIG_FILE a configuration file as tolaria rl reads it.
func TestSolve(t *testing.T) {
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
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	for seed := first; seed < first+seeds; seed++ {
		cfg := DefaultConfig()
		if path := os.Getenv("TOLARIA_RL_CONFIG_FILE"); path != "" {
			raw, err := os.ReadFile(path)
			must(t, err)
			cfg, err = ParseConfig(raw)
			must(t, err)
		}
		if js := os.Getenv("TOLARIA_RL_CONFIG"); js != "" {
			must(t, json.Unmarshal([]byte(js), &cfg))
		}
		cfg.Seed = uint64(seed)
		goal := cfg.Goal()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		res, err := RunInProcess(ctx, dev, cfg, RunOptions{Dir: t.TempDir(), Graphs: true, MaxLead: 50,
			SolvedReturn: goal.Return, SolvedEpisodes: goal.Episodes})
		cancel()
		must(t, err)
		r := res[0]
		t.Logf("seed %d: solved at env step %d (-1: not within %d), training window at %d; %d episodes, %d learner steps, last-100 training mean %.1f, %s",
			seed, r.Solved, cfg.TotalSteps, r.SolvedTraining, len(r.Episodes), r.LearnerSteps, r.MeanReturn(100), r.Elapsed.Round(time.Second))
		for _, e := range r.EvalResults {
			t.Logf("  evaluation at step %d: greedy mean %.1f over %d episodes; training mean of the last 100 episodes then %.1f",
				e.EnvSteps, e.MeanReturn, e.Episodes, trainingMean(r.Episodes, e.EnvSteps, 100))
		}
		if r.Solved < 0 {
			t.Errorf("seed %d did not reach a mean of %g over %d episodes on %s in %d steps", seed, goal.Return, goal.Episodes, cfg.Env, cfg.TotalSteps)
		}
	}
}

// trainingMean is the mean return of the last n training episodes that
// ended by step.
func trainingMean(eps []EpisodeRecord, step, n int) float64 {
	end := 0
	for end < len(eps) && eps[end].EnvSteps <= step {
		end++
	}
	r := AgentResult{Episodes: eps[:end]}
	return r.MeanReturn(n)
}

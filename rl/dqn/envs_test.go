package dqn

import (
	"context"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/env"
)

// shortConfig is a run of a few hundred steps on e: a small network, two
// environments, training from step 100 and an evaluation of four
// episodes every 300 steps.
func shortConfig(e env.Spec) Config {
	cfg := DefaultConfig()
	cfg.Env, cfg.Hidden, cfg.NumEnvs = e, []int{16}, 2
	cfg.BatchSize, cfg.LearningStarts, cfg.BufferCapacity, cfg.TargetUpdate = 32, 100, 1000, 50
	cfg.TotalSteps, cfg.EpsilonDecaySteps, cfg.EvalInterval, cfg.EvalEpisodes = 600, 300, 300, 4
	cfg.StopWhenSolved = false
	return cfg
}

// TestOtherEnvironmentsTrain: an actor and a learner train on Acrobot-v1
// and MountainCar-v0 as on CartPole-v1, their network's input and output
// following the environment (6 and 3, 2 and 3), its max_steps ending every
// episode there, and every episode's return that of a step limit with a
// reward of -1 a step.
func TestOtherEnvironmentsTrain(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	for _, tc := range []struct {
		spec            env.Spec
		limit           int
		inputs, outputs int
	}{
		{env.Spec{Name: env.AcrobotName, Params: map[string]any{"max_steps": 60}}, 60, 6, 3},
		{env.Spec{Name: env.MountainCarName, Params: map[string]any{"max_steps": 50}}, 50, 2, 3},
	} {
		cfg := shortConfig(tc.spec)
		spec, err := cfg.Spec()
		must(t, err)
		if spec.Inputs != tc.inputs || spec.Outputs != tc.outputs || cfg.Layout(spec).ObsSize != tc.inputs {
			t.Fatalf("%s: network %s, memory %+v; want %d inputs and %d outputs", tc.spec, spec, cfg.Layout(spec), tc.inputs, tc.outputs)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := RunInProcess(ctx, dev, cfg, RunOptions{Graphs: true, MaxLead: 50})
		cancel()
		must(t, err)
		r := res[0]
		if r.EnvSteps != cfg.TotalSteps || r.LearnerSteps == 0 || len(r.Episodes) == 0 || len(r.EvalResults) != 2 {
			t.Fatalf("%s: %d env steps, %d learner steps, %d episodes, %d evaluations", tc.spec, r.EnvSteps, r.LearnerSteps, len(r.Episodes), len(r.EvalResults))
		}
		for _, e := range r.Episodes {
			if e.Length < 1 || e.Length > tc.limit || e.Return > 0 || e.Return < -float64(e.Length) {
				t.Errorf("%s: an episode of %d steps returned %g; want at most %d steps, each -1 (0 at the goal)", tc.spec, e.Length, e.Return, tc.limit)
			}
		}
		for _, e := range r.EvalResults {
			for _, ret := range e.Returns {
				if ret > 0 || ret < -float64(tc.limit) {
					t.Errorf("%s: a greedy episode returned %g, outside [-%d, 0]", tc.spec, ret, tc.limit)
				}
			}
		}
	}
}

// TestGoalStopsAtTheEnvironmentsGoal: what solves a run is its
// environment's goal. MountainCar-v0 cut at 50 steps returns at least -50,
// above its goal of -110: the first greedy evaluation of 100 episodes
// solves it and stops the agent. On CartPole-v1, whose goal is 475, the
// same evaluation of a barely trained network does not.
func TestGoalStopsAtTheEnvironmentsGoal(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	for _, tc := range []struct {
		spec   env.Spec
		solved int
	}{
		{env.Spec{Name: env.MountainCarName, Params: map[string]any{"max_steps": 50}}, 300},
		{env.Spec{Name: env.CartPoleName}, -1},
	} {
		cfg := shortConfig(tc.spec)
		cfg.EvalEpisodes, cfg.StopWhenSolved = 100, true
		goal := cfg.Goal()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := RunInProcess(ctx, dev, cfg, RunOptions{Graphs: true, MaxLead: 50, SolvedReturn: goal.Return, SolvedEpisodes: goal.Episodes})
		cancel()
		must(t, err)
		r := res[0]
		if r.Solved != tc.solved {
			t.Errorf("%s (goal %+v): solved at %d, want %d; evaluations %+v", tc.spec, goal, r.Solved, tc.solved, r.EvalResults)
		}
		if tc.solved >= 0 && r.EnvSteps >= cfg.TotalSteps {
			t.Errorf("%s: solved at %d but ran all %d steps", tc.spec, r.Solved, r.EnvSteps)
		}
	}
}

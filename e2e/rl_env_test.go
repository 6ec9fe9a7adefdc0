package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
)

// TestRLEnvFromConfig: env: {name: MountainCar-v0, max_steps: 50} builds
// MountainCar-v0 in the actor, the learner and the evaluation: every
// episode ends by step 50, config.yaml and the summary record the spec,
// and the goal is MountainCar-v0's (-110 over 100 episodes), which a step
// limit of 50 (a return of at least -50) makes the first greedy
// evaluation reach, so stop_when_solved stops the agent there.
func TestRLEnvFromConfig(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	cfg := writeRLConfig(t, dir, "env: {name: MountainCar-v0, max_steps: 50}\nmodel: {hidden: [32]}\n"+
		"batch_size: 32\nlearning_starts: 500\neval_interval: 1000\neval_episodes: 100\n")
	r := tolaria(t, dir, nil, "rl", "--total-steps", "30000", "--seed", "1", "--run-dir", runDir, "--config", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	recorded, err := os.ReadFile(filepath.Join(runDir, rundir.ConfigFile))
	if err != nil || !strings.Contains(string(recorded), "\nenv: {name: MountainCar-v0, max_steps: 50}\n") {
		t.Errorf("config.yaml does not record the env (%v):\n%s", err, recorded)
	}
	sum := readRLSummary(t, runDir)
	a := sum.Agents[0]
	if sum.Env != "{name: MountainCar-v0, max_steps: 50}" || sum.Goal != (rl.Goal{Return: -110, Episodes: 100}) {
		t.Errorf("summary: env %q, goal %+v", sum.Env, sum.Goal)
	}
	if a.State != rl.AgentSucceeded || a.SolvedAt != 1000 || a.EnvSteps >= 30000 || a.BestEvalMeanReturn < -50 || a.BestEvalMeanReturn > 0 {
		t.Errorf("agent 0: %s, solved at %d, %d env steps, best greedy mean %g; want stopped when solved at 1000 with a mean in [-50, 0]",
			a.State, a.SolvedAt, a.EnvSteps, a.BestEvalMeanReturn)
	}
	episodes := 0
	for _, e := range rlEvents(runDir, 0) {
		if e.Event == "episode" {
			episodes++
			if e.Return < -50 || e.Return > 0 {
				t.Errorf("an episode returned %g: more than 50 steps of -1", e.Return)
			}
		}
	}
	if episodes < 1000/50 {
		t.Errorf("%d episodes in %d steps of at most 50 each", episodes, a.EnvSteps)
	}
	if !strings.Contains(r.stderr, "goal") || !strings.Contains(r.stderr, "-110") {
		t.Errorf("the run does not say its goal:\n%s", r.stderr)
	}
}

// TestRLRefusesBadEnv: an unknown environment, a bad parameter, the
// multi-agent world with an actor per agent or with another number of
// agents than num_agents are refused with exit 2, naming the key and what
// is known, before anything is written.
func TestRLRefusesBadEnv(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	for _, tc := range []struct{ config, want string }{
		{"env: Pong-v5\n", "env.name: unknown environment \"Pong-v5\"; known are CartPole-v1, Acrobot-v1, MountainCar-v0, Forage"},
		{"env: {name: Acrobot-v1, max_steps: 0}\n", "env.max_steps: 0; give a whole number in 1..1000000"},
		{"env: {name: MountainCar-v0, force: 2}\n", "env.force: MountainCar-v0 takes no such parameter; it takes max_steps"},
		{"env: {max_steps: 300}\n", "env.name: is missing"},
		{"env: {name: Forage, agents: 1}\nactor: per-agent\n", "per-agent gives each agent environments of its own, but Forage is one world that all the agents act in together"},
		{"env: {name: Forage, agents: 3}\nnum_agents: 2\n", "env.agents puts 3 agents in the Forage world"},
	} {
		r := tolaria(t, dir, nil, "rl", "--config", writeRLConfig(t, dir, tc.config), "--run-dir", runDir)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, want 2 saying %q\n%s", tc.config, r.code, tc.want, r.stderr)
		}
		if _, err := os.Stat(runDir); err == nil {
			t.Fatalf("%q: %s was created", tc.config, runDir)
		}
	}
}

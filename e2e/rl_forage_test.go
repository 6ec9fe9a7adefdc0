package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
)

// TestRLForageSharedActor: tolaria rl with env: Forage runs one shared
// actor process for both agents (the same worker in both agents' events,
// its log and the saved worlds in the run directory, no actor of an
// agent's own) beside a learner process each; both agents finish every
// step, and the summary names the scripted baseline they must beat in
// place of a goal.
func TestRLForageSharedActor(t *testing.T) {
	dir := t.TempDir()
	runDir := filepath.Join(dir, "run")
	cfg := writeRLConfig(t, dir, "env: {name: Forage, width: 8, height: 8, food: 4, max_steps: 40, last_move: 1}\nnum_agents: 2\nnum_envs: 2\n"+
		"model: {hidden: [16]}\nlearning_starts: 500\ntotal_steps: 4000\neval_interval: 2000\neval_episodes: 4\n")
	r := tolaria(t, dir, nil, "rl", "--seed", "1", "--run-dir", runDir, "--config", cfg)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	sum := readRLSummary(t, runDir)
	if sum.Goal != (rl.Goal{}) || len(sum.ScriptedBaseline) != 2 || sum.ScriptedBaseline[0] <= 0 || sum.ScriptedBaseline[1] <= 0 {
		t.Errorf("summary: goal %+v, scripted baseline %v; want no goal and each agent's baseline", sum.Goal, sum.ScriptedBaseline)
	}
	if !strings.Contains(r.stdout+r.stderr, "the agents must beat the scripted baseline") {
		t.Errorf("the printed summary does not name the baseline:\n%s\n%s", r.stdout, r.stderr)
	}
	for _, f := range []string{rl.WorldFile, rl.SharedActorLog} {
		if _, err := os.Stat(filepath.Join(runDir, f)); err != nil {
			t.Errorf("the run directory lacks %s: %v", f, err)
		}
	}
	actors := map[int]bool{}
	for i, a := range sum.Agents {
		if a.State != rl.AgentSucceeded || a.EnvSteps != 4000 || a.LearnerSteps == 0 || a.Evaluations != 2 {
			t.Errorf("agent %d: %s, %d env steps, %d learner steps, %d evaluations", i, a.State, a.EnvSteps, a.LearnerSteps, a.Evaluations)
		}
		if _, err := os.Stat(filepath.Join(rl.AgentDir(runDir, i), "actor.log")); err == nil {
			t.Errorf("agent %d has an actor of its own", i)
		}
		for _, e := range rlEvents(runDir, i) {
			if e.Event == "worker" && e.Role == "shared-actor" {
				actors[e.PID] = true
			}
		}
	}
	if len(actors) != 1 {
		t.Errorf("shared actor pids in the agents' events: %v, want one process for both", actors)
	}
}

package rl

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/trainer"
)

// sharedRequest is a run of two agents in one small Forage world.
func sharedRequest(t *testing.T, total int) Request {
	req := rlRequest(t)
	cfg := req.Config
	cfg.Env = env.Spec{Name: env.ForageName, Params: map[string]any{"width": 8, "height": 8, "food": 4, "max_steps": 40}}
	cfg.NumEnvs, cfg.TotalSteps, cfg.EvalInterval, cfg.EvalEpisodes = 2, total, 2000, 4
	req.Config, req.ConfigYAML, req.WorldSaveEvery = cfg, cfg.YAML(), 50
	return req
}

// worldEvents are agent i's world events: whether each shared actor that
// started went on from the saved worlds, and from which step.
func worldEvents(t *testing.T, runDir string, i int) (restored []bool, savedAt []int) {
	t.Helper()
	err := readEvents(runDir, i, func(e trainer.Event) {
		if e.Kind == jobserver.EventWorld {
			r, _ := e.Fields["restored"].(bool)
			restored = append(restored, r)
			savedAt = append(savedAt, eventFields(e.Fields).int("saved_at_env_steps"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return restored, savedAt
}

// sharedActorPID is the pid of the last shared actor agent 0's events name.
func sharedActorPID(runDir string) int {
	pid := 0
	_ = readEvents(runDir, 0, func(e trainer.Event) {
		if role, _ := e.Fields["role"].(string); e.Kind == EventWorker && role == jobserver.RoleSharedActor {
			pid = eventFields(e.Fields).int("pid")
		}
	})
	return pid
}

// TestSharedActorRunsEveryAgent: with Forage, one shared actor process
// steps the world for both agents, each with its own learner process;
// both finish every step, with the same episodes (they end together: 37
// of 40 steps in each of the 2 worlds) and their own evaluations, and the
// worlds are saved beside the run.
func TestSharedActorRunsEveryAgent(t *testing.T) {
	req := sharedRequest(t, 3000)
	sum := runToEnd(t, req)
	for i, a := range sum.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 3000 || a.LearnerSteps == 0 || a.Episodes != 2*(3000/2/40) || a.Evaluations != 1 || a.Syncs == 0 {
			t.Errorf("agent %d: %+v", i, a)
		}
		if restored, _ := worldEvents(t, req.Dir, i); len(restored) != 1 || restored[0] {
			t.Errorf("agent %d: world events %v, want one actor that started its worlds afresh", i, restored)
		}
		// The shared actor captured the agent's own policy and evaluation,
		// and never fell back to eager steps.
		captured := map[string]int{}
		err := readEvents(req.Dir, i, func(e trainer.Event) {
			graph, _ := e.Fields["graph"].(string)
			role, _ := e.Fields["role"].(string)
			switch {
			case e.Kind == trainer.EventCapture && role == jobserver.RoleActor:
				captured[graph]++
			case e.Kind == trainer.EventFallback:
				t.Errorf("agent %d: a fallback: %v", i, e.Fields)
			}
		})
		if err != nil || captured[dqn.GraphPolicy] != 1 || captured[dqn.GraphEval] != 1 {
			t.Errorf("agent %d: the shared actor's captures %v (%v), want its policy and its evaluation once each", i, captured, err)
		}
	}
	if _, err := os.Stat(filepath.Join(req.Dir, WorldFile)); err != nil {
		t.Errorf("the worlds were not saved beside the run: %v", err)
	}
	if b := sum.ScriptedBaseline; len(b) != 2 || b[0] <= 0 || b[1] <= 0 || sum.Goal.Episodes != 0 {
		t.Errorf("summary's goal %+v and scripted baseline %v; want no goal and each agent's baseline", sum.Goal, b)
	}
	if _, err := os.Stat(filepath.Join(req.Dir, SharedActorLog)); err != nil {
		t.Errorf("no shared actor log: %v", err)
	}
	for _, dir := range []string{AgentDir(req.Dir, 0), AgentDir(req.Dir, 1)} {
		if _, err := os.Stat(filepath.Join(dir, "actor.log")); err == nil {
			t.Errorf("%s has an actor log of its own: an actor per agent ran", dir)
		}
	}
}

// TestSharedActorKilledResumesItsWorld: the shared actor, killed with
// SIGKILL once it has saved its worlds past step 1,000, is started again
// and goes on from the worlds it saved (its world event says from which
// step), not from fresh ones; both agents then finish every step and no
// more, wherever in a vector step the kill landed (the actor started
// again goes on from each agent's buffer, which a kill between two
// worlds' appends leaves mid-way through one: see
// dqn.TestSharedActorEndsAtTotalSteps, which kills it there on purpose).
func TestSharedActorKilledResumesItsWorld(t *testing.T) {
	req := sharedRequest(t, 40000)
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		sum Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := run.Run(context.Background())
		done <- result{sum, errors.Join(err, run.Close())}
	}()
	savedAt := 0
	for deadline := time.Now().Add(3 * time.Minute); savedAt < 1000; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the shared actor did not save its worlds past step 1,000 within 3 minutes")
		}
		var w struct {
			EnvSteps int `json:"env_steps"`
		}
		if raw, err := os.ReadFile(filepath.Join(req.Dir, WorldFile)); err == nil && json.Unmarshal(raw, &w) == nil {
			savedAt = w.EnvSteps
		}
	}
	pid := sharedActorPID(req.Dir)
	if pid <= 0 {
		t.Fatal("no shared actor in agent 0's events")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	for i, a := range res.sum.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 40000 || a.ActorRestarts != 1 {
			t.Errorf("agent %d: %s, %d env steps, %d actor restarts; want succeeded at 40000 after 1 restart", i, a.State, a.EnvSteps, a.ActorRestarts)
		}
		restored, at := worldEvents(t, req.Dir, i)
		if len(restored) != 2 || restored[0] || !restored[1] || at[1] < savedAt {
			t.Errorf("agent %d: world events restored %v at %v; want a fresh start, then the worlds saved at step %d or later", i, restored, at, savedAt)
		}
	}
	if a, b := res.sum.Agents[0], res.sum.Agents[1]; a.Episodes != b.Episodes {
		t.Errorf("the agents finished %d and %d episodes of the same worlds", a.Episodes, b.Episodes)
	}
}

// TestSharedActorRefusesPerAgentWorld: Forage with actor: per-agent is
// refused before anything is written.
func TestSharedActorRefusesPerAgentWorld(t *testing.T) {
	req := sharedRequest(t, 3000)
	req.Config.Actor = dqn.ActorPerAgent
	if _, err := Prepare(req, time.Now()); err == nil {
		t.Fatal("Forage with an actor per agent was accepted")
	}
	if _, err := os.Stat(req.Dir); err == nil {
		t.Errorf("%s was made for a refused run", req.Dir)
	}
}

// TestSharedActorInterruptedResumes: cancelling a shared run saves every
// learner's checkpoint, every buffer and the worlds; the resumed run's
// shared actor goes on from the worlds as they were when it stopped, and
// every agent finishes.
func TestSharedActorInterruptedResumes(t *testing.T) {
	req := sharedRequest(t, 20000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	past := map[int]bool{}
	req.Report = func(s AgentStatus) {
		mu.Lock()
		defer mu.Unlock()
		if s.EnvSteps > 1000 && s.LearnerSteps > 0 {
			past[s.Agent] = true
		}
		if len(past) == 2 {
			cancel()
		}
	}
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Run(ctx)
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	for i, a := range sum.Agents {
		if a.State != AgentInterrupted || a.EnvSteps >= 20000 {
			t.Fatalf("agent %d after the cancel: %+v", i, a)
		}
	}
	req.Report, req.Resume = nil, true
	run, err = Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := run.Run(context.Background())
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	for i, a := range resumed.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 20000 || a.LearnerSteps <= sum.Agents[i].LearnerSteps {
			t.Errorf("agent %d resumed: %+v (interrupted at %d learner steps)", i, a, sum.Agents[i].LearnerSteps)
		}
		restored, at := worldEvents(t, req.Dir, i)
		if len(restored) != 2 || restored[0] || !restored[1] || at[1] < 1000 {
			t.Errorf("agent %d: world events restored %v at %v; want a fresh start, then the worlds saved as the first actor stopped", i, restored, at)
		}
	}
}

// TestSharedActorAsksForDeviceMemory: the shared actor asks the budget
// broker for its bill (a copy of every agent's weights and acting graphs)
// before it allocates, booked with every learner's as one holder: under
// --device-memory fitting the three workers (with headroom) both agents
// finish, each agent's events holding the one grant of the three bills
// together; under a limit the two learners fit but not with the shared
// actor, every agent fails at once, its reason naming the shared actor and
// its bill, rather than the learners held while the shared actor waits.
func TestSharedActorAsksForDeviceMemory(t *testing.T) {
	req := sharedRequest(t, 1200)
	req.Config.LearningStarts, req.Config.EvalInterval = 300, 0
	actor, learner := bills(t, req.Config, jobserver.SharedActorBill)
	world := actor.DeviceBytes() + 2*learner.DeviceBytes()
	req.DeviceMemory = int64(float64(world)*budget.Headroom) + world/4
	sum := runToEnd(t, req)
	for i, a := range sum.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 1200 {
			t.Errorf("agent %d: %s (%s), %d env steps", i, a.State, a.Reason, a.EnvSteps)
		}
		var kinds []string
		for _, e := range budgetEvents(t, req.Dir, i) {
			kinds = append(kinds, e.Kind)
			if e.Kind == holder.EventGrant && (e.Fields["bytes"] != float64(world) || e.Fields["capacity"] != float64(req.DeviceMemory)) {
				t.Errorf("agent %d granted %v of %v bytes, want the shared actor's and both learners' %d of %d", i, e.Fields["bytes"], e.Fields["capacity"], world, req.DeviceMemory)
			}
		}
		if len(kinds) != 1 || kinds[0] != holder.EventGrant {
			t.Errorf("agent %d's budget events %v, want one grant for the shared actor and the learners", i, kinds)
		}
	}
	t.Logf("the shared actor's bill %v; a learner's %v", actor, learner)

	req = sharedRequest(t, 1200)
	req.Config.LearningStarts, req.Config.EvalInterval = 300, 0
	req.DeviceMemory = int64(float64(2*learner.DeviceBytes())*budget.Headroom) + actor.DeviceBytes()/2
	sum = runToEnd(t, req)
	t.Logf("agent 0's reason: %s", sum.Agents[0].Reason)
	for i, a := range sum.Agents {
		if a.State != AgentFailed || !strings.Contains(a.Reason, "rl shared actor and learners 0, 1 needs") ||
			!strings.Contains(a.Reason, "shared actor "+trainer.FormatBytes(actor.DeviceBytes())) || a.EnvSteps != 0 {
			t.Errorf("agent %d: %s (%s), %d env steps; want it failed, the world's budget refused naming the shared actor's bill", i, a.State, a.Reason, a.EnvSteps)
		}
	}
}

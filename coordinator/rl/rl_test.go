package rl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// rlRequest is a small run of two agents with this test binary as the
// worker and memory files in a temporary directory.
func rlRequest(t *testing.T) Request {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(serveAsWorkerEnv, "1")
	cfg := dqn.DefaultConfig()
	cfg.NumAgents, cfg.Hidden, cfg.TotalSteps, cfg.LearningStarts, cfg.BufferCapacity = 2, []int{16}, 3000, 500, 5000
	cfg.EvalInterval, cfg.EvalEpisodes = 1000, 20
	return Request{Config: cfg, ConfigYAML: cfg.YAML(), Dir: filepath.Join(t.TempDir(), "run"), Graphs: true, MaxLead: 50,
		Worker: exe, ActorRestarts: 1}
}

// TestRLRunsAgentsInWorkers: each agent's actor and learner run in worker
// processes until the agent's steps are done; the summaries, events and
// learner checkpoints are written, the metrics and the reports follow,
// the memory files are removed, and a finished run is not resumed.
func TestRLRunsAgentsInWorkers(t *testing.T) {
	req := rlRequest(t)
	metrics := telemetry.NewAgentMetrics("test")
	m, err := metrics.RL([]string{AgentStarting, AgentRunning, AgentSucceeded, AgentFailed, AgentInterrupted})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reports := map[int]int{}
	req.Metrics = m
	req.Report = func(s AgentStatus) {
		mu.Lock()
		reports[s.Agent]++
		mu.Unlock()
	}
	sum := runToEnd(t, req)
	for i, a := range sum.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 3000 || a.LearnerSteps < 2000 || a.Episodes == 0 || a.Publishes == 0 || a.Syncs == 0 ||
			a.Epoch != uint64(a.Episodes) || a.Evaluations != 3 {
			t.Errorf("agent %d: %+v", i, a)
		}
		eps, err := ReadEpisodes(req.Dir, i)
		if err != nil || len(eps) != a.Episodes {
			t.Errorf("agent %d: %d episodes in its events (%v), %d in its summary", i, len(eps), err, a.Episodes)
		}
		evals, err := ReadEvals(req.Dir, i)
		if err != nil || len(evals) != 3 || evals[2].EnvSteps != 3000 || evals[0].Episodes != 20 || evals[2].MeanReturn != a.EvalMeanReturn {
			t.Errorf("agent %d: evaluations %+v (%v), want at 1000, 2000 and 3000 steps of 20 episodes", i, evals, err)
		}
		if _, err := trainer.LoadCheckpoint(filepath.Join(AgentDir(req.Dir, i), trainer.CheckpointFile)); err != nil {
			t.Errorf("agent %d's learner checkpoint: %v", i, err)
		}
		if reports[i] < 3 {
			t.Errorf("agent %d: %d reports", i, reports[i])
		}
		checkAgentEvents(t, req.Dir, i)
	}
	checkAgentGraphSeries(t, metrics, len(sum.Agents))
	if left, _ := filepath.Glob(filepath.Join(shm.Dir, fmt.Sprintf("tolaria-rl-%d-*", os.Getpid()))); len(left) > 0 {
		t.Errorf("memory files left: %v", left)
	}
	req.Resume = true
	if _, err := Prepare(req, time.Now()); !errors.Is(err, refusal.ErrConfig) {
		t.Errorf("resuming a finished run: %v", err)
	}
	req.Resume = false
	if _, err := Prepare(req, time.Now()); !errors.Is(err, rundir.ErrExists) {
		t.Errorf("a new run in a run's directory: %v", err)
	}
}

// TestRLInterruptedSavesAndResumes: cancelling a run stops every worker;
// each learner checkpoints and each buffer is saved, and a resumed run
// goes on from there to the end.
func TestRLInterruptedSavesAndResumes(t *testing.T) {
	req, sum := interruptedRL(t)
	for i, a := range sum.Agents {
		if a.EnvSteps == 0 || a.EnvSteps >= 8000 {
			t.Fatalf("agent %d after the cancel: %+v", i, a)
		}
		for _, f := range []string{ReplayFile, trainer.CheckpointFile} {
			if _, err := os.Stat(filepath.Join(AgentDir(req.Dir, i), f)); err != nil {
				t.Errorf("agent %d: %v", i, err)
			}
		}
	}
	// The resumed summary counts the earlier run's seconds and actor
	// restarts: agent 0's summary is made to say it ran for an hour, and
	// its actor was started again twice.
	earlier, ok := readAgentSummary(AgentDir(req.Dir, 0))
	if !ok {
		t.Fatal("agent 0 wrote no summary")
	}
	earlier.Seconds, earlier.ActorRestarts = 3600, 2
	if err := writeJSON(filepath.Join(AgentDir(req.Dir, 0), rundir.SummaryFile), earlier); err != nil {
		t.Fatal(err)
	}
	resumed := runToEnd(t, req)
	for i, a := range resumed.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 8000 || a.LearnerSteps <= sum.Agents[i].LearnerSteps || a.Epoch != uint64(a.Episodes) {
			t.Errorf("agent %d resumed: %+v (interrupted at %d learner steps)", i, a, sum.Agents[i].LearnerSteps)
		}
		if a.Seconds <= sum.Agents[i].Seconds {
			t.Errorf("agent %d resumed: %.2f seconds, not more than the %.2f it ran before", i, a.Seconds, sum.Agents[i].Seconds)
		}
	}
	if a := resumed.Agents[0]; a.Seconds <= 3600 || a.ActorRestarts != 2 {
		t.Errorf("agent 0 resumed: %.2f seconds and %d actor restarts; want more than the earlier 3600 and the earlier 2", a.Seconds, a.ActorRestarts)
	}
}

// TestHalfCountGoesOnOverRestarts: the count of a half played by several
// processes, each counting from 0, is their sum, whatever the new
// process's first report says.
func TestHalfCountGoesOnOverRestarts(t *testing.T) {
	var c halfCount
	for _, step := range []struct {
		attempt int
		n, want int64
	}{{1, 3, 3}, {1, 10, 10}, {2, 12, 22}, {2, 15, 25}, {3, 0, 25}, {3, 4, 29}} {
		if got := c.total(step.attempt, step.n); got != step.want {
			t.Fatalf("attempt %d at %d: total %d, want %d", step.attempt, step.n, got, step.want)
		}
	}
}

// TestSolvedEvaluationStopsTheAgent: a greedy evaluation of 100 episodes
// with a mean of 475 or more marks the agent solved at its step and, when
// the run asks for it, sets the agent's stop flag; fewer episodes, or a
// lower mean, do neither.
func TestSolvedEvaluationStopsTheAgent(t *testing.T) {
	for _, stop := range []bool{false, true} {
		cfg := dqn.DefaultConfig()
		spec, err := cfg.Spec()
		if err != nil {
			t.Fatal(err)
		}
		mem, err := shm.Create(filepath.Join(t.TempDir(), "agent0"), cfg.Layout(spec))
		if err != nil {
			t.Fatal(err)
		}
		cfg.StopWhenSolved = stop
		a := &agentRun{r: &Run{req: Request{Config: cfg}, log: slog.New(slog.DiscardHandler)}, mem: mem,
			st: AgentStatus{SolvedAt: -1, TrainSolvedAt: -1}}
		for _, e := range []jobserver.RLEval{{EnvSteps: 5000, MeanReturn: 480, Episodes: 99}, {EnvSteps: 10000, MeanReturn: 474.9, Episodes: 100}} {
			a.addEval(e)
			if a.st.SolvedAt >= 0 || mem.Stopped() {
				t.Fatalf("%+v: solved at %d, stopped %v", e, a.st.SolvedAt, mem.Stopped())
			}
		}
		a.addEval(jobserver.RLEval{EnvSteps: 15000, MeanReturn: 500, Episodes: 100})
		a.addEval(jobserver.RLEval{EnvSteps: 20000, MeanReturn: 300, Episodes: 100})
		st := a.st
		if st.SolvedAt != 15000 || mem.Stopped() != stop || st.Evaluations != 4 || st.BestEvalMeanReturn != 500 || st.EvalMeanReturn != 300 {
			t.Errorf("stop %v: solved at %d, stopped %v, %d evaluations, best %g, last %g", stop, st.SolvedAt, mem.Stopped(), st.Evaluations, st.BestEvalMeanReturn, st.EvalMeanReturn)
		}
		_ = mem.Close()
	}
}

// TestGoalFollowsTheEnvironment: the run's environment sets what solves
// it: on Acrobot-v1 a greedy mean of -100 over 100 episodes solves it and
// stops the agent, -100.5 does not; the training window's best mean is
// its own, negative, not the 0 it started from.
func TestGoalFollowsTheEnvironment(t *testing.T) {
	cfg := dqn.DefaultConfig()
	cfg.Env = env.Spec{Name: env.AcrobotName, Params: map[string]any{"max_steps": 300}}
	spec, err := cfg.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if spec.Inputs != 6 || spec.Outputs != 3 {
		t.Fatalf("Acrobot-v1's network is %s, want 6 inputs and 3 outputs", spec)
	}
	mem, err := shm.Create(filepath.Join(t.TempDir(), "agent0"), cfg.Layout(spec))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	r := &Run{req: Request{Config: cfg}, log: slog.New(slog.DiscardHandler)}
	if g := r.goal(); g != (Goal{Return: -100, Episodes: 100}) {
		t.Fatalf("Acrobot-v1's goal is %+v", g)
	}
	a := &agentRun{r: r, mem: mem, st: AgentStatus{SolvedAt: -1, TrainSolvedAt: -1}}
	for k := range 100 {
		a.addEpisode(dqn.EpisodeRecord{Return: -300, Length: 300, EnvSteps: 300 * (k + 1)}, false)
	}
	a.addEpisode(dqn.EpisodeRecord{Return: -400, Length: 300, EnvSteps: 30300}, false)
	if st := a.st; st.BestMeanReturn != -300 || st.MeanReturn != -301 || st.TrainSolvedAt >= 0 {
		t.Errorf("training window: best %g, mean %g, solved at %d; want -300, -301 and -1", st.BestMeanReturn, st.MeanReturn, st.TrainSolvedAt)
	}
	a.addEval(jobserver.RLEval{EnvSteps: 5000, MeanReturn: -100.5, Episodes: 100})
	if a.st.SolvedAt >= 0 || mem.Stopped() {
		t.Fatalf("a greedy mean of -100.5 solved Acrobot-v1 (at %d, stopped %v)", a.st.SolvedAt, mem.Stopped())
	}
	a.addEval(jobserver.RLEval{EnvSteps: 10000, MeanReturn: -100, Episodes: 100})
	if a.st.SolvedAt != 10000 || !mem.Stopped() || a.st.BestEvalMeanReturn != -100 {
		t.Errorf("a greedy mean of -100: solved at %d, stopped %v, best %g", a.st.SolvedAt, mem.Stopped(), a.st.BestEvalMeanReturn)
	}
}

// interruptedRL runs two agents of 8000 steps and cancels the run once
// both have trained: each leaves a checkpoint and a saved buffer.
func interruptedRL(t *testing.T) (Request, Summary) {
	t.Helper()
	req := rlRequest(t)
	req.Config.TotalSteps = 8000
	req.ConfigYAML = req.Config.YAML()
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
		if a.State != AgentInterrupted {
			t.Fatalf("agent %d after the cancel: %+v", i, a)
		}
	}
	req.Report, req.Resume = nil, true
	return req, sum
}

// snapshot is every file of a directory tree with its contents.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		files[path] = string(raw)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRLResumeRefusesWhatItCannotTrust: --resume is refused, with a
// reason naming the file and what to do and nothing written, when an
// agent's saved buffer has a flipped byte in a stored transition or is
// another agent's, when its checkpoint holds NaN (digest recomputed), when
// config.yaml was edited, and when the request changes the configuration
// (its agents, its environment).
func TestRLResumeRefusesWhatItCannotTrust(t *testing.T) {
	req, _ := interruptedRL(t)
	buf0 := filepath.Join(AgentDir(req.Dir, 0), ReplayFile)
	buf1 := filepath.Join(AgentDir(req.Dir, 1), ReplayFile)
	ck0 := filepath.Join(AgentDir(req.Dir, 0), trainer.CheckpointFile)
	cfgPath := filepath.Join(req.Dir, rundir.ConfigFile)
	cases := []struct {
		name   string
		damage func(t *testing.T, req *Request)
		says   []string
	}{
		{"a flipped byte in a stored transition", func(t *testing.T, _ *Request) {
			raw := readFile(t, buf0)
			raw[len(raw)-4096] ^= 0x01 // in the replay ring, before the digest
			writeFile(t, buf0, raw)
		}, []string{"agent 0", ReplayFile, "damaged", "remove it to resume agent 0 from its checkpoint"}},
		{"agent 1's buffer in agent 0's place", func(t *testing.T, _ *Request) {
			writeFile(t, buf0, readFile(t, buf1))
		}, []string{"agent 0", "agent 1's buffer, not agent 0's"}},
		{"a NaN checkpoint under a recomputed digest", func(t *testing.T, _ *Request) {
			ck, err := trainer.LoadCheckpoint(ck0)
			if err != nil {
				t.Fatal(err)
			}
			params := ck.Parameters()
			params[3] = float32(math.NaN())
			if err := trainer.SaveCheckpoint(AgentDir(req.Dir, 0), ck, params, ck.State()); err != nil {
				t.Fatal(err)
			}
		}, []string{"agent 0", trainer.CheckpointFile, "not finite", "remove it to start agent 0 again"}},
		{"gamma edited in config.yaml", func(t *testing.T, r *Request) {
			edited := strings.Replace(string(readFile(t, cfgPath)), "gamma: 0.99", "gamma: 0.5", 1)
			writeFile(t, cfgPath, []byte(edited))
			cfg, err := dqn.ParseConfig([]byte(edited))
			if err != nil {
				t.Fatal(err)
			}
			r.Config = cfg
		}, []string{rundir.ConfigFile, "edited"}},
		{"3 agents asked of a 2-agent run", func(t *testing.T, r *Request) {
			r.Config.NumAgents = 3
		}, []string{"num_agents: 3", "resumed only with the configuration it began with"}},
		{"another environment asked of a CartPole-v1 run", func(t *testing.T, r *Request) {
			r.Config.Env = env.Spec{Name: env.CartPoleName, Params: map[string]any{"max_steps": 200}}
		}, []string{"env: {name: CartPole-v1, max_steps: 200}", "resumed only with the configuration it began with"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := snapshot(t, req.Dir)
			r := req
			c.damage(t, &r)
			damaged := snapshot(t, req.Dir)
			run, err := Prepare(r, time.Now())
			if err == nil {
				_ = run.Close()
				t.Fatal("resumed")
			}
			if !errors.Is(err, refusal.ErrConfig) {
				t.Errorf("%v: not a configuration error (exit 2)", err)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the refusal does not say %q: %v", s, err)
				}
			}
			if after := snapshot(t, req.Dir); !maps.Equal(after, damaged) {
				t.Error("the refused resume wrote into the run directory")
			}
			for path, raw := range before { // undo the damage
				writeFile(t, path, []byte(raw))
			}
		})
	}
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatalf("the undamaged run: %v", err)
	}
	_ = run.Close()
}

// TestRLResumeNeverThrowsProgressAway: agent 0's buffer is gone and agent
// 1's holds NaN observations (its digest recomputed). On resume agent 0
// goes on from its checkpoint with an empty buffer that its actor
// refills, from the environment step it had reached, and finishes; agent
// 1's learner stops at its first publish as not finite and its good
// checkpoint is kept byte for byte.
func TestRLResumeNeverThrowsProgressAway(t *testing.T) {
	req, sum := interruptedRL(t)
	cfg := req.Config
	spec, err := cfg.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(AgentDir(req.Dir, 0), ReplayFile)); err != nil {
		t.Fatal(err)
	}
	buf1 := filepath.Join(AgentDir(req.Dir, 1), ReplayFile)
	owner := shm.Owner{Agent: 1, Config: cfg.Digest()}
	saved, err := shm.LoadSaved(buf1, owner, cfg.Layout(spec))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := shm.CreateSharedFrom("tolaria-test-agent1", saved)
	if err != nil {
		t.Fatal(err)
	}
	nan := make([]float32, cfg.Layout(spec).ObsSize)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	for range cfg.BufferCapacity { // every transition held
		if err := mem.Append(shm.Transition{Obs: nan, NextObs: nan}); err != nil {
			t.Fatal(err)
		}
	}
	err = errors.Join(mem.Save(buf1, owner), mem.Close())
	if err != nil {
		t.Fatal(err)
	}
	ck0, _ := trainer.LoadCheckpoint(filepath.Join(AgentDir(req.Dir, 0), trainer.CheckpointFile))
	good1 := readFile(t, filepath.Join(AgentDir(req.Dir, 1), trainer.CheckpointFile))
	// The last environment step agent 0's events record (an episode's end
	// or an evaluation): without its buffer it resumes from there. Which
	// step that is depends on where the cancel fell, after step 1000.
	reached := 0
	eps, err := ReadEpisodes(req.Dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		reached = max(reached, e.EnvSteps)
	}
	evals, err := ReadEvals(req.Dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evals {
		reached = max(reached, e.EnvSteps)
	}
	if reached < 1000 || reached > sum.Agents[0].EnvSteps {
		t.Fatalf("agent 0's events record environment step %d at the cancel; want 1000..%d", reached, sum.Agents[0].EnvSteps)
	}

	resumed := runToEnd(t, req)
	a0, a1 := resumed.Agents[0], resumed.Agents[1]
	if a0.State != AgentSucceeded || a0.EnvSteps != 8000 || a0.LearnerSteps <= ck0.Step {
		t.Errorf("agent 0 without its buffer: %+v; want it finished from its checkpoint of step %d", a0, ck0.Step)
	}
	var start map[string]any
	for _, line := range strings.Split(string(readFile(t, filepath.Join(AgentDir(req.Dir, 0), rundir.EventsFile))), "\n") {
		if e, err := telemetry.DecodeEvent([]byte(line)); err == nil && e.Kind == EventAgentStart {
			start = e.Fields
		}
	}
	if start["resume"] != true || start["buffer"] == nil || start["learner_step"] != float64(ck0.Step) ||
		start["env_steps"] != float64(reached) {
		t.Errorf("agent 0's resumed start: %v; want it from its checkpoint with an empty buffer, from environment step %d (its events' last)", start, reached)
	}
	if aside, _ := filepath.Glob(filepath.Join(AgentDir(req.Dir, 0), "events-before-*")); len(aside) > 0 {
		t.Errorf("agent 0's events were set aside: %v", aside)
	}
	if ck, err := trainer.LoadCheckpoint(filepath.Join(AgentDir(req.Dir, 0), trainer.CheckpointFile)); err != nil || ck.Step < ck0.Step {
		t.Errorf("agent 0's checkpoint after the resume: step %d (%v), was %d", ck.Step, err, ck0.Step)
	}
	if a1.State != AgentFailed || !strings.Contains(a1.Reason, "not finite") || !strings.Contains(a1.Reason, "step") {
		t.Errorf("agent 1 on NaN observations: %s (%s); want failed as not finite", a1.State, a1.Reason)
	}
	if now := readFile(t, filepath.Join(AgentDir(req.Dir, 1), trainer.CheckpointFile)); !bytes.Equal(now, good1) {
		t.Error("agent 1's good checkpoint was replaced")
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func writeFile(t *testing.T, path string, raw []byte) {
	t.Helper()
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkAgentEvents: agent i's events.jsonl is an events log as a training
// run writes it, every line of it, with the agent's own kinds and the
// capture events of both its halves.
func checkAgentEvents(t *testing.T, runDir string, i int) {
	t.Helper()
	f, err := os.Open(filepath.Join(AgentDir(runDir, i), rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kinds := map[string]int{}
	captures := map[string]int{}
	err = telemetry.ReadEvents(f, func(e trainer.Event) {
		kinds[e.Kind]++
		if e.Fields["agent"] != float64(i) {
			t.Errorf("agent %d: a %s event of agent %v", i, e.Kind, e.Fields["agent"])
		}
		if e.Kind == trainer.EventCapture {
			captures[fmt.Sprint(e.Fields["role"], "/", e.Fields["graph"])]++
		}
	})
	if err != nil {
		t.Errorf("agent %d's events do not read as an events log: %v", i, err)
	}
	for _, kind := range []string{EventAgentStart, EventWorker, EventEpisode, EventEval, EventAgentEnd, trainer.EventCapture} {
		if kinds[kind] == 0 {
			t.Errorf("agent %d's events have no %s event: %v", i, kind, kinds)
		}
	}
	for _, g := range []string{"learner/" + dqn.GraphLearner, "actor/" + dqn.GraphPolicy, "actor/" + dqn.GraphEval} {
		if captures[g] == 0 {
			t.Errorf("agent %d's events have no capture of %s: %v", i, g, captures)
		}
	}
}

// checkAgentGraphSeries: each agent's halves reported their captures and
// replays into the graph families, under the agent and the half, and no
// step fell back.
func checkAgentGraphSeries(t *testing.T, m *telemetry.Metrics, agents int) {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // family agent half [reason]
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range metric.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			key := strings.Join([]string{mf.GetName(), l[telemetry.LabelAgent], l[telemetry.LabelWorker]}, " ")
			got[key] += metric.GetCounter().GetValue()
		}
	}
	for i := range agents {
		for _, half := range []string{telemetry.RLLearner, telemetry.RLActor} {
			key := func(name string) string { return fmt.Sprintf("%s %d %s", name, i, half) }
			if got[key(telemetry.MetricCapturesTotal)] == 0 || got[key(telemetry.MetricReplaysTotal)] == 0 {
				t.Errorf("agent %d %s: %s = %v, %s = %v; want captures and replays", i, half,
					telemetry.MetricCapturesTotal, got[key(telemetry.MetricCapturesTotal)],
					telemetry.MetricReplaysTotal, got[key(telemetry.MetricReplaysTotal)])
			}
			if v, ok := got[key(telemetry.MetricFallbackTotal)]; !ok || v != 0 {
				t.Errorf("agent %d %s: %s = %v (present %v), want 0", i, half, telemetry.MetricFallbackTotal, v, ok)
			}
		}
	}
}

// runToEnd prepares req and runs it to its end, closing it; a failure of
// either fails the test.
func runToEnd(t *testing.T, req Request) Summary {
	t.Helper()
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Run(context.Background())
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	return sum
}

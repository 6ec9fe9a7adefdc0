package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// rlRequest is a small run of two agents with this test binary as the
// worker and memory files in a temporary directory.
func rlRequest(t *testing.T) RLRequest {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(serveAsWorkerEnv, "1")
	cfg := dqn.DefaultConfig()
	cfg.NumAgents, cfg.Hidden, cfg.TotalSteps, cfg.LearningStarts, cfg.BufferCapacity = 2, []int{16}, 3000, 500, 5000
	cfg.EvalInterval, cfg.EvalEpisodes = 1000, 20
	return RLRequest{Config: cfg, ConfigYAML: cfg.YAML(), Dir: filepath.Join(t.TempDir(), "run"), Graphs: true, MaxLead: 50,
		Worker: exe, ActorRestarts: 1, MemoryDir: t.TempDir()}
}

// TestRLRunsAgentsInWorkers: each agent's actor and learner run in worker
// processes until the agent's steps are done; the summaries, events and
// learner checkpoints are written, the metrics and the reports follow,
// the memory files are removed, and a finished run is not resumed.
func TestRLRunsAgentsInWorkers(t *testing.T) {
	req := rlRequest(t)
	m, err := telemetry.NewMetrics("test").RL([]string{AgentStarting, AgentRunning, AgentSucceeded, AgentFailed, AgentInterrupted})
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
	run, err := PrepareRL(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Run(context.Background())
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	for i, a := range sum.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 3000 || a.LearnerSteps < 2000 || a.Episodes == 0 || a.Publishes == 0 || a.Syncs == 0 ||
			a.Epoch != uint64(a.Episodes) || a.Evaluations != 3 {
			t.Errorf("agent %d: %+v", i, a)
		}
		eps, err := ReadRLEpisodes(req.Dir, i)
		if err != nil || len(eps) != a.Episodes {
			t.Errorf("agent %d: %d episodes in its events (%v), %d in its summary", i, len(eps), err, a.Episodes)
		}
		evals, err := ReadRLEvals(req.Dir, i)
		if err != nil || len(evals) != 3 || evals[2].EnvSteps != 3000 || evals[0].Episodes != 20 || evals[2].MeanReturn != a.EvalMeanReturn {
			t.Errorf("agent %d: evaluations %+v (%v), want at 1000, 2000 and 3000 steps of 20 episodes", i, evals, err)
		}
		if _, err := trainer.LoadCheckpoint(filepath.Join(AgentDir(req.Dir, i), trainer.CheckpointFile)); err != nil {
			t.Errorf("agent %d's learner checkpoint: %v", i, err)
		}
		if reports[i] < 3 {
			t.Errorf("agent %d: %d reports", i, reports[i])
		}
	}
	if left, _ := filepath.Glob(filepath.Join(req.MemoryDir, "*")); len(left) > 0 {
		t.Errorf("memory files left: %v", left)
	}
	req.Resume = true
	if _, err := PrepareRL(req, time.Now()); !errors.Is(err, ErrConfig) {
		t.Errorf("resuming a finished run: %v", err)
	}
	req.Resume = false
	if _, err := PrepareRL(req, time.Now()); !errors.Is(err, ErrRunExists) {
		t.Errorf("a new run in a run's directory: %v", err)
	}
}

// TestRLInterruptedSavesAndResumes: cancelling a run stops every worker;
// each learner checkpoints and each buffer is saved, and a resumed run
// goes on from there to the end.
func TestRLInterruptedSavesAndResumes(t *testing.T) {
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
	run, err := PrepareRL(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Run(ctx)
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	for i, a := range sum.Agents {
		if a.State != AgentInterrupted || a.EnvSteps == 0 || a.EnvSteps >= 8000 {
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
	if err := writeJSON(filepath.Join(AgentDir(req.Dir, 0), SummaryFile), earlier); err != nil {
		t.Fatal(err)
	}
	req.Resume, req.Report = true, nil
	run, err = PrepareRL(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := run.Run(context.Background())
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
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
		a := &agentRun{r: &RLRun{req: RLRequest{Config: cfg}, log: slog.New(slog.DiscardHandler)}, mem: mem,
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

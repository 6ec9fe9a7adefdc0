package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/telemetry/infragen"
	"github.com/tolaria-ml/tolaria/trainer"
)

// rlSteps is each agent's environment steps in TestPrometheusScrapesRL: a
// run of some ten seconds on two cores.
const rlSteps = 40000

// rlAgentSummary is the part of an agent's row of summary.json the test
// compares with what Prometheus scraped.
type rlAgentSummary struct {
	Agent        int    `json:"agent"`
	State        string `json:"state"`
	Episodes     int    `json:"episodes"`
	EnvSteps     int    `json:"env_steps"`
	LearnerSteps int    `json:"learner_steps"`
	Publishes    int64  `json:"publishes"`
	Syncs        int64  `json:"syncs"`
}

// TestPrometheusScrapesRL: a real Prometheus scrapes `tolaria rl` with two
// agents to the end and, in the --metrics-linger after it, holds every RL
// family for both agents with the run's final figures (those of
// summary.json), the graph families for each agent's actor and learner
// (captures and replays, no fallback), no RL alert is active, every query
// of the dashboard's Reinforcement learning row returns numbers, and each
// agent's events.jsonl reads as a training run's events log.
func TestPrometheusScrapesRL(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	stderr, done := startInterruptible(t, dir, nil, "rl", "--agents", "2", "--total-steps", strconv.Itoa(rlSteps),
		"--stop-when-solved=false", "--run-dir", run, "--metrics-addr", "127.0.0.1:0", "--metrics-linger", "20s")
	prom := startPrometheus(t, servingAt(t, stderr))

	// The run is over once summary.json is written; Prometheus has the
	// final figures once it has scraped both agents as succeeded.
	byAgent := func(expr string) map[string]float64 {
		got := map[string]float64{}
		for _, s := range prom.query(expr) {
			got[s.Metric[telemetry.LabelAgent]] = s.float()
		}
		return got
	}
	var state string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := os.Stat(filepath.Join(run, "summary.json"))
		succeeded := byAgent(telemetry.MetricRLAgentState + `{state="succeeded"}`)
		if err == nil && succeeded["0"] == 1 && succeeded["1"] == 1 {
			break
		}
		state = fmt.Sprintf("summary.json: %v; scraped succeeded agents: %v", err, succeeded)
		select {
		case <-done:
			t.Fatalf("tolaria rl exited before Prometheus scraped its end (%s)\n%s", state, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the run's end in Prometheus (%s)\nprometheus targets: %s\n%s", state, prom.targets(), stderr)
		}
	}

	raw, err := os.ReadFile(filepath.Join(run, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var summary struct {
		Agents []rlAgentSummary `json:"agents"`
	}
	if err := json.Unmarshal(raw, &summary); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if len(summary.Agents) != 2 {
		t.Fatalf("summary.json has %d agents, want 2:\n%s", len(summary.Agents), raw)
	}

	// Every agent-labelled family has a series for each agent.
	for _, name := range telemetry.RLMetricNames() {
		if name == telemetry.MetricRLAgents || name == telemetry.MetricRLGoalReturn {
			continue
		}
		got := byAgent(fmt.Sprintf(`{__name__=~"%s(_count)?"}`, name))
		if _, ok := got["0"]; !ok {
			t.Errorf("%s has no series of agent 0: %v", name, got)
		}
		if _, ok := got["1"]; !ok {
			t.Errorf("%s has no series of agent 1: %v", name, got)
		}
	}
	// The final figures, as summary.json has them.
	for _, a := range summary.Agents {
		id := strconv.Itoa(a.Agent)
		if a.State != "succeeded" || a.EnvSteps != rlSteps || a.Episodes == 0 || a.Publishes == 0 || a.Syncs == 0 {
			t.Errorf("agent %s in summary.json: %+v; want succeeded after %d env steps, with episodes, publishes and syncs", id, a, rlSteps)
		}
		for expr, want := range map[string]float64{
			telemetry.MetricRLEnvSteps:                 rlSteps,
			telemetry.MetricRLLearnerSteps:             float64(a.LearnerSteps),
			telemetry.MetricRLEpisodesTotal:            float64(a.Episodes),
			telemetry.MetricRLEpisodeReturn + "_count": float64(a.Episodes),
			telemetry.MetricRLPublishesTotal:           float64(a.Publishes),
			telemetry.MetricRLSyncsTotal:               float64(a.Syncs),
			telemetry.MetricRLActorRestartsTotal:       0,
		} {
			if got, ok := byAgent(expr)[id]; !ok || got != want {
				t.Errorf("agent %s: %s = %v (present %v), want %v (summary.json)", id, expr, got, ok, want)
			}
		}
		for expr, ok := range map[string]func(float64) bool{
			telemetry.MetricRLMeanReturn:            func(v float64) bool { return v >= 8 && v <= 500 }, // CartPole returns
			telemetry.MetricRLEpsilon:               func(v float64) bool { return v > 0 && v < 1 },
			telemetry.MetricRLActorStepsPerSecond:   func(v float64) bool { return v > 0 },
			telemetry.MetricRLLearnerStepsPerSecond: func(v float64) bool { return v > 0 },
			telemetry.MetricRLWeightLag:             func(v float64) bool { return v >= 0 && v < 100 },
			telemetry.MetricRLLoss:                  func(v float64) bool { return v > 0 && !math.IsInf(v, 0) },
		} {
			if got, present := byAgent(expr)[id]; !present || !ok(got) {
				t.Errorf("agent %s: %s = %v (present %v), not what a healthy run reports", id, expr, got, present)
			}
		}
	}
	checkRLGraphSeries(t, prom, len(summary.Agents))
	for i := range summary.Agents {
		checkRLEventsLog(t, run, i)
	}
	// The run's goal is its environment's, CartPole-v1's by default.
	if r := prom.query(telemetry.MetricRLGoalReturn); len(r) != 1 || r[0].Metric[telemetry.LabelEnv] != "CartPole-v1" || r[0].float() != 475 {
		t.Errorf("%s = %v, want one series of 475 for CartPole-v1", telemetry.MetricRLGoalReturn, r)
	}
	for st, want := range map[string]float64{"succeeded": 2, "running": 0, "failed": 0} {
		r := prom.query(fmt.Sprintf(`%s{state=%q}`, telemetry.MetricRLAgents, st))
		if len(r) != 1 || r[0].float() != want {
			t.Errorf(`%s{state=%q} = %v, want %v`, telemetry.MetricRLAgents, st, r, want)
		}
	}

	for _, name := range []string{"TolariaRLActorRestarting", "TolariaRLLearnerStalled", "TolariaTargetDown"} {
		if prom.alertActive(name) {
			t.Errorf("%s is active after a healthy run", name)
		}
	}

	n := 0
	// A rate needs two scrapes of its series that differ; the linger
	// serves the final figures meanwhile.
	deadline := time.Now().Add(15 * time.Second)
	for _, pq := range dashboardQueries(t) {
		if pq.row != infragen.RLRowTitle {
			continue
		}
		n++
		number := false
		for first := true; !number && (first || time.Now().Before(deadline)); first = false {
			for _, s := range prom.query(pq.expr) {
				number = number || !math.IsNaN(s.float())
			}
			if !number {
				time.Sleep(250 * time.Millisecond)
			}
		}
		if !number {
			t.Errorf("panel %q: query returned no number within 15s of the run's end (the linger is 20s): %s", pq.title, pq.expr)
		}
	}
	if n == 0 {
		t.Errorf("the dashboard has no %s row", infragen.RLRowTitle)
	}
}

// checkRLGraphSeries: Prometheus holds the graph families of each agent's
// actor and learner, told apart by the agent and worker labels, with
// captures and replays and every fallback reason at 0.
func checkRLGraphSeries(t *testing.T, prom *prometheus, agents int) {
	t.Helper()
	byHalf := func(expr string) map[string]float64 {
		got := map[string]float64{}
		for _, s := range prom.query(expr) {
			got[s.Metric[telemetry.LabelAgent]+"/"+s.Metric[telemetry.LabelWorker]] = s.float()
		}
		return got
	}
	captures := byHalf(fmt.Sprintf("sum by (%s, %s) (%s)", telemetry.LabelAgent, telemetry.LabelWorker, telemetry.MetricCapturesTotal))
	replays := byHalf(telemetry.MetricReplaysTotal)
	timed := byHalf(telemetry.MetricReplaySeconds + "_count")
	fallbacks := byHalf(fmt.Sprintf("sum by (%s, %s) (%s)", telemetry.LabelAgent, telemetry.LabelWorker, telemetry.MetricFallbackTotal))
	for i := range agents {
		for _, half := range []string{telemetry.RLActor, telemetry.RLLearner} {
			k := fmt.Sprintf("%d/%s", i, half)
			if captures[k] <= 0 || replays[k] <= 0 || timed[k] <= 0 {
				t.Errorf("agent %d %s: captures %v, replays %v (timed %v); want both above 0", i, half, captures[k], replays[k], timed[k])
			}
			if v, ok := fallbacks[k]; !ok || v != 0 {
				t.Errorf("agent %d %s: %s = %v (present %v), want 0", i, half, telemetry.MetricFallbackTotal, v, ok)
			}
		}
	}
	for _, name := range []string{telemetry.MetricLastStepTimestamp, telemetry.MetricTrainEpoch} {
		if r := prom.query(name); len(r) != 0 {
			t.Errorf("%s has series in a reinforcement-learning run: %v", name, r)
		}
	}
}

// checkRLEventsLog: agent i's events.jsonl reads, every line of it, with
// the reader of a training run's events log, and holds the agent's
// episodes and its halves' captures.
func checkRLEventsLog(t *testing.T, runDir string, i int) {
	t.Helper()
	f, err := os.Open(filepath.Join(rl.AgentDir(runDir, i), rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kinds := map[string]int{}
	if err := telemetry.ReadEvents(f, func(e trainer.Event) { kinds[e.Kind]++ }); err != nil {
		t.Errorf("agent %d's events.jsonl is not an events log: %v", i, err)
	}
	for _, kind := range []string{rl.EventAgentStart, rl.EventWorker, rl.EventEpisode,
		rl.EventAgentEnd, trainer.EventCapture} {
		if kinds[kind] == 0 {
			t.Errorf("agent %d's events.jsonl has no %s event: %v", i, kind, kinds)
		}
	}
}

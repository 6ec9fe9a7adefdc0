package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

var rlStates = []string{"starting", "running", "succeeded", "failed", "interrupted"}

func newRL(t *testing.T) (*Metrics, *RLMetrics) {
	t.Helper()
	m := NewAgentMetrics("test")
	r, err := m.RL(rlStates)
	if err != nil {
		t.Fatal(err)
	}
	return m, r
}

// TestRLAgentsByState: the agents gauge and each agent's state series
// follow the agents from state to state, and every state reads 0 before
// any agent is told of.
func TestRLAgentsByState(t *testing.T) {
	m, r := newRL(t)
	if _, err := m.RL(rlStates); err == nil {
		t.Error("a second RL on the same metrics registered again")
	}
	for _, st := range rlStates {
		if v, ok := gatherBudgets(t, m)[MetricRLAgents+`{state="`+st+`"}`]; !ok || v != 0 {
			t.Errorf("agents{state=%q} = %v (present %v) before any agent, want 0", st, v, ok)
		}
	}
	steps := []struct {
		agent int
		state string
		want  map[string]float64 // agents by state
	}{
		{0, "starting", map[string]float64{"starting": 1}},
		{1, "starting", map[string]float64{"starting": 2}},
		{0, "running", map[string]float64{"starting": 1, "running": 1}},
		{1, "running", map[string]float64{"running": 2}},
		{1, "running", map[string]float64{"running": 2}}, // told again, counted once
		{0, "succeeded", map[string]float64{"running": 1, "succeeded": 1}},
		{1, "failed", map[string]float64{"succeeded": 1, "failed": 1}},
	}
	now := map[int]string{}
	for i, s := range steps {
		r.Set(RLAgent{Agent: s.agent, State: s.state})
		now[s.agent] = s.state
		got := gatherBudgets(t, m)
		for _, st := range rlStates {
			if v := got[MetricRLAgents+`{state="`+st+`"}`]; v != s.want[st] {
				t.Errorf("step %d (agent %d %s): agents{state=%q} = %v, want %v", i, s.agent, s.state, st, v, s.want[st])
			}
			for agent, cur := range now {
				key := MetricRLAgentState + `{agent="` + string(rune('0'+agent)) + `",state="` + st + `"}`
				want := 0.0
				if st == cur {
					want = 1
				}
				if v, ok := got[key]; !ok || v != want {
					t.Errorf("step %d: %s = %v (present %v), want %v", i, key, v, ok, want)
				}
			}
		}
	}
}

// TestRLCountersSurviveRestarts: publishes and syncs are told as the
// counts of the agent's current processes; when one is started again its
// count drops to 0 and rises anew, and the counters go on growing.
func TestRLCountersSurviveRestarts(t *testing.T) {
	m, r := newRL(t)
	told := []struct {
		publishes, syncs int64
		want             [2]float64 // the counters after it
	}{
		{0, 0, [2]float64{0, 0}},
		{3, 2, [2]float64{3, 2}},
		{7, 5, [2]float64{7, 5}},
		{7, 1, [2]float64{7, 6}},  // the actor started again: its syncs from 0
		{9, 4, [2]float64{9, 9}},  // both go on
		{2, 4, [2]float64{11, 9}}, // the learner started again (a resume)
		{2, 4, [2]float64{11, 9}}, // told again, nothing new
	}
	for i, s := range told {
		r.Set(RLAgent{Agent: 0, State: "running", Publishes: s.publishes, Syncs: s.syncs})
		got := gatherBudgets(t, m)
		pub, syn := got[MetricRLPublishesTotal+`{agent="0"}`], got[MetricRLSyncsTotal+`{agent="0"}`]
		if pub != s.want[0] || syn != s.want[1] {
			t.Errorf("after telling %d publishes and %d syncs (step %d): counters %v and %v, want %v", s.publishes, s.syncs, i, pub, syn, s.want)
		}
	}
	// Another agent's counts are its own.
	r.Set(RLAgent{Agent: 1, State: "running", Publishes: 1, Syncs: 1})
	got := gatherBudgets(t, m)
	if got[MetricRLPublishesTotal+`{agent="1"}`] != 1 || got[MetricRLPublishesTotal+`{agent="0"}`] != 11 {
		t.Errorf("publishes: agent 1 %v, agent 0 %v; want 1 and 11", got[MetricRLPublishesTotal+`{agent="1"}`], got[MetricRLPublishesTotal+`{agent="0"}`])
	}
}

// TestRLEpisodesAndGauges: episodes count into the counter and the
// histogram; restarts start at 0 with the agent; the gauges read the
// status last told.
func TestRLEpisodesAndGauges(t *testing.T) {
	m, r := newRL(t)
	r.Set(RLAgent{Agent: 0, State: "running"})
	got := gatherBudgets(t, m)
	for _, name := range []string{MetricRLEpisodesTotal, MetricRLActorRestartsTotal} {
		if v, ok := got[name+`{agent="0"}`]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v) once the agent is told of, want 0", name, v, ok)
		}
	}
	returns := []float64{9, 22, 500, 475}
	for _, ret := range returns {
		r.Episode(0, ret)
	}
	r.Episode(1, 30)
	for _, ret := range []float64{-500, -100, -99} { // Acrobot-v1's: every step -1
		r.Episode(2, ret)
	}
	r.Goal("Acrobot-v1", -100)
	r.Goal("CartPole-v1", 475) // a run has one goal: the last set
	r.ActorRestarted(0)
	r.ActorRestarted(0)
	r.Set(RLAgent{Agent: 0, State: "running", MeanReturn: 251.5, EnvSteps: 15000, LearnerSteps: 3500,
		ActorStepsPerSec: 4000, LearnerStepsPerSec: 900, Lag: 2, Epsilon: 0.05, Loss: 0.125})
	got = gatherBudgets(t, m)
	want := map[string]float64{
		MetricRLEpisodesTotal + `{agent="0"}`:         4,
		MetricRLEpisodesTotal + `{agent="1"}`:         1,
		MetricRLEpisodeReturn + `_count{agent="0"}`:   4,
		MetricRLEpisodeReturn + `_sum{agent="0"}`:     9 + 22 + 500 + 475,
		MetricRLEpisodeReturn + `_count{agent="1"}`:   1,
		MetricRLActorRestartsTotal + `{agent="0"}`:    2,
		MetricRLMeanReturn + `{agent="0"}`:            251.5,
		MetricRLEnvSteps + `{agent="0"}`:              15000,
		MetricRLLearnerSteps + `{agent="0"}`:          3500,
		MetricRLActorStepsPerSecond + `{agent="0"}`:   4000,
		MetricRLLearnerStepsPerSecond + `{agent="0"}`: 900,
		MetricRLWeightLag + `{agent="0"}`:             2,
		MetricRLEpsilon + `{agent="0"}`:               0.05,
		MetricRLLoss + `{agent="0"}`:                  0.125,
		MetricRLGoalReturn + `{env="CartPole-v1"}`:    475,
	}
	if _, ok := got[MetricRLGoalReturn+`{env="Acrobot-v1"}`]; ok {
		t.Errorf("the goal of an earlier environment is still exported")
	}
	for key, w := range want {
		if v, ok := got[key]; !ok || v != w {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, w)
		}
	}
	// 475 is a bucket boundary: a return of 475 is at most it, 500 above;
	// so are the negative goals: -100 holds -500 and -100, not -99.
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != MetricRLEpisodeReturn {
			continue
		}
		for _, x := range mf.GetMetric() {
			agent := x.GetLabel()[0].GetValue()
			for _, b := range x.GetHistogram().GetBucket() {
				switch le, n := b.GetUpperBound(), b.GetCumulativeCount(); {
				case agent == "0" && le == 475 && n != 3:
					t.Errorf("agent 0: bucket le=475 holds %d returns, want 3 (9, 22, 475)", n)
				case agent == "2" && le == -100 && n != 2:
					t.Errorf("agent 2: bucket le=-100 holds %d returns, want 2 (-500, -100)", n)
				}
			}
		}
	}
}

func TestRLMetricsPassPromlint(t *testing.T) {
	m, r := newRL(t)
	r.Set(RLAgent{Agent: 0, State: "running", Publishes: 1, Syncs: 1, EvalMeanReturn: 120, Evaluated: true})
	r.Episode(0, 20)
	r.ActorRestarted(0)
	r.Goal("Acrobot-v1", -100)
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, name := range RLMetricNames() {
		if !names[name] {
			t.Errorf("%s is not served", name)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "tolaria_rl") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// TestRLGreedyReturnAbsentBeforeAnEvaluation: an agent not yet evaluated
// has no greedy-return series (not a 0 that reads as a bad policy); once
// evaluated it has its mean.
func TestRLGreedyReturnAbsentBeforeAnEvaluation(t *testing.T) {
	m, r := newRL(t)
	greedy := func() (float64, bool) {
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == MetricRLGreedyMeanReturn && len(mf.GetMetric()) > 0 {
				return mf.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	r.Set(RLAgent{Agent: 0, State: "running", MeanReturn: 30})
	if v, ok := greedy(); ok {
		t.Fatalf("greedy return %g served before an evaluation", v)
	}
	r.Set(RLAgent{Agent: 0, State: "running", MeanReturn: 30, EvalMeanReturn: 212.5, Evaluated: true})
	if v, ok := greedy(); !ok || v != 212.5 {
		t.Fatalf("greedy return %g (%v), want 212.5", v, ok)
	}
}

// TestRLNeedsAgentMetrics: RL refuses metrics whose graph families have no
// agent label.
func TestRLNeedsAgentMetrics(t *testing.T) {
	if _, err := NewMetrics("test").RL(rlStates); err == nil {
		t.Error("RL on NewMetrics registered its families")
	}
}

// TestRLHalvesFeedTheGraphFamilies: an agent's halves report captures,
// replays and fallbacks into tolaria_graph_* under their agent and half,
// two agents' series stay apart, and a half started again counts on; a
// half feeds no training family (no step time, no last-step timestamp for
// the stall alert).
func TestRLHalvesFeedTheGraphFamilies(t *testing.T) {
	m, r := newRL(t)
	for agent := range 2 {
		for range 2 { // a half started again shares its series
			learner := r.Observer(agent, RLLearner, "cpu")
			learner.Observe(trainer.Captured{Seconds: 0.01})
			learner.Observe(trainer.Replayed{Seconds: 0.001})
			learner.Observe(trainer.Fallback{Reason: graphs.ReasonCaptureFailed})
			learner.Observe(trainer.Stepped{Seconds: 0.01, Samples: 64})
			learner.Observe(trainer.Epoch{Epoch: 3})
		}
		actor := r.Observer(agent, RLActor, "cpu")
		for range 3 + agent {
			actor.Observe(trainer.Replayed{Seconds: 0.0001})
		}
		actor.Observe(trainer.Captured{Seconds: 0.002, Pooled: true})
	}
	fams := gather(t, m)
	half := func(agent, worker string, extra ...string) map[string]string {
		l := map[string]string{LabelAgent: agent, LabelWorker: worker, LabelDevice: "cpu"}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{MetricCapturesTotal, half("0", RLLearner, LabelPooled, "false"), 2},
		{MetricCapturesTotal, half("1", RLActor, LabelPooled, "true"), 1},
		{MetricCaptureSeconds, half("1", RLLearner), 2},
		{MetricReplaysTotal, half("0", RLLearner), 2},
		{MetricReplaysTotal, half("0", RLActor), 3},
		{MetricReplaysTotal, half("1", RLActor), 4},
		{MetricReplaySeconds, half("1", RLActor), 4},
		{MetricFallbackTotal, half("1", RLLearner, LabelReason, graphs.ReasonCaptureFailed), 2},
		{MetricFallbackTotal, half("1", RLActor, LabelReason, graphs.ReasonCaptureFailed), 0},
		{MetricGraphEnabled, half("0", RLActor), 0},
	} {
		if got := value(t, fams, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	for _, name := range []string{MetricStepSeconds, MetricSamplesTotal, MetricTrainEpoch, MetricLastStepTimestamp,
		MetricPrefetchDisabled, MetricStageCopySeconds} {
		if n := len(fams[name].GetMetric()); n != 0 {
			t.Errorf("%s has %d series from agents' halves, want none", name, n)
		}
	}
	for name, mf := range fams {
		if !strings.HasPrefix(name, "tolaria_graph_") {
			continue
		}
		for _, metric := range mf.GetMetric() {
			if l := labels(metric); l[LabelAgent] == "" || l[LabelWorker] == "" || l[LabelDevice] == "" {
				t.Errorf("%s%v lacks its agent, worker or device", name, l)
			}
		}
	}
}

// TestTrainingMetricsHaveNoAgentLabel: a run's and a sweep's series are
// those they were before agents had graph series.
func TestTrainingMetricsHaveNoAgentLabel(t *testing.T) {
	for _, m := range []*Metrics{NewMetrics("test"), NewTrialMetrics("test")} {
		exercise(m.SeriesObserver(Series{Device: "cpu", Worker: "0", Trial: "a", Agent: "ignored"}))
		for name, mf := range gather(t, m) {
			for _, metric := range mf.GetMetric() {
				if _, ok := labels(metric)[LabelAgent]; ok {
					t.Errorf("%s carries an agent label outside a reinforcement-learning run", name)
				}
			}
		}
	}
}

package dqn

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/trainer"
)

// recorder keeps what it observes.
type recorder struct {
	mu sync.Mutex
	ms []trainer.Measurement
}

func (r *recorder) Observe(m trainer.Measurement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ms = append(r.ms, m)
}

// tally counts the measurements by name, capture events by graph and
// replays with a device time.
func (r *recorder) tally() (byName map[string]int, captures map[string]int, timed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byName, captures = map[string]int{}, map[string]int{}
	for _, m := range r.ms {
		byName[m.Name()]++
		switch m := m.(type) {
		case trainer.Event:
			if m.Kind == trainer.EventCapture {
				captures[m.Fields["graph"].(string)]++
			}
		case trainer.Replayed:
			if m.Seconds >= 0 {
				timed++
			}
		}
	}
	return byName, captures, timed
}

// TestHalvesReportTheirGraphs: with graphs on, a learner and an actor (its
// policy and its evaluator) tell their observers each capture, with a
// capture event naming the graph, and every replay with its device time,
// as a training run does; no step falls back.
func TestHalvesReportTheirGraphs(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := DefaultConfig()
	cfg.Hidden, cfg.BatchSize, cfg.LearningStarts = []int{16}, 32, 64
	cfg.TotalSteps, cfg.EvalInterval, cfg.EvalEpisodes, cfg.PublishInterval = 400, 200, 2, 10
	spec, err := cfg.Spec()
	must(t, err)
	mem, err := shm.CreateShared("tolaria-test-observe", cfg.Layout(spec))
	must(t, err)
	defer mem.Close()
	shared := NewShared()
	defer shared.Pool.Close()

	var learnObs, actObs recorder
	l, err := NewLearner(dev, shared, mem, cfg, 0, LearnerOptions{Graphs: true, Observer: &learnObs})
	must(t, err)
	defer l.Close()
	a, err := NewActor(dev, shared, mem, cfg, 0, ActorOptions{Graphs: true, MaxLead: 50, Observer: &actObs})
	must(t, err)
	defer a.Close()
	must(t, errors.Join(l.Capture(), a.Capture()))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var learnErr error
	wg.Go(func() { learnErr = l.Run(ctx) })
	actErr := a.Run(ctx)
	mem.Stop()
	wg.Wait()
	must(t, errors.Join(learnErr, actErr))
	steps := l.Steps()
	must(t, errors.Join(l.Close(), a.Close()))

	learned, learnCaptures, learnTimed := learnObs.tally()
	// One graph per staging buffer, captured once.
	if learned["captured"] == 0 || learnCaptures[GraphLearner] != learned["captured"] || learned["graph_enabled"] != 1 {
		t.Errorf("learner: %v, capture events %v; want one capture of %q, with an event per graph, that enables graphs", learned, learnCaptures, GraphLearner)
	}
	if steps == 0 || learned["replayed"] != steps || learnTimed != steps || learned["fallback"] != 0 {
		t.Errorf("learner: %d steps, %d replays (%d timed), %d fallbacks; want every step replayed and timed",
			steps, learned["replayed"], learnTimed, learned["fallback"])
	}
	acted, actCaptures, actTimed := actObs.tally()
	vsteps := cfg.TotalSteps / cfg.NumEnvs
	if acted["captured"] != 2 || actCaptures[GraphPolicy] != 1 || actCaptures[GraphEval] != 1 {
		t.Errorf("actor: %v, capture events %v; want one capture each of %q and %q", acted, actCaptures, GraphPolicy, GraphEval)
	}
	if acted["graph_enabled"] != 1 {
		t.Errorf("actor: graph_enabled observed %d times, want once (the policy's capture)", acted["graph_enabled"])
	}
	// An evaluation replays once per step of its longest episode.
	if evalReplays := acted["replayed"] - vsteps; evalReplays <= 0 || actTimed != acted["replayed"] || acted["fallback"] != 0 {
		t.Errorf("actor: %d replays (%d timed) for %d vector steps, %d fallbacks; want every step's replay, the evaluations' too, timed",
			acted["replayed"], actTimed, vsteps, acted["fallback"])
	}
}

// TestGraphReportFallbacks: a step that runs eagerly is a Fallback with
// its reason; the first of a reason, and every failed replay or capture,
// is a fallback event too, and a failed replay of the half's own graph
// turns GraphEnabled off.
func TestGraphReportFallbacks(t *testing.T) {
	var obs recorder
	r := newGraphReport(&obs, nil, GraphLearner, true)
	r.captureFailed(errors.New("capture refused"))
	r.ran(graphs.Result{Reason: graphs.ReasonCaptureFailed})
	r.ran(graphs.Result{Reason: graphs.ReasonCaptureFailed})
	r.ran(graphs.Result{Reason: graphs.ReasonDeviceError, ReplayErr: errors.New("launch failed")})
	r.ran(graphs.Result{Replayed: true})
	var reasons []string
	var events []map[string]any
	off := 0
	for _, m := range obs.ms {
		switch m := m.(type) {
		case trainer.Fallback:
			reasons = append(reasons, m.Reason)
		case trainer.Event:
			if m.Kind != trainer.EventFallback {
				t.Errorf("event %+v, want only fallback events", m)
			}
			events = append(events, m.Fields)
		case trainer.GraphEnabled:
			if !m.On {
				off++
			}
		}
	}
	want := []string{graphs.ReasonCaptureFailed, graphs.ReasonCaptureFailed, graphs.ReasonCaptureFailed, graphs.ReasonDeviceError}
	if len(reasons) != len(want) {
		t.Fatalf("fallback reasons %v, want %v", reasons, want)
	}
	for i := range want {
		if reasons[i] != want[i] {
			t.Errorf("fallback reasons %v, want %v", reasons, want)
		}
	}
	if len(events) != 2 || events[0]["stage"] != "capture" || events[1]["stage"] != "replay" ||
		events[1]["reason"] != graphs.ReasonDeviceError || events[0]["graph"] != GraphLearner {
		t.Errorf("fallback events %v, want the failed capture's and the failed replay's", events)
	}
	if off != 2 {
		t.Errorf("GraphEnabled off %d times, want 2 (the failed capture, the failed replay)", off)
	}
	if r.eager != 3 {
		t.Errorf("%d eager steps counted, want 3", r.eager)
	}
}

package dqn

import (
	"errors"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Graph names in the events of an agent's halves: which engine captured,
// replayed or fell back.
const (
	GraphLearner = "learner" // the learner's training step
	GraphPolicy  = "policy"  // the actor's greedy forward pass
	GraphEval    = "eval"    // the evaluator's greedy forward pass
)

// graphReport tells an observer of one engine's graph activity with the
// measurements and events a training run uses: Captured (and ExecUpdated
// for a pooled capture) with a capture event, and Fallback with the
// graphs.Reason of every step run eagerly although graphs are on (and of
// every failed capture), the first of each reason and every failed
// capture or replay also as a fallback event. Replays are reported by a
// replayTimer. main says whether the engine's steps are the half's own
// (the learner's step, the actor's policy), whose capture turns
// GraphEnabled on. A graphReport is used by the goroutine that issues the
// engine's steps.
type graphReport struct {
	obs   trainer.Observer
	pool  *graphs.Pool
	graph string
	main  bool
	seen  map[string]bool
	eager int // steps run eagerly although graphs were on
}

func newGraphReport(obs trainer.Observer, pool *graphs.Pool, graph string, main bool) *graphReport {
	if obs == nil {
		obs = trainer.NopObserver{}
	}
	return &graphReport{obs: obs, pool: pool, graph: graph, main: main, seen: map[string]bool{}}
}

func (r *graphReport) event(kind string, fields map[string]any) {
	fields["graph"] = r.graph
	r.obs.Observe(trainer.Event{Time: time.Now(), Kind: kind, Fields: fields})
}

// captured reports a successful capture's results.
func (r *graphReport) captured(results []graphs.CaptureResult) {
	for _, res := range results {
		if res.Pooled {
			r.obs.Observe(trainer.ExecUpdated{})
		}
		r.obs.Observe(trainer.Captured{Seconds: res.Seconds, Pooled: res.Pooled})
		r.event(trainer.EventCapture, map[string]any{"seconds": res.Seconds, "pooled": res.Pooled, "nodes": res.Nodes})
	}
	if r.main {
		r.obs.Observe(trainer.GraphEnabled{On: true})
	}
	if r.pool != nil {
		r.obs.Observe(trainer.PoolReserved{Bytes: r.pool.Stats().ReservedBytes})
	}
}

// captureFailed reports a failed capture: its steps run eagerly.
func (r *graphReport) captureFailed(err error) {
	r.fallback(graphs.ReasonCaptureFailed, map[string]any{"stage": "capture", "error": err.Error()})
	if r.main {
		r.obs.Observe(trainer.GraphEnabled{On: false})
	}
}

// ran reports a step that ran eagerly although graphs are on.
func (r *graphReport) ran(res graphs.Result) {
	if res.Reason == "" {
		return
	}
	r.eager++
	if res.ReplayErr == nil {
		r.fallback(res.Reason, nil)
		return
	}
	r.fallback(res.Reason, map[string]any{"stage": "replay", "error": res.ReplayErr.Error()})
	if r.main {
		r.obs.Observe(trainer.GraphEnabled{On: false})
	}
}

func (r *graphReport) fallback(reason string, fields map[string]any) {
	r.obs.Observe(trainer.Fallback{Reason: reason})
	if r.seen[reason] && fields == nil {
		return
	}
	r.seen[reason] = true
	if fields == nil {
		fields = map[string]any{}
	}
	fields["reason"] = reason
	r.event(trainer.EventFallback, fields)
}

// replayTimer measures the device time of replays with a ring of timing
// event pairs, so reading a measurement never waits for a replay that was
// just launched: a pair is read when it comes round again, or by flush.
// Each measurement is a Replayed.
type replayTimer struct {
	dev    device.Device
	obs    trainer.Observer
	starts []device.Event
	ends   []device.Event
	used   []bool
	next   int
}

func newReplayTimer(dev device.Device, obs trainer.Observer, n int) (*replayTimer, error) {
	t := &replayTimer{dev: dev, obs: obs, used: make([]bool, n)}
	for range n {
		a, err := dev.NewTimingEvent()
		if err != nil {
			return nil, errors.Join(err, t.destroy())
		}
		t.starts = append(t.starts, a)
		b, err := dev.NewTimingEvent()
		if err != nil {
			return nil, errors.Join(err, t.destroy())
		}
		t.ends = append(t.ends, b)
	}
	return t, nil
}

// run launches step on s, timing it when it is a replay.
func (t *replayTimer) run(s device.Stream, replays bool, step func() (graphs.Result, error)) (graphs.Result, error) {
	if !replays {
		return step()
	}
	i := t.next
	t.next = (t.next + 1) % len(t.starts)
	if t.used[i] {
		if err := t.collect(i); err != nil {
			return graphs.Result{}, err
		}
	}
	if err := s.Record(t.starts[i]); err != nil {
		return graphs.Result{}, err
	}
	res, err := step()
	if err != nil || !res.Replayed {
		return res, err
	}
	t.used[i] = true
	return res, s.Record(t.ends[i])
}

func (t *replayTimer) collect(i int) error {
	t.used[i] = false
	if err := t.ends[i].Synchronize(); err != nil {
		return err
	}
	d, err := t.dev.Elapsed(t.starts[i], t.ends[i])
	if err != nil {
		return err
	}
	t.obs.Observe(trainer.Replayed{Seconds: d.Seconds()})
	return nil
}

// flush reports every replay not yet read.
func (t *replayTimer) flush() error {
	var errs []error
	for i, u := range t.used {
		if u {
			errs = append(errs, t.collect(i))
		}
	}
	return errors.Join(errs...)
}

func (t *replayTimer) destroy() error {
	var errs []error
	for _, e := range append(t.starts, t.ends...) {
		errs = append(errs, e.Destroy())
	}
	t.starts, t.ends, t.used = nil, nil, nil
	return errors.Join(errs...)
}

package sweep

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Event kinds of the budget broker, in a trial's events log (see package
// holder).
const (
	EventBudgetWait    = holder.EventWait
	EventBudgetGrant   = holder.EventGrant
	EventBudgetRefused = holder.EventRefused
	EventBudgetPark    = holder.EventPark
	EventBudgetParked  = holder.EventParked
	EventBudgetKept    = holder.EventKept
)

// TrialBudget connects one run to a sweep's broker: its worker asks
// Broker for a budget on Device before it allocates.
type TrialBudget struct {
	Broker *budget.Broker
	Trial  string
	Device string // the slot's device, e.g. "cpu", "cuda:0"
	// Priority is the trial's: see budget.Ask.Priority.
	Priority float64
	// Report, when set, hears that the request waits and, after a wait,
	// that it was granted.
	Report func(BudgetUpdate)
}

// BudgetUpdate is a change of a trial's device-memory request (see
// holder.Update).
type BudgetUpdate = holder.Update

// budgetSink answers the trial worker's budget requests as a parkable
// holder of the sweep's broker, recording them in the run's events.
type budgetSink struct {
	tb      *TrialBudget
	obs     trainer.Observer
	metrics *sweepFamilies
	log     *slog.Logger
	// kept is the kept worker that serves the trial, of workers
	// (Config.ReuseWorkers); nil for a worker of its own. Its trial's
	// request continues its idle booking, and at the trial's end what it
	// still holds stays booked.
	kept    *keptWorker
	workers *keptWorkers
	// sweepLog hears of the kept workers the broker reclaims.
	sweepLog *slog.Logger

	once sync.Once
	h    *holder.Sink
}

func (s *budgetSink) holder() *holder.Sink {
	s.once.Do(func() {
		var m holder.Metrics
		if s.metrics != nil {
			m = familyMetrics{s.metrics}
		}
		var continues *budget.Ticket
		if s.kept != nil {
			continues = s.workers.continued(s.kept)
		}
		s.h = holder.New(holder.Config{Broker: s.tb.Broker, Holder: s.tb.Trial, Kind: "trial", Device: s.tb.Device,
			Priority: s.tb.Priority, Parkable: true, Report: s.tb.Report, Observer: s.obs, Metrics: m, Logger: s.log, Continues: continues})
	})
	return s.h
}

func (s *budgetSink) Ask(req jobserver.BudgetRequest, reply jobserver.BudgetReply) error {
	return s.holder().Ask(req, reply)
}

// Parked hears that the worker parked: its budget goes back to the
// broker, and it waits to unpark.
func (s *budgetSink) Parked(p jobserver.BudgetParked) error { return s.holder().Parked(p) }

// Active notes the trial's progress.
func (s *budgetSink) Active() { s.holder().Active() }

// Held hears what the trial's kept worker measured it still holds on the
// device beyond its pool's workspace once the trial ended: Release books
// that while the worker is idle.
func (s *budgetSink) Held(bytes int64) { s.holder().Held(bytes) }

// DeviceClosed hears that the trial's kept worker closed its device once
// the trial ended: Release books nothing for it, and the worker is closed
// when given back (it holds nothing worth keeping).
func (s *budgetSink) DeviceClosed() { s.holder().DeviceClosed() }

// Release gives the run's budget back, or leaves the queue; on a kept
// worker, what the worker still holds stays booked as its own, idle, until
// its next trial continues it or it is closed.
func (s *budgetSink) Release() {
	if s.kept == nil {
		s.holder().Release()
		return
	}
	kw, w := s.kept, s.workers
	w.end(kw, func() *budget.Ticket {
		return s.holder().Keep(kw.name, func(e budget.Eviction) { w.reclaim(kw, e, s.sweepLog) })
	})
}

// familyMetrics counts the broker's decisions in the sweep's metrics.
type familyMetrics struct{ f *sweepFamilies }

func (m familyMetrics) Granted(device string, waited time.Duration) {
	m.f.budgetGranted(device, waited)
}
func (m familyMetrics) Refused(device string) { m.f.budgetRefused(device) }
func (m familyMetrics) Parked(device string)  { m.f.budgetParked(device) }

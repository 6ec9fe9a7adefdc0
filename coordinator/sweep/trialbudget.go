package sweep

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Event kinds of the budget broker, in a trial's events log.
const (
	EventBudgetWait    = "budget_wait"    // the request waits: the device has no room now
	EventBudgetGrant   = "budget_grant"   // the request is granted, after waited_seconds
	EventBudgetRefused = "budget_refused" // the request can never fit; the trial fails
	EventBudgetPark    = "budget_park"    // the broker asks the trial to park, to make room for a request of equal or higher priority
	EventBudgetParked  = "budget_parked"  // the trial parked: its budget is released, it waits to unpark
)

// TrialBudget connects one run to a sweep's broker: its worker asks
// Broker for a budget on Device before it allocates.
type TrialBudget struct {
	Broker *budget.Broker
	Trial  string
	Device string // the slot's device, e.g. "cpu", "cuda:0"
	// Priority is the trial's: see Ask.Priority.
	Priority float64
	// Report, when set, hears that the request waits and, after a wait,
	// that it was granted.
	Report func(BudgetUpdate)
}

// BudgetUpdate is a change of a trial's device-memory request: it waits
// (Waiting, for Bytes), it parked (Parked), or it was granted after
// waiting Waited.
type BudgetUpdate struct {
	Waiting bool
	Parked  bool // the trial parked (Bytes: what it released) and waits to unpark
	// For is, for a trial that parked, the trial it made room for.
	For    string
	Bytes  int64
	Waited time.Duration
}

// budgetSink answers the worker's budget request through the broker and
// records what happened in the run's events. The ticket it books is held
// until release is called (the run ended).
type budgetSink struct {
	tb      *TrialBudget
	obs     trainer.Observer
	metrics *sweepFamilies
	log     *slog.Logger

	mu     sync.Mutex
	ticket *budget.Ticket
	// parkFor is the trial the broker last asked this one to park for.
	parkFor string
}

func (s *budgetSink) event(kind string, fields map[string]any) {
	s.obs.Observe(trainer.Event{Time: time.Now(), Kind: kind, Fields: fields})
}

func (s *budgetSink) Ask(req jobserver.BudgetRequest, reply jobserver.BudgetReply) error {
	tb := s.tb
	need := req.Bill.DeviceBytes()
	granted := func(g budget.Grant) error {
		s.metrics.budgetGranted(tb.Device, g.Waited)
		s.event(EventBudgetGrant, map[string]any{"device": tb.Device, "bytes": g.Bytes, "waited_seconds": g.Waited.Seconds(),
			"capacity": g.Capacity, "granted": g.Granted})
		if tb.Report != nil && g.Waited > 0 {
			tb.Report(BudgetUpdate{Bytes: g.Bytes, Waited: g.Waited})
		}
		if g.Unpark {
			return reply.Unpark()
		}
		return reply.Grant(jobserver.BudgetGrant{Bytes: g.Bytes, WaitedSeconds: g.Waited.Seconds()})
	}
	// A grant made while the request is booked (by another trial's end)
	// is recorded after the wait, in the events and the display alike.
	recorded := make(chan struct{})
	defer close(recorded)
	t, g, now, err := tb.Broker.Ask(budget.Ask{Holder: tb.Trial, Device: tb.Device, Bill: req.Bill, Total: req.Total, Free: req.Free,
		Priority: tb.Priority,
		OnGrant: func(g budget.Grant) {
			<-recorded
			// The worker may have gone meanwhile; its call's end says so.
			_ = granted(g)
		},
		Park: func(e budget.Eviction) {
			s.mu.Lock()
			s.parkFor = e.For
			s.mu.Unlock()
			s.event(EventBudgetPark, map[string]any{"device": tb.Device, "bytes": need, "priority": tb.Priority,
				"for": e.For, "for_priority": e.ForPriority, "idle_seconds": e.Idle.Seconds()})
			s.log.Info("parking the trial to make room for another", "device", tb.Device, "for", e.For, "for_priority", e.ForPriority)
			_ = reply.Park()
		}})
	if err != nil {
		s.metrics.budgetRefused(tb.Device)
		s.event(EventBudgetRefused, map[string]any{"device": tb.Device, "bytes": need, "bill": req.Bill, "reason": err.Error()})
		return reply.Refuse(err.Error())
	}
	s.mu.Lock()
	s.ticket = t
	s.mu.Unlock()
	if now {
		return granted(g)
	}
	books := tb.Broker.Books(tb.Device)
	s.event(EventBudgetWait, map[string]any{"device": tb.Device, "bytes": need, "capacity": books.Capacity, "granted": books.Granted,
		"waiting": books.Waiting})
	s.log.Info("waiting for device memory", "device", tb.Device, "bytes", need, "granted", books.Granted, "capacity", books.Capacity)
	if tb.Report != nil {
		tb.Report(BudgetUpdate{Waiting: true, Bytes: need})
	}
	return nil
}

// Parked hears that the worker parked: its budget goes back to the
// broker, and it waits to unpark.
func (s *budgetSink) Parked(p jobserver.BudgetParked) error {
	s.event(EventBudgetParked, map[string]any{"device": s.tb.Device, "released_bytes": p.ReleasedBytes})
	s.metrics.budgetParked(s.tb.Device)
	if s.tb.Report != nil {
		s.mu.Lock()
		by := s.parkFor
		s.mu.Unlock()
		s.tb.Report(BudgetUpdate{Parked: true, For: by, Bytes: p.ReleasedBytes})
	}
	if t := s.current(); t != nil {
		t.Parked()
	}
	return nil
}

// Active notes the trial's progress.
func (s *budgetSink) Active() {
	if t := s.current(); t != nil {
		t.Active()
	}
}

func (s *budgetSink) current() *budget.Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ticket
}

// Release gives the run's budget back, or leaves the queue.
func (s *budgetSink) Release() {
	s.mu.Lock()
	t := s.ticket
	s.ticket = nil
	s.mu.Unlock()
	if t != nil {
		t.Release()
	}
}

// Package holder connects one worker to the device-memory budget broker
// (package budget): it answers the worker's budget request through the
// broker, records in the worker's events what the broker decided (a wait,
// a grant, a refusal, a park), and gives the budget back when the worker
// ends. A sweep's trials, an evaluation's shards and an rl run's actors and
// learners use it alike; only a trial's worker can park.
package holder

import (
	"log/slog"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Event kinds of the budget broker, in a holder's events log.
const (
	EventWait    = "budget_wait"    // the request waits: the device has no room now
	EventGrant   = "budget_grant"   // the request is granted, after waited_seconds
	EventRefused = "budget_refused" // the request can never fit; the worker fails
	EventPark    = "budget_park"    // the broker asks the holder to park, to make room for a request of equal or higher priority
	EventParked  = "budget_parked"  // the holder parked: its budget is released, it waits to unpark
	// EventKept: the holder ended and its worker is kept for another: what
	// the worker still holds (its context, as the worker measured it, and
	// its graph pool's workspace) stays booked, as an idle kept worker's,
	// until the worker's next request continues it or the worker closes.
	EventKept = "budget_kept"
)

// Metrics counts the broker's decisions (telemetry.BudgetMetrics has these
// methods); nil counts nothing.
type Metrics interface {
	Granted(device string, waited time.Duration)
	Refused(device string)
	Parked(device string)
}

// Config is one holder: who asks, on which device, how its decisions are
// told.
type Config struct {
	Broker *budget.Broker
	// Holder names the holder in the broker's books and messages (a
	// trial's name, "shard 2", "agent 0"), and Kind says what it is
	// ("trial", "evaluation shard", "actor", "learner"; see budget.Ask).
	Holder, Kind string
	Device       string // the slot's device, e.g. "cpu", "cuda:0"
	// Priority is the holder's: see budget.Ask.Priority.
	Priority float64
	// Parkable says the worker can park when asked (a training run): the
	// broker may then choose it to make room. An evaluation shard or an rl
	// half cannot: its budget is kept until it ends.
	Parkable bool
	// Report, when set, hears that the request waits, that the holder
	// parked and, after a wait, that it was granted.
	Report func(Update)
	// Observer receives the events (EventWait, ...); nil records none.
	Observer trainer.Observer
	Metrics  Metrics
	Logger   *slog.Logger
	// Continues, when set, is the idle booking of the kept worker that
	// serves this holder (see budget.Ask.Continues and Sink.Keep).
	Continues *budget.Ticket
}

// Update is a change of a holder's device-memory request: it waits
// (Waiting, for Bytes), it parked (Parked), or it was granted after
// waiting Waited.
type Update struct {
	Waiting bool
	Parked  bool // the holder parked (Bytes: what it released) and waits to unpark
	// For is, for a holder that parked, the holder it made room for.
	For    string
	Bytes  int64
	Waited time.Duration
}

// Reply answers a worker's budget request (jobserver.BudgetReply is one;
// a reply may stand for several workers booked as one holder).
type Reply interface {
	Grant(jobserver.BudgetGrant) error
	Refuse(reason string) error
	Park() error
	Unpark() error
}

// Sink answers the worker's budget request through the broker (its Ask
// and Parked are jobserver.Sink's Budget and Parked). The ticket it books
// is held until Release is called (the worker ended).
type Sink struct {
	cfg Config

	mu     sync.Mutex
	ticket *budget.Ticket
	bill   trainer.Bill // the request's
	// held is what the kept worker measured it holds beyond its pool's
	// workspace once its request ended (Held); nil: nothing measured.
	held *int64
	// closed: the kept worker closed its device once its request ended
	// (DeviceClosed), so it holds nothing there.
	closed bool
	// parkFor is the holder the broker last asked this one to park for.
	parkFor string
}

// New returns the holder's sink; it books nothing before the worker asks.
func New(cfg Config) *Sink {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Sink{cfg: cfg}
}

func (s *Sink) event(kind string, fields map[string]any) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.Observe(trainer.Event{Time: time.Now(), Kind: kind, Fields: fields})
	}
}

// Ask books the worker's request with the broker and answers it: a grant
// now, a refusal, or nothing yet (the grant comes later, from the call
// that makes room).
func (s *Sink) Ask(req jobserver.BudgetRequest, reply Reply) error {
	c := s.cfg
	need := req.Bill.DeviceBytes()
	granted := func(g budget.Grant) error {
		if c.Metrics != nil {
			c.Metrics.Granted(c.Device, g.Waited)
		}
		s.event(EventGrant, map[string]any{"device": c.Device, "bytes": g.Bytes, "waited_seconds": g.Waited.Seconds(),
			"capacity": g.Capacity, "granted": g.Granted, "bill": req.Bill})
		if c.Report != nil && g.Waited > 0 {
			c.Report(Update{Bytes: g.Bytes, Waited: g.Waited})
		}
		if g.Unpark {
			return reply.Unpark()
		}
		return reply.Grant(jobserver.BudgetGrant{Bytes: g.Bytes, WaitedSeconds: g.Waited.Seconds()})
	}
	// A grant made while the request is booked (by another holder's end)
	// is recorded after the wait, in the events and the display alike.
	recorded := make(chan struct{})
	defer close(recorded)
	ask := budget.Ask{Holder: c.Holder, Kind: c.Kind, Device: c.Device, Bill: req.Bill, Total: req.Total, Free: req.Free, Priority: c.Priority,
		Continues: c.Continues,
		OnGrant: func(g budget.Grant) {
			<-recorded
			// The worker may have gone meanwhile; its call's end says so.
			_ = granted(g)
		}}
	if c.Parkable {
		ask.Park = func(e budget.Eviction) {
			s.mu.Lock()
			s.parkFor = e.For
			s.mu.Unlock()
			s.event(EventPark, map[string]any{"device": c.Device, "bytes": need, "priority": c.Priority,
				"for": e.For, "for_priority": e.ForPriority, "idle_seconds": e.Idle.Seconds()})
			c.Logger.Info("parking to make room for another", "device", c.Device, "for", e.For, "for_priority", e.ForPriority)
			_ = reply.Park()
		}
	}
	t, g, now, err := c.Broker.Ask(ask)
	if err != nil {
		if c.Metrics != nil {
			c.Metrics.Refused(c.Device)
		}
		s.event(EventRefused, map[string]any{"device": c.Device, "bytes": need, "bill": req.Bill, "reason": err.Error()})
		return reply.Refuse(err.Error())
	}
	s.mu.Lock()
	s.ticket, s.bill = t, req.Bill
	s.mu.Unlock()
	if now {
		return granted(g)
	}
	books := c.Broker.Books(c.Device)
	s.event(EventWait, map[string]any{"device": c.Device, "bytes": need, "capacity": books.Capacity, "granted": books.Granted,
		"waiting": books.Waiting})
	c.Logger.Info("waiting for device memory", "device", c.Device, "bytes", need, "granted", books.Granted, "capacity", books.Capacity)
	if c.Report != nil {
		c.Report(Update{Waiting: true, Bytes: need})
	}
	return nil
}

// Parked hears that the worker parked: its budget goes back to the
// broker, and it waits to unpark.
func (s *Sink) Parked(p jobserver.BudgetParked) error {
	c := s.cfg
	s.event(EventParked, map[string]any{"device": c.Device, "released_bytes": p.ReleasedBytes})
	if c.Metrics != nil {
		c.Metrics.Parked(c.Device)
	}
	if c.Report != nil {
		s.mu.Lock()
		by := s.parkFor
		s.mu.Unlock()
		c.Report(Update{Parked: true, For: by, Bytes: p.ReleasedBytes})
	}
	if t := s.current(); t != nil {
		t.Parked()
	}
	return nil
}

// Active notes the holder's progress (see budget.Ticket.Active).
func (s *Sink) Active() {
	if t := s.current(); t != nil {
		t.Active()
	}
}

func (s *Sink) current() *budget.Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ticket
}

// Release gives the budget back, or leaves the queue. Releasing twice
// does nothing.
func (s *Sink) Release() {
	s.mu.Lock()
	t := s.ticket
	s.ticket = nil
	s.mu.Unlock()
	if t != nil {
		t.Release()
	}
}

// Held hears what the kept worker measured it holds on the device beyond
// its graph pool's workspace once its request ended (see
// jobserver.Sink.Held): Keep books that as the idle worker's context.
func (s *Sink) Held(bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = &bytes
}

// DeviceClosed hears that the kept worker closed its device once its
// request ended (see jobserver.Sink.DeviceClosed): its process holds
// neither context nor pool there, so Keep books nothing.
func (s *Sink) DeviceClosed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// Keep ends the holder as Release does, but its worker is kept for
// another request: what the worker still holds stays booked on the device
// as name's, an idle kept worker's, and is returned; the broker calls
// reclaim when it needs that room (see budget.Ticket.Keep). What it holds
// is budget.MeasuredIdleBill of the request's bill and the figure the
// worker measured (Held), or, from a worker that measured nothing (an
// older one), budget.IdleBill of the bill. Nil when the holder held no
// budget (it never asked, was refused, or waits), or when the worker
// closed its device (DeviceClosed): its budget is released, and nothing
// stays booked. (budget.MeasuredIdleBill of a figure of 0 would still
// book the pool's workspace, which a closed device no longer holds.)
func (s *Sink) Keep(name string, reclaim func(budget.Eviction)) *budget.Ticket {
	s.mu.Lock()
	t, bill, held, closed := s.ticket, s.bill, s.held, s.closed
	s.ticket = nil
	s.mu.Unlock()
	if t == nil {
		return nil
	}
	if closed {
		t.Release()
		return nil
	}
	idle := budget.IdleBill(bill)
	if held != nil {
		idle = budget.MeasuredIdleBill(bill, *held)
	}
	k := t.Keep(budget.Idle{Holder: name, Bill: idle, Reclaim: reclaim})
	if k != nil {
		s.event(EventKept, map[string]any{"device": s.cfg.Device, "holder": name, "bytes": idle.DeviceBytes(), "bill": idle,
			"measured": held != nil})
	}
	return k
}

package holder

import (
	"strings"
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// reply records a worker's answers.
type reply struct {
	mu  sync.Mutex
	got []string
}

func (r *reply) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
}

func (r *reply) answers() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.got, ";")
}

func (r *reply) Grant(jobserver.BudgetGrant) error { r.add("grant"); return nil }
func (r *reply) Refuse(string) error               { r.add("refuse"); return nil }
func (r *reply) Park() error                       { r.add("park"); return nil }
func (r *reply) Unpark() error                     { r.add("unpark"); return nil }

// events records the kinds of the events observed.
type events struct {
	mu    sync.Mutex
	kinds []string
	last  map[string]map[string]any
}

func (e *events) Observe(m trainer.Measurement) {
	if ev, ok := m.(trainer.Event); ok {
		e.mu.Lock()
		e.kinds = append(e.kinds, ev.Kind)
		if e.last == nil {
			e.last = map[string]map[string]any{}
		}
		e.last[ev.Kind] = ev.Fields
		e.mu.Unlock()
	}
}

func ask(bytes int64) jobserver.BudgetRequest {
	return jobserver.BudgetRequest{Bill: trainer.Bill{Parameters: bytes}, Device: "cpu", Total: 1 << 30, Free: 1 << 30}
}

// TestHoldersParkOnlyWhenParkable: two holders of priority 0 hold a
// device of 1000 bytes, one parkable (a trial), one not (an evaluation
// shard); a request of priority 1 that needs one of them to make room
// parks the trial and never the shard, though the shard is the least
// recently active; each step is an event, the wait and the park are
// reported, and a request that can never fit is refused, naming its kind.
func TestHoldersParkOnlyWhenParkable(t *testing.T) {
	b, err := budget.New(budget.Config{DeviceMemory: 1000})
	if err != nil {
		t.Fatal(err)
	}
	holder := func(name, kind string, prio float64, parkable bool, obs trainer.Observer, report func(Update)) *Sink {
		return New(Config{Broker: b, Holder: name, Kind: kind, Device: "cpu", Priority: prio, Parkable: parkable, Observer: obs, Report: report})
	}
	shardEvents, trialEvents, highEvents := &events{}, &events{}, &events{}
	shardReply, trialReply, highReply := &reply{}, &reply{}, &reply{}
	shard := holder("shard 0", "evaluation shard", 0, false, shardEvents, nil)
	if err := shard.Ask(ask(400), shardReply); err != nil {
		t.Fatal(err)
	}
	trial := holder("a", "trial", 0, true, trialEvents, nil)
	if err := trial.Ask(ask(300), trialReply); err != nil {
		t.Fatal(err)
	}
	var updates []Update
	high := holder("high", "trial", 1, true, highEvents, func(u Update) { updates = append(updates, u) })
	if err := high.Ask(ask(400), highReply); err != nil {
		t.Fatal(err)
	}
	if shardReply.answers() != "grant" || trialReply.answers() != "grant;park" || highReply.answers() != "" {
		t.Fatalf("answers: shard %q, trial %q, high %q; want the trial parked, not the shard", shardReply.answers(), trialReply.answers(), highReply.answers())
	}
	if len(updates) != 1 || !updates[0].Waiting || updates[0].Bytes != 400 {
		t.Fatalf("high's updates %+v: want it told it waits for 400 bytes", updates)
	}
	if err := trial.Parked(jobserver.BudgetParked{ReleasedBytes: 300}); err != nil {
		t.Fatal(err)
	}
	if highReply.answers() != "grant" || strings.Join(highEvents.kinds, ",") != "budget_wait,budget_grant" {
		t.Fatalf("the trial parked: high answered %q, events %v", highReply.answers(), highEvents.kinds)
	}
	if got := strings.Join(trialEvents.kinds, ","); got != "budget_grant,budget_park,budget_parked" {
		t.Errorf("the trial's events %s", got)
	}
	if g := shardEvents.last[EventGrant]; g["bytes"] != int64(400) || g["bill"] == nil {
		t.Errorf("the shard's grant %v: want its bytes and its bill", g)
	}
	high.Release()
	if trialReply.answers() != "grant;park;unpark" {
		t.Errorf("high ended: the trial answered %q, want it told to unpark", trialReply.answers())
	}
	huge := holder("shard 1", "evaluation shard", 0, false, shardEvents, nil)
	hugeReply := &reply{}
	if err := huge.Ask(ask(1000), hugeReply); err != nil {
		t.Fatal(err)
	}
	if hugeReply.answers() != "refuse" || !strings.Contains(shardEvents.last[EventRefused]["reason"].(string), "evaluation shard shard 1 needs") {
		t.Errorf("1000 bytes with headroom on a device of 1000: answered %q, %v", hugeReply.answers(), shardEvents.last[EventRefused])
	}
	shard.Release()
	trial.Release()
	huge.Release()
	if bk := b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 {
		t.Errorf("books after every release: %+v", bk)
	}
}

// TestHolderKeepsAKeptWorkersBooking: a holder whose worker is kept ends
// with Keep: the worker's context and pool workspace stay booked (a
// budget_kept event says how much), the next holder served by that worker
// continues the booking (its bill booked once), and a holder that never
// held a budget keeps nothing.
func TestHolderKeepsAKeptWorkersBooking(t *testing.T) {
	b, err := budget.New(budget.Config{DeviceMemory: 1000})
	if err != nil {
		t.Fatal(err)
	}
	bill := trainer.Bill{Parameters: 300, Gradients: 100, Workspace: 20, Context: 30} // 450; 150 idle
	req := jobserver.BudgetRequest{Bill: bill, Device: "cpu", Free: 1 << 30}
	evs := &events{}
	first := New(Config{Broker: b, Holder: "a", Device: "cpu", Parkable: true, Observer: evs})
	if err := first.Ask(req, &reply{}); err != nil {
		t.Fatal(err)
	}
	idle := first.Keep("kept worker 1", func(budget.Eviction) {})
	if bk := b.Books("cpu"); idle == nil || bk.Granted != 150 || bk.Idle != 1 {
		t.Fatalf("after a kept its worker: %v, books %+v; want 150 bytes booked for the idle worker", idle, bk)
	}
	if k := evs.last[EventKept]; k["bytes"] != int64(150) || k["holder"] != "kept worker 1" {
		t.Fatalf("the budget_kept event %v", k)
	}
	next := New(Config{Broker: b, Holder: "b", Device: "cpu", Parkable: true, Continues: idle})
	r := &reply{}
	if err := next.Ask(req, r); err != nil {
		t.Fatal(err)
	}
	if bk := b.Books("cpu"); r.answers() != "grant" || bk.Granted != 450 || bk.Idle != 0 {
		t.Fatalf("b on the kept worker: answered %q, books %+v; want its 450 bytes booked once", r.answers(), bk)
	}
	next.Release()
	never := New(Config{Broker: b, Holder: "c", Device: "cpu"})
	if k := never.Keep("kept worker 2", nil); k != nil {
		t.Fatalf("a holder that never asked kept %v", k)
	}
	if bk := b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 {
		t.Fatalf("books at the end: %+v", bk)
	}
}

// TestHolderKeepsWhatTheWorkerMeasured: a kept worker that says what it
// still holds beyond its pool's workspace (Held) has that booked as its
// context while idle, larger or smaller than its bill's context; its next
// request, whose bill counts that context, is booked once, adding nothing.
// A worker that said nothing has budget.IdleBill booked.
func TestHolderKeepsWhatTheWorkerMeasured(t *testing.T) {
	for _, c := range []struct {
		name     string
		held     int64 // < 0: not measured
		wantIdle int64
	}{
		{"more than billed (referenced buffers)", 80, 80 + 120},
		{"less than billed", 10, 10 + 120},
		{"not measured", -1, 30 + 120},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, bill, evs, first := keptWorkerGranted(t)
			if c.held >= 0 {
				first.Held(c.held)
			}
			idle := first.Keep("kept worker 1", func(budget.Eviction) {})
			k := evs.last[EventKept]
			if bk := b.Books("cpu"); idle == nil || bk.Granted != c.wantIdle || bk.IdleBytes != c.wantIdle {
				t.Fatalf("books %+v; want %d bytes booked for the idle worker", bk, c.wantIdle)
			}
			if k["bytes"] != c.wantIdle || k["measured"] != (c.held >= 0) {
				t.Fatalf("the budget_kept event %v; want %d bytes, measured %v", k, c.wantIdle, c.held >= 0)
			}
			next := bill
			if c.held >= 0 {
				next.Context = c.held // what the next bill measures
			}
			n := New(Config{Broker: b, Holder: "b", Device: "cpu", Parkable: true, Continues: idle})
			r := &reply{}
			if err := n.Ask(jobserver.BudgetRequest{Bill: next, Device: "cpu", Free: 1 << 30}, r); err != nil {
				t.Fatal(err)
			}
			if bk := b.Books("cpu"); r.answers() != "grant" || bk.Granted != next.DeviceBytes() || bk.Idle != 0 {
				t.Fatalf("b on the kept worker: answered %q, books %+v; want its %d bytes booked once", r.answers(), bk, next.DeviceBytes())
			}
			n.Release()
		})
	}
}

// TestHolderKeepsNothingForAWorkerThatClosedItsDevice: a kept worker that
// closed its device once its request ended (DeviceClosed) holds neither
// context nor pool: Keep releases its budget and books nothing, with no
// budget_kept event, so a request that waits for the room is granted.
func TestHolderKeepsNothingForAWorkerThatClosedItsDevice(t *testing.T) {
	b, _, evs, first := keptWorkerGranted(t)
	// 450 booked; a request of 600 waits for the room.
	waiting := New(Config{Broker: b, Holder: "w", Device: "cpu", Parkable: true})
	r := &reply{}
	if err := waiting.Ask(jobserver.BudgetRequest{Bill: trainer.Bill{Parameters: 600}, Device: "cpu", Free: 1 << 30}, r); err != nil {
		t.Fatal(err)
	}
	if r.answers() != "" {
		t.Fatalf("w answered %q beside a; want it waiting", r.answers())
	}
	first.DeviceClosed()
	if k := first.Keep("kept worker 1", func(budget.Eviction) { t.Error("reclaim called for a booking that should not exist") }); k != nil {
		t.Fatalf("a worker that closed its device kept %v booked; want nothing", k)
	}
	evs.mu.Lock()
	_, kept := evs.last[EventKept]
	evs.mu.Unlock()
	if bk := b.Books("cpu"); kept || bk.Idle != 0 || bk.Granted != 600 || r.answers() != "grant" {
		t.Fatalf("after Keep: budget_kept event %v, books %+v, w answered %q; want nothing kept and w granted", kept, bk, r.answers())
	}
	waiting.Release()
}

// keptWorkerGranted is a broker of 1,000 bytes on the CPU and the granted
// holder "a" of a worker that will be kept: 450 bytes billed, 150 of them
// what an idle worker keeps (context and pool parts); evs records its events.
func keptWorkerGranted(t *testing.T) (*budget.Broker, trainer.Bill, *events, *Sink) {
	t.Helper()
	b, err := budget.New(budget.Config{DeviceMemory: 1000})
	if err != nil {
		t.Fatal(err)
	}
	bill := trainer.Bill{Parameters: 300, Gradients: 100, Workspace: 20, Context: 30}
	evs := &events{}
	first := New(Config{Broker: b, Holder: "a", Device: "cpu", Parkable: true, Observer: evs})
	if err := first.Ask(jobserver.BudgetRequest{Bill: bill, Device: "cpu", Free: 1 << 30}, &reply{}); err != nil {
		t.Fatal(err)
	}
	return b, bill, evs, first
}

package budget

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/trainer"
)

// fakeClock advances only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func billOf(bytes int64) trainer.Bill { return trainer.Bill{Parameters: bytes} }

// TestBrokerGrantsWaitsAndRefuses: a request is granted when the room
// left covers it with 10% headroom, waits otherwise and is granted when a
// budget is released (oldest first, after the time it waited), and one
// larger than the whole device is refused at once, naming the bill.
func TestBrokerGrantsWaitsAndRefuses(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	b, err := New(Config{DeviceMemory: 1000, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var grants []string
	var mu sync.Mutex
	ask := func(trial string, bytes int64) (*Ticket, bool, error) {
		t.Helper()
		tk, g, now, err := b.Ask(Ask{Holder: trial, Device: "cpu", Bill: billOf(bytes), Total: 1 << 40, Free: 1 << 40,
			OnGrant: func(g Grant) {
				mu.Lock()
				grants = append(grants, trial+" after "+g.Waited.String())
				mu.Unlock()
			}})
		if now && g.Bytes != bytes {
			t.Errorf("%s granted %d bytes, asked for %d", trial, g.Bytes, bytes)
		}
		return tk, now, err
	}
	first, now, err := ask("first", 600)
	if err != nil || !now {
		t.Fatalf("600 of 1000 bytes on an empty device: granted %v, %v", now, err)
	}
	second, now, err := ask("second", 600)
	if err != nil || now {
		t.Fatalf("600 more: granted %v, %v; want it to wait", now, err)
	}
	// 200 would fit (1000-600 >= 220), but the second waits before it.
	third, now, err := ask("third", 200)
	if err != nil || now {
		t.Fatalf("200 behind a waiting request: granted %v, %v; want it to wait its turn", now, err)
	}
	if w := b.Waiting("cpu"); strings.Join(w, ",") != "second,third" {
		t.Fatalf("waiting %v, want second,third", w)
	}
	if _, _, err := ask("huge", 910); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "parameters") ||
		!strings.Contains(err.Error(), "huge") || !strings.Contains(err.Error(), "device cpu") {
		t.Fatalf("910 bytes (1001 with headroom) of 1000: %v, want a refusal naming the trial, the bill by kind and the device", err)
	}
	clock.advance(3 * time.Second)
	first.Release()
	if strings.Join(grants, ";") != "second after 3s;third after 3s" {
		t.Fatalf("after the first ended: grants %v, want the second, then the third next to it, in that order", grants)
	}
	fourth, now, err := ask("fourth", 200)
	if err != nil || now {
		t.Fatalf("200 next to 800 of 1000: granted %v, %v; want it to wait", now, err)
	}
	clock.advance(time.Second)
	second.Release()
	if strings.Join(grants, ";") != "second after 3s;third after 3s;fourth after 1s" {
		t.Fatalf("grants %v", grants)
	}
	fourth.Release()
	third.Release()
	third.Release() // twice does nothing
	if bk := b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 || bk.Capacity != 1000 {
		t.Fatalf("books after every release: %+v", bk)
	}
}

// TestBrokerLeavingTheQueue: a waiting request released (its trial was
// interrupted) leaves the queue, and the one behind it moves up.
func TestBrokerLeavingTheQueue(t *testing.T) {
	b, _ := New(Config{DeviceMemory: 1000})
	granted := ""
	hold, _, _, _ := b.Ask(Ask{Holder: "hold", Device: "cpu", Bill: billOf(800), Free: 1 << 40})
	gone, _, now, _ := b.Ask(Ask{Holder: "gone", Device: "cpu", Bill: billOf(500), Free: 1 << 40})
	_, _, _, _ = b.Ask(Ask{Holder: "next", Device: "cpu", Bill: billOf(100), Free: 1 << 40, OnGrant: func(Grant) { granted = "next" }})
	if now {
		t.Fatal("500 granted next to 800 of 1000")
	}
	gone.Release()
	if granted != "next" {
		t.Fatalf("the request behind one that left: granted %q, want next (100 fits next to 800)", granted)
	}
	hold.Release()
}

// TestBrokerCapacity: without a configured limit the device's capacity
// is what a worker found free while no budget was granted; a configured
// limit caps it; each device keeps its own books.
func TestBrokerCapacity(t *testing.T) {
	b, _ := New(Config{})
	a, _, _, _ := b.Ask(Ask{Holder: "a", Device: "cuda:0", Bill: billOf(10), Total: 100, Free: 80})
	_, _, _, _ = b.Ask(Ask{Holder: "b", Device: "cuda:0", Bill: billOf(10), Total: 100, Free: 60})
	if bk := b.Books("cuda:0"); bk.Capacity != 80 || bk.Granted != 20 {
		t.Fatalf("books %+v: want the capacity the first worker found (80), not one counting our own budgets", bk)
	}
	if bk := b.Books("cuda:1"); bk != (Books{}) {
		t.Fatalf("another device's books: %+v", bk)
	}
	a.Release()
	c, _ := New(Config{DeviceMemory: 50})
	_, _, _, _ = c.Ask(Ask{Holder: "a", Device: "cpu", Bill: billOf(10), Total: 1000, Free: 900})
	if bk := c.Books("cpu"); bk.Capacity != 50 {
		t.Fatalf("with --device-memory 50: capacity %d", bk.Capacity)
	}
	if _, err := New(Config{DeviceMemory: -1}); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "device_memory") {
		t.Fatalf("a negative limit: %v", err)
	}
}

// TestBrokerParksForHigherPriority: a request of higher priority that
// does not fit parks the least recently active trial of lower priority;
// once it has parked, the request is granted, and when it ends the parked
// trial is granted again, to unpark. A request of equal priority parks
// nobody before a holder has held its budget the minimum residence time.
func TestBrokerParksForHigherPriority(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	b, _ := New(Config{DeviceMemory: 1000, Now: clock.Now})
	var log []string
	ask := func(trial string, bytes int64, prio float64) *Ticket {
		tk, _, now, err := b.Ask(Ask{Holder: trial, Device: "cpu", Bill: billOf(bytes), Free: 1 << 40, Priority: prio,
			OnGrant: func(g Grant) { log = append(log, fmt.Sprintf("grant %s unpark=%v", trial, g.Unpark)) },
			Park:    func(Eviction) { log = append(log, "park "+trial) }})
		if err != nil {
			t.Fatal(err)
		}
		if now {
			log = append(log, "granted "+trial)
		}
		return tk
	}
	older := ask("older", 300, 0)
	clock.advance(time.Second)
	newer := ask("newer", 300, 0)
	clock.advance(time.Second)
	newer.Active() // newer showed progress last: older is the least recently active
	same := ask("same", 500, 0)
	if strings.Join(log, ";") != "granted older;granted newer" {
		t.Fatalf("log %v: want no park for a request of equal priority within the minimum residence", log)
	}
	same.Release()
	high := ask("high", 500, 1)
	if strings.Join(log, ";") != "granted older;granted newer;park older" {
		t.Fatalf("log %v: want the least recently active lower-priority trial parked", log)
	}
	high.Parked() // not told to park: ignored
	older.Parked()
	if strings.Join(log, ";") != "granted older;granted newer;park older;grant high unpark=false" {
		t.Fatalf("log %v: want the high-priority request granted once the other parked", log)
	}
	if bk := b.Books("cpu"); bk.Granted != 800 || bk.Waiting != 1 {
		t.Fatalf("books %+v: want newer and high holding 800, older waiting to unpark", bk)
	}
	high.Release()
	if log[len(log)-1] != "grant older unpark=true" {
		t.Fatalf("log %v: want the parked trial granted again, to unpark", log)
	}
	older.Release()
	newer.Release()
}

// recencyBroker books requests on one device of 1000 bytes with a minimum
// residence of 10s, logging grants and parks.
type recencyBroker struct {
	t     *testing.T
	b     *Broker
	clock *fakeClock
	log   []string
}

func newRecencyBroker(t *testing.T) *recencyBroker {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	b, err := New(Config{DeviceMemory: 1000, Now: clock.Now, MinResidence: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &recencyBroker{t: t, b: b, clock: clock}
}

func (r *recencyBroker) ask(trial string, bytes int64, prio float64) *Ticket {
	r.t.Helper()
	tk, _, now, err := r.b.Ask(Ask{Holder: trial, Device: "cpu", Bill: billOf(bytes), Free: 1 << 40, Priority: prio,
		OnGrant: func(g Grant) { r.log = append(r.log, fmt.Sprintf("grant %s unpark=%v", trial, g.Unpark)) },
		Park: func(e Eviction) {
			r.log = append(r.log, fmt.Sprintf("park %s for %s idle %s", trial, e.For, e.Idle))
		}})
	if err != nil {
		r.t.Fatal(err)
	}
	if now {
		r.log = append(r.log, "granted "+trial)
	}
	return tk
}

// expect checks the log so far and empties it.
func (r *recencyBroker) expect(step string, want ...string) {
	r.t.Helper()
	if strings.Join(r.log, ";") != strings.Join(want, ";") {
		r.t.Fatalf("%s: log %q, want %q", step, r.log, want)
	}
	r.log = nil
}

// TestBrokerParksByRecency: two requests of equal priority on a device
// that fits one take turns. The holder is parked only once it has held
// its budget the minimum residence and reported progress since its
// grant; the parked one is granted again when the other is parked in
// turn, and is not parked again before it has reported progress.
func TestBrokerParksByRecency(t *testing.T) {
	r := newRecencyBroker(t)
	a := r.ask("a", 600, 0)
	r.clock.advance(time.Second)
	b := r.ask("b", 600, 0)
	r.expect("b asks next to a", "granted a")
	r.clock.advance(5 * time.Second)
	a.Active()
	r.expect("a reports progress 6s after its grant")
	r.clock.advance(5 * time.Second)
	r.expect("11s after a's grant, with no report") // the broker keeps no timer
	a.Active()
	r.expect("a reports progress 11s after its grant", "park a for b idle 0s")
	a.Active() // a parking holder is not chosen twice
	r.expect("a reports again while it parks")
	a.Parked()
	r.expect("a parked", "grant b unpark=false")
	if bk := r.b.Books("cpu"); bk.Granted != 600 || bk.Waiting != 1 {
		t.Fatalf("books %+v: want b holding 600, a waiting to unpark", bk)
	}
	r.clock.advance(20 * time.Second)
	b.Active()
	r.expect("b reports progress 20s after its grant", "park b for a idle 0s")
	b.Parked()
	r.expect("b parked", "grant a unpark=true")
	// a unparked and has shown no progress: a new request parks nobody,
	// however long a has held its budget.
	r.clock.advance(time.Minute)
	c := r.ask("c", 100, 0)
	r.expect("c asks while a has made no progress since it unparked")
	a.Active()
	r.expect("a reports progress after unparking", "park a for b idle 0s")
	a.Parked()
	r.expect("a parked again: b unparks, and c, behind it, fits beside it", "grant b unpark=true", "grant c unpark=false")
	b.Release()
	r.expect("b ended", "grant a unpark=true")
	a.Release()
	c.Release()
	if bk := r.b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 {
		t.Fatalf("books after every release: %+v", bk)
	}
}

// TestBrokerParksTheLeastRecentlyActive: of the holders it may park, the
// broker parks one of the lowest priority, then the least recently
// active; a holder of higher priority than the request is never parked,
// and nobody is parked when parking every candidate could not make room.
func TestBrokerParksTheLeastRecentlyActive(t *testing.T) {
	r := newRecencyBroker(t)
	x := r.ask("x", 300, 0)
	y := r.ask("y", 300, 0)
	r.clock.advance(11 * time.Second)
	y.Active()
	r.clock.advance(time.Second)
	x.Active() // y is now the least recently active
	r.clock.advance(3 * time.Second)
	z := r.ask("z", 500, 0)
	r.expect("z asks", "granted x", "granted y", "park y for z idle 4s")
	// y now waits to unpark, and x, past its residence and idle for
	// longest of the holders that may park (z has made no progress), is
	// parked for it.
	y.Parked()
	r.expect("y parked", "grant z unpark=false", "park x for y idle 3s")
	x.Parked()
	r.expect("x parked", "grant y unpark=true")
	z.Release()
	r.expect("z ended", "grant x unpark=true")
	x.Release()
	y.Release()

	// Lower priority before recency: low showed progress last, yet it is
	// parked rather than eq, of the request's priority.
	r = newRecencyBroker(t)
	eq := r.ask("eq", 300, 1)
	low := r.ask("low", 300, 0)
	r.clock.advance(11 * time.Second)
	eq.Active()
	r.clock.advance(time.Second)
	low.Active()
	head := r.ask("head", 500, 1)
	r.expect("head asks", "granted eq", "granted low", "park low for head idle 0s")
	low.Parked()
	r.expect("low parked", "grant head unpark=false")
	// low unparks when head ends, and, once eq has ended too, a request
	// of higher priority does not park it again before it has made
	// progress.
	head.Release()
	r.expect("head ended", "grant low unpark=true")
	eq.Release()
	high := r.ask("high", 800, 2)
	r.expect("high asks while low has made no progress since it unparked")
	low.Active()
	r.expect("low reports progress", "park low for high idle 0s")
	low.Parked()
	r.expect("low parked again", "grant high unpark=false")
	high.Release()
	r.expect("high ended", "grant low unpark=true")
	low.Release()

	// A holder of higher priority is never parked: top (1) and bottom (0)
	// hold 600; a request of priority 0 for 800 could be made room for
	// only by parking top too, so nobody is parked.
	r = newRecencyBroker(t)
	top := r.ask("top", 300, 1)
	bottom := r.ask("bottom", 300, 0)
	r.clock.advance(time.Minute)
	top.Active()
	bottom.Active()
	big := r.ask("big", 800, 0)
	r.expect("big (priority 0) asks", "granted top", "granted bottom")
	top.Release()
	r.expect("top ended: parking bottom now makes room", "park bottom for big idle 0s")
	bottom.Parked()
	r.expect("bottom parked", "grant big unpark=false")
	big.Release()
	r.expect("big ended", "grant bottom unpark=true")
	bottom.Release()
}

// TestBrokerMinResidenceConfig: the default minimum residence, and a
// negative one refused, naming the setting.
func TestBrokerMinResidenceConfig(t *testing.T) {
	b, _ := New(Config{})
	if b.cfg.MinResidence != DefaultMinResidence {
		t.Fatalf("min residence %s, want the default %s", b.cfg.MinResidence, DefaultMinResidence)
	}
	if _, err := New(Config{MinResidence: -time.Second}); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "min_residence") {
		t.Fatalf("a negative minimum residence: %v", err)
	}
}

// TestBrokerNeverParksAnUnparkableHolder: a holder that cannot park (an
// evaluation shard, an rl half: no Park) is never chosen to make room,
// even when it is the least recently active and of lower priority, but its
// budget counts against the device until it is released; a parkable
// holder beside it is parked instead, and a request that only parking the
// unparkable one could make room for waits for its release.
func TestBrokerNeverParksAnUnparkableHolder(t *testing.T) {
	r := newRecencyBroker(t)
	shard, _, now, err := r.b.Ask(Ask{Holder: "shard 0", Kind: "evaluation shard", Device: "cpu", Bill: billOf(400), Free: 1 << 40, Priority: -1,
		OnGrant: func(g Grant) { r.log = append(r.log, "grant shard 0") }})
	if err != nil || !now {
		t.Fatalf("the shard on an empty device: granted %v, %v", now, err)
	}
	r.clock.advance(time.Second)
	trial := r.ask("trial", 300, 0)
	r.expect("a trial beside the shard", "granted trial")
	if bk := r.b.Books("cpu"); bk.Granted != 700 || bk.Holders != 2 || bk.Unparkable != 1 {
		t.Fatalf("books %+v: want the shard's 400 and the trial's 300 granted, one holder unparkable", bk)
	}
	r.clock.advance(time.Minute)
	trial.Active()
	// 400 for high needs 440: parking the trial (300) frees 600 of 1000.
	high := r.ask("high", 400, 1)
	r.expect("high asks", "park trial for high idle 0s")
	trial.Parked()
	r.expect("the trial parked", "grant high unpark=false")
	// 700 more needs 770: parking high frees 600 of 1000; only with the
	// shard's budget, never parked, would there be room, so nobody is
	// parked and the request waits until the shard ends.
	r.clock.advance(time.Minute)
	high.Active()
	top := r.ask("top", 700, 2)
	r.expect("top asks while only with the unparkable shard's budget would it fit")
	shard.Release()
	r.expect("the shard ended: parking high now makes room", "park high for top idle 0s")
	high.Parked()
	r.expect("high parked", "grant top unpark=false")
	top.Release()
	high.Release()
	trial.Release()
	if bk := r.b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 {
		t.Fatalf("books after every release: %+v", bk)
	}
}

// TestBrokerCapacityCountsTheAskersContext: the first worker on a device
// found its free memory with its own context already made; the capacity
// adds the context back, since the worker's bill counts it.
func TestBrokerCapacityCountsTheAskersContext(t *testing.T) {
	b, _ := New(Config{})
	bill := trainer.Bill{Parameters: 10, Context: 30}
	a, g, now, err := b.Ask(Ask{Holder: "a", Device: "cuda:0", Bill: bill, Total: 100, Free: 70})
	if err != nil || !now || g.Bytes != 40 {
		t.Fatalf("a bill of 10 bytes and a 30-byte context: granted %v %+v, %v; want 40 bytes", now, g, err)
	}
	if bk := b.Books("cuda:0"); bk.Capacity != 100 || bk.Granted != 40 {
		t.Fatalf("books %+v: want the capacity 70 free + 30 of the asker's context", bk)
	}
	a.Release()
	_, _, _, err = b.Ask(Ask{Holder: "s", Kind: "evaluation shard", Device: "cuda:0", Bill: trainer.Bill{Parameters: 70, Context: 30}, Total: 100, Free: 70})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "evaluation shard s needs") || !strings.Contains(err.Error(), "context") {
		t.Fatalf("100 bytes with headroom on a device of 100: %v; want a refusal naming the shard and the context", err)
	}
}

// TestBrokerBooksAParkedWorkersContext: parking frees a worker's model and
// workspace, not its process: its context and its streams' scratch stay
// on the device, so the broker keeps them booked while it waits to
// unpark, parks nobody when that leaves too little room, and gives them
// back when the parked worker ends.
func TestBrokerBooksAParkedWorkersContext(t *testing.T) {
	bill := trainer.Bill{Parameters: 100, Context: 40, StreamScratch: 10} // 150 bytes, 165 with headroom; 50 stay when parked
	ask := func(b *Broker, log *[]string, trial string, prio float64) *Ticket {
		t.Helper()
		tk, _, now, err := b.Ask(Ask{Holder: trial, Device: "gpu", Bill: bill, Free: 1 << 40, Priority: prio,
			OnGrant: func(g Grant) { *log = append(*log, "grant "+trial) },
			Park:    func(Eviction) { *log = append(*log, "park "+trial) }})
		if err != nil {
			t.Fatal(err)
		}
		if now {
			*log = append(*log, "granted "+trial)
		}
		return tk
	}

	// 200 bytes: parked, low would still hold 50, leaving 150 for high's
	// 165: parking it could not make room, so nobody is parked. (Counting
	// the whole bill as freed, the broker parked it and granted high 150
	// bytes that the device did not have.)
	var log []string
	small, _ := New(Config{DeviceMemory: 200})
	low := ask(small, &log, "low", 0)
	high := ask(small, &log, "high", 1)
	if strings.Join(log, ";") != "granted low" {
		t.Fatalf("200 bytes: log %v; want high to wait without parking low, whose context would stay", log)
	}
	low.Release()
	if strings.Join(log, ";") != "granted low;grant high" {
		t.Fatalf("200 bytes: log %v; want high granted once low ended", log)
	}
	high.Release()

	log = nil
	b, _ := New(Config{DeviceMemory: 260})
	// 260 bytes: parked, low holds 50, leaving 210 for high's 165.
	low = ask(b, &log, "low", 0)
	high = ask(b, &log, "high", 1)
	low.Parked()
	if strings.Join(log, ";") != "granted low;park low;grant high" {
		t.Fatalf("260 bytes: log %v; want low parked for high", log)
	}
	if bk := b.Books("gpu"); bk.Granted != 200 || bk.Holders != 1 || bk.Waiting != 1 {
		t.Fatalf("books %+v: want high's 150 and low's 50 (context and scratch, parked) booked", bk)
	}
	again := ask(b, &log, "again", 0)
	if bk := b.Books("gpu"); bk.Granted != 200 || bk.Waiting != 2 || len(log) != 3 {
		t.Fatalf("books %+v, log %v: want a third worker to wait (60 left, 165 wanted)", bk, log)
	}
	again.Release()
	high.Release()
	if bk := b.Books("gpu"); bk.Granted != 150 || log[len(log)-1] != "grant low" {
		t.Fatalf("books %+v, log %v: want low unparked, its bill booked once (150)", bk, log)
	}
	// A parked worker that ends gives its context back.
	low.Active() // progress since it unparked: it may be parked again
	other := ask(b, &log, "other", 1)
	low.Parked()
	if bk := b.Books("gpu"); bk.Granted != 200 || strings.Join(log[len(log)-2:], ";") != "park low;grant other" {
		t.Fatalf("books %+v, log %v: want low parked again for other", bk, log)
	}
	low.Release()
	if bk := b.Books("gpu"); bk.Granted != 150 || bk.Waiting != 0 {
		t.Fatalf("books %+v: want low's context given back when it ended parked", bk)
	}
	other.Release()
	if bk := b.Books("gpu"); bk.Granted != 0 {
		t.Fatalf("books %+v: want nothing booked", bk)
	}
}

// keep ends tk's request as a kept worker's, booked as holder while idle,
// logging its reclaims.
func (r *recencyBroker) keep(tk *Ticket, holder string, bill trainer.Bill) *Ticket {
	return tk.Keep(Idle{Holder: holder, Bill: IdleBill(bill), Reclaim: func(e Eviction) {
		r.log = append(r.log, fmt.Sprintf("reclaim %s for %s", holder, e.For))
	}})
}

// TestBrokerBooksAnIdleKeptWorker: a kept worker's request that ends
// leaves its context and graph pool's workspace booked, as an idle kept
// worker's booking, visible in the books; the worker's next request
// continues it (its bill booked once, not on top of it), and the booking
// is given back when the worker closes.
func TestBrokerBooksAnIdleKeptWorker(t *testing.T) {
	r := newRecencyBroker(t)
	// 500 bytes at work; 200 (context, gradients, activations, workspace) idle.
	bill := trainer.Bill{Parameters: 200, OptimizerState: 100, Gradients: 100, Activations: 50, Workspace: 30, Context: 20}
	a, _, _, err := r.b.Ask(Ask{Holder: "a", Device: "cpu", Bill: bill, Free: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	idle := r.keep(a, "kept worker 1", bill)
	if bk := r.b.Books("cpu"); bk.Granted != 200 || bk.Holders != 1 || bk.Idle != 1 || bk.IdleBytes != 200 || bk.Unparkable != 0 {
		t.Fatalf("books between a and the next trial: %+v; want the idle worker's 200 bytes booked", bk)
	}
	a.Release() // the ended request holds nothing more
	if bk := r.b.Books("cpu"); bk.Granted != 200 {
		t.Fatalf("books after a's release: %+v", bk)
	}
	next, g, now, err := r.b.Ask(Ask{Holder: "b", Device: "cpu", Bill: bill, Free: 1 << 40, Continues: idle})
	if err != nil || !now || g.Bytes != 500 || g.Granted != 500 {
		t.Fatalf("b on the kept worker: granted %v %+v, %v; want its 500 bytes, booked once (500 in all)", now, g, err)
	}
	if bk := r.b.Books("cpu"); bk.Granted != 500 || bk.Holders != 1 || bk.Idle != 0 {
		t.Fatalf("books while b runs on the kept worker: %+v", bk)
	}
	idle.Release() // continued: releasing it gives back nothing twice
	if bk := r.b.Books("cpu"); bk.Granted != 500 {
		t.Fatalf("books after releasing a continued booking: %+v; want b's 500", bk)
	}
	idle = r.keep(next, "kept worker 1", bill)
	// A request continuing a booking released meanwhile is booked whole.
	idle.Release()
	if bk := r.b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Idle != 0 {
		t.Fatalf("books once the kept worker closed: %+v; want nothing booked", bk)
	}
	c, g, _, _ := r.b.Ask(Ask{Holder: "c", Device: "cpu", Bill: bill, Free: 1 << 40, Continues: idle})
	if g.Granted != 500 {
		t.Fatalf("c continuing a released booking: %+v; want its whole bill booked", g)
	}
	// A request that holds no budget keeps nothing booked.
	c.Release()
	if k := c.Keep(Idle{Holder: "kept worker 1", Bill: IdleBill(bill)}); k != nil {
		t.Fatalf("keeping a released request booked %+v; want nothing", k)
	}
	if bk := r.b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 {
		t.Fatalf("books at the end: %+v", bk)
	}
	r.expect("no request waited")
}

// TestBrokerReclaimsAnIdleKeptWorkerFirst: a request that does not fit is
// given room by reclaiming an idle kept worker's booking before any
// running holder is parked, even one of lower priority that may be parked;
// one eviction at a time, so the holder is parked only when the reclaimed
// room is not enough; and nothing is evicted when even every candidate
// together could not make room.
func TestBrokerReclaimsAnIdleKeptWorkerFirst(t *testing.T) {
	r := newRecencyBroker(t)
	pool := trainer.Bill{Gradients: 300} // all of it kept while idle
	k := r.ask("k", 300, 0)
	x := r.ask("x", 300, -1) // lower priority: parkable at once for anyone
	r.expect("k and x ask", "granted k", "granted x")
	idle := r.keep(k, "kept worker 1", pool)
	r.clock.advance(time.Minute)
	x.Active()
	// 500 (550 with headroom) of 400 left: closing the idle worker frees 300.
	y := r.ask("y", 500, 0)
	r.expect("y asks", "reclaim kept worker 1 for y")
	if bk := r.b.Books("cpu"); bk.Idle != 1 || bk.Granted != 600 || bk.Waiting != 1 {
		t.Fatalf("books while the idle worker closes: %+v", bk)
	}
	x.Active() // one eviction at a time
	r.expect("x reports progress while the idle worker closes")
	idle.Release()
	r.expect("the idle worker closed", "grant y unpark=false")

	// 700 wanted, 100 left: the idle booking (300) is not enough alone, but
	// with x parked (300) it is: the idle worker goes first, then x.
	idle = r.keep(y, "kept worker 2", trainer.Bill{Gradients: 200, Parameters: 300})
	r.expect("y kept")
	z := r.ask("z", 700, 0)
	if bk := r.b.Books("cpu"); bk.Granted != 500 {
		t.Fatalf("books %+v: want x's 300 and the idle worker's 200", bk)
	}
	r.expect("z asks (770 of 500 left)", "reclaim kept worker 2 for z")
	idle.Release()
	r.expect("the idle worker closed: 700 left, still short", "park x for z idle 0s")
	x.Parked()
	r.expect("x parked", "grant z unpark=false")

	// z ends, kept: x unparks beside its idle worker. 715 wanted, 400
	// left: only the idle worker's 300 could be freed (x has made no
	// progress since it unparked), so nothing is evicted.
	idle = r.keep(z, "kept worker 3", pool)
	r.expect("z kept", "grant x unpark=true")
	big := r.ask("big", 650, 0)
	r.expect("big asks")
	big.Release()
	idle.Release()
	x.Release()
	if bk := r.b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 {
		t.Fatalf("books after every release: %+v", bk)
	}
}

// TestBrokerServesAContinuedBookingFirst: a kept worker taken for its next
// request while another request waits for room (which reclaiming that
// worker's idle booking would have made) does not wait behind it: its
// request, continuing the booking, is granted when it fits, and otherwise
// waits first in the queue; the other gets the room once the worker's
// booking is given back.
func TestBrokerServesAContinuedBookingFirst(t *testing.T) {
	r := newRecencyBroker(t)
	pool := trainer.Bill{Parameters: 200, Gradients: 300} // 500 at work, 300 idle
	h, _, _, _ := r.b.Ask(Ask{Holder: "shard", Kind: "evaluation shard", Device: "cpu", Bill: billOf(200), Free: 1 << 40})
	a, _, _, _ := r.b.Ask(Ask{Holder: "a", Device: "cpu", Bill: pool, Free: 1 << 40})
	idle := r.keep(a, "kept worker 1", pool)
	z := r.ask("z", 600, 0)
	r.expect("z asks (660 of 500 left)", "reclaim kept worker 1 for z")
	// The worker was taken for b before it could close: b continues its
	// booking and, fitting, is granted though z waits.
	b, g, now, err := r.b.Ask(Ask{Holder: "b", Device: "cpu", Bill: pool, Free: 1 << 40, Continues: idle})
	if err != nil || !now || g.Granted != 700 {
		t.Fatalf("b on the kept worker while z waits: granted %v %+v, %v; want its 500 bytes booked once, beside the shard's 200", now, g, err)
	}
	idle = r.keep(b, "kept worker 1", pool)
	r.expect("b ended: its booking is reclaimed for z", "reclaim kept worker 1 for z")
	// Taken again, for c, which needs 660 more than its worker's 300 with
	// 500 left: it waits, first.
	c, _, now, _ := r.b.Ask(Ask{Holder: "c", Device: "cpu", Bill: trainer.Bill{Parameters: 600, Gradients: 300}, Free: 1 << 40, Continues: idle,
		OnGrant: func(Grant) { r.log = append(r.log, "grant c") }})
	if w := r.b.Waiting("cpu"); now || strings.Join(w, ",") != "c,z" {
		t.Fatalf("c granted %v, waiting %v; want c to wait first", now, w)
	}
	idle.Release() // continued: gives back nothing
	h.Release()
	r.expect("the shard ended", "grant c")
	c.Release()
	r.expect("c ended", "grant z unpark=false")
	z.Release()
	if bk := r.b.Books("cpu"); bk.Granted != 0 || bk.Holders != 0 || bk.Waiting != 0 {
		t.Fatalf("books after every release: %+v", bk)
	}
}

// A worker parked to make room for a request's headroom does not unpark
// into that headroom while the request holds its grant: the books hold the
// request's bill only, so without the rule the park was undone at once
// (seen on an H100, where long-a parked for big and was granted again in
// the same millisecond).
func TestBrokerParkedWorkerLeavesItsRequestsHeadroom(t *testing.T) {
	h := newHeadroomBroker(t, 255)
	short := h.ask("short", 10, 0)  // 60
	longA := h.ask("long-a", 20, 0) // 70
	h.ask("long-b", 20, 0)          // 70: 200 of 255 booked
	short.Release()
	big := h.ask("big", 60, 1) // 110, 121 with headroom: 115 free
	if got := strings.Join(h.log, ";"); got != "granted short;granted long-a;granted long-b;park long-a for big" {
		t.Fatalf("log %s; want long-a parked for big", got)
	}
	longA.Parked() // frees its 20: 135 free, big granted, 25 left
	if got := strings.Join(h.log[4:], ";"); got != "grant big" {
		t.Fatalf("after the park: %s; want big granted and long-a to stay parked (it wants 22 of the 25 left, which big's 11 of headroom leave 14 of)", got)
	}
	if bk := h.b.Books("gpu"); bk.Granted != 230 || bk.Waiting != 1 {
		t.Fatalf("books %+v: want big's 110, long-b's 70 and long-a's 50 (parked) booked, long-a waiting", bk)
	}
	big.Release()
	if got := strings.Join(h.log[4:], ";"); got != "grant big;grant long-a" {
		t.Fatalf("after big ended: %s; want long-a unparked", got)
	}
}

// headroomBroker asks on a device of capacity bytes, each bill its
// parameters plus a context of 40 and 10 of scratch, logging grants and
// parks (with whom each park is for).
type headroomBroker struct {
	t     *testing.T
	b     *Broker
	clock *fakeClock
	log   []string
}

func newHeadroomBroker(t *testing.T, capacity int64) *headroomBroker {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	b, err := New(Config{DeviceMemory: capacity, Now: clock.Now, MinResidence: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &headroomBroker{t: t, b: b, clock: clock}
}

func (h *headroomBroker) ask(holder string, params int64, prio float64) *Ticket {
	h.t.Helper()
	bill := trainer.Bill{Parameters: params, Context: 40, StreamScratch: 10}
	tk, _, now, err := h.b.Ask(Ask{Holder: holder, Device: "gpu", Bill: bill, Free: 1 << 40, Priority: prio,
		OnGrant: func(Grant) { h.log = append(h.log, "grant "+holder) },
		Park:    func(e Eviction) { h.log = append(h.log, "park "+holder+" for "+e.For) }})
	if err != nil {
		h.t.Fatal(err)
	}
	if now {
		h.log = append(h.log, "granted "+holder)
	}
	return tk
}

// Two trials of equal priority still take turns where the capacity holds
// one with its headroom and the other's context: a is parked for b, and
// after b's residence b is parked for a, since parking b also frees the
// headroom a would otherwise leave b.
func TestBrokerEqualPrioritiesTakeTurnsBesideTheHeadroomRule(t *testing.T) {
	h := newHeadroomBroker(t, 162)
	a := h.ask("a", 50, 0) // 100, 110 with headroom
	b := h.ask("b", 50, 0) // waits: 62 free
	h.clock.advance(11 * time.Second)
	a.Active()
	a.Parked() // 112 free: b granted, 12 left
	h.clock.advance(11 * time.Second)
	b.Active() // parking b frees 50 and b's 10 of headroom: a wants 55 of 62
	b.Parked()
	if got := strings.Join(h.log, ";"); got != "granted a;park a for b;grant b;park b for a;grant a" {
		t.Fatalf("log %s; want a and b to take turns", got)
	}
}

// A worker parked for a request owes it nothing once that request has
// parked: granted again later, the request gets no headroom kept from it.
func TestBrokerParkedWorkerOwesNothingToARequestThatParked(t *testing.T) {
	h := newHeadroomBroker(t, 1040)
	p := h.ask("p", 350, 0) // 400
	f := h.ask("f", 550, 1) // 600, 660 with headroom: p is parked for it
	p.Parked()              // f granted; p wants 385 and f's 60 of 390 free
	hi := h.ask("hi", 450, 2)
	f.Parked() // f parked for hi: hi granted
	hi.Release()
	// f is granted again (390 free after), and p, which f no longer holds
	// anything for, with it.
	if got := strings.Join(h.log, ";"); got != "granted p;park p for f;grant f;park f for hi;grant hi;grant f;grant p" {
		t.Fatalf("log %s; want p granted once f was granted again", got)
	}
	if w := h.b.Waiting("gpu"); len(w) != 0 {
		t.Fatalf("waiting %v; want nobody", w)
	}
}

// Package budget is the device-memory budget broker: workers on the
// same device ask it for a budget, by their bill, before they allocate;
// it grants, queues by priority, reclaims an idle kept worker's booking or
// else parks the least recently active holder of equal or lower priority
// to make room, and refuses a bill that can never fit. It knows devices, bills and holders, no activity: a sweep's
// trials, an evaluation's shards and an rl run's actors and learners all
// ask it alike (package holder connects a worker's request to it).
package budget

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Headroom is the factor a budget request must fit with: a request is
// granted when the device's capacity less the budgets already granted
// covers it times Headroom, so an estimate a little short of what the
// driver will hand out does not end in an out-of-memory error mid-capture.
const Headroom = 1.1

// Config configures a Broker.
type Config struct {
	// DeviceMemory caps the bytes budgets may take on each device; 0 takes
	// what the first worker on the device reports free. On the CPU device
	// it stands in for a GPU's memory.
	DeviceMemory int64
	// Now is the clock, for tests; nil is time.Now.
	Now func() time.Time
	// Changed, when set, hears that device's books changed (see
	// Broker.Books), after the change and outside the broker's lock.
	Changed func(device string)
	// MinResidence is the least time a holder keeps its budget before it
	// may be parked for a request of its own priority; 0 is
	// DefaultMinResidence. A holder of lower priority than the request is
	// parked without waiting for it.
	MinResidence time.Duration
}

// DefaultMinResidence is Config.MinResidence when none is given: parking
// costs a worker a set-up and a capture again, so a holder trains at least
// this long between two parks for requests of its own priority.
const DefaultMinResidence = 10 * time.Second

// Validate checks the configuration, naming the setting at fault.
func (c Config) Validate() error {
	if c.DeviceMemory < 0 {
		return refusal.Config(field.Errorf("device_memory", "cannot be negative (%d); give a size such as 8GiB, or 0 for what the device reports", c.DeviceMemory))
	}
	if c.MinResidence < 0 {
		return refusal.Config(field.Errorf("min_residence", "cannot be negative (%s); give a duration such as 10s, or 0 for the default", c.MinResidence))
	}
	return nil
}

// Broker keeps the books of device memory between the workers of a sweep:
// per device, its capacity and the budgets granted. A worker asks before
// it allocates (Ask); the request is granted at once when it fits with
// headroom, refused at once when it could never fit, and otherwise waits
// in a queue, oldest first, until budgets are released, an idle kept
// worker's booking is reclaimed or a holder parks to make room (see
// ledger.victim for whom it evicts). It starts no
// goroutine and keeps no timer: grants after a wait are made by the
// Release or Parked that frees room, through the waiting ticket's OnGrant,
// and a holder is chosen to park when a request is booked, when room is
// freed and when a holder reports progress (Ticket.Active).
type Broker struct {
	cfg Config

	mu      sync.Mutex
	devices map[string]*ledger
	asked   uint64 // requests booked, numbering tickets
}

// ledger is one device's books.
type ledger struct {
	device   string
	capacity int64 // bytes budgets may take
	granted  int64 // bytes granted now
	holders  map[*Ticket]struct{}
	queue    []*Ticket // oldest first
}

// New returns a broker with empty books.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MinResidence == 0 {
		cfg.MinResidence = DefaultMinResidence
	}
	return &Broker{cfg: cfg, devices: map[string]*ledger{}}, nil
}

// Ask is one worker's budget request.
type Ask struct {
	// Holder names who will hold the budget (a sweep's trial, an
	// evaluation's shard, an rl agent's learner).
	Holder string
	// Kind is what the holder is, for messages: "trial" (the default),
	// "evaluation shard", "actor", "learner".
	Kind   string
	Device string       // the device the worker owns, as the sweep names it ("cpu", "cuda:0")
	Bill   trainer.Bill // what it will hold; DeviceBytes is the request
	// Total and Free are the device's memory as the worker found it
	// before allocating.
	Total, Free int64
	// OnGrant is called when a request that waited is granted, and when a
	// parked request is granted again (Grant.Unpark), from the goroutine
	// whose call made room, outside the broker's lock. It is not called
	// for a request granted at once.
	OnGrant func(Grant)
	// Priority orders the requests: a waiting request of higher priority
	// is granted first and, when it does not fit, the broker parks a
	// holder of equal or lower priority to make room (see Broker).
	Priority float64
	// Park, when set, asks the trial's worker to park, saying for whom;
	// the worker's answer comes to Ticket.Parked. Called outside the
	// broker's lock. A request without it cannot be parked (an
	// evaluation shard, an rl actor or learner): the broker never chooses
	// it to make room, but its budget counts against the device like any
	// other until it is released.
	Park func(Eviction)
	// Continues, when set, is the idle booking (Ticket.Keep) of the kept
	// worker that makes this request: what that worker still holds counts
	// toward the request, booked once, and the request goes before every
	// waiting one (granted when it fits, else first in the queue). The
	// booking ends here, granted or not; one already released is ignored.
	Continues *Ticket
}

// KindKeptWorker is the Kind of an idle kept worker's booking, in the
// books and messages.
const KindKeptWorker = "idle kept worker"

// Idle is what a kept worker keeps booked between two requests (see
// Ticket.Keep).
type Idle struct {
	// Holder names the kept worker in the books and messages.
	Holder string
	// Bill is what it still holds on the device: MeasuredIdleBill of its
	// last request's bill and what the worker measured, or IdleBill of
	// that bill when the worker measured nothing.
	Bill trainer.Bill
	// Reclaim asks for the worker to be closed, to make room (for whom is
	// in the Eviction); the booking's Release must follow once the worker
	// has gone. Called outside the broker's lock, possibly before Keep
	// returns.
	Reclaim func(Eviction)
}

// IdleBill is what a kept worker whose last request had bill still holds
// on its device while it waits for the next: its context (with what its
// pooled graphs reference, which a kept worker's bill counts there) and
// its graph pool's workspace. The model, the optimizer's state, the
// staging inputs and the streams' scratch were freed with the run.
func IdleBill(bill trainer.Bill) trainer.Bill {
	return trainer.Bill{Context: bill.Context, Gradients: bill.Gradients, Activations: bill.Activations, Workspace: bill.Workspace}
}

// MeasuredIdleBill is IdleBill of bill with the context the kept worker
// measured once its request ended (held: what its process holds on the
// device beyond its graph pool's workspace, which on a GPU includes the
// ended request's freed buffers that the pooled executables still
// reference, a part bill.Context cannot know of). That measurement is the
// one the worker's next bill takes for its Context, so the idle booking
// is what that bill will count again. It replaces bill.Context whether
// larger or smaller: the measurement is the truth, and a smaller one (an
// update that released an earlier request's referenced buffers) frees
// the difference for other requests, which the next request asks back
// if its own bill needs it.
func MeasuredIdleBill(bill trainer.Bill, held int64) trainer.Bill {
	idle := IdleBill(bill)
	idle.Context = held
	return idle
}

// Eviction says why a holder is asked to park: for which waiting request,
// and how long the holder had been idle (since its last grant or progress
// report) when it was chosen.
type Eviction struct {
	For         string  // the waiting request's holder
	ForPriority float64 // its priority
	Idle        time.Duration
}

// Grant is a budget granted.
type Grant struct {
	Bytes    int64         // the budget: the bill's device bytes
	Waited   time.Duration // time in the queue
	Capacity int64         // the device's capacity for budgets
	Granted  int64         // budgets granted on the device, this one included
	Unpark   bool          // the trial was parked: it may unpark now
}

// ErrRefused is a request that can never be granted: with headroom
// it is larger than the whole device.
var ErrRefused = errors.New("device-memory budget refused")

// RefusedError is a refused request; its message names the bill by kind.
type RefusedError struct {
	Kind     string // what the holder is (Ask.Kind); "" is a trial
	Holder   string
	Device   string
	Bill     trainer.Bill
	Capacity int64
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s %s needs %s (with %.0f%% headroom %s), more than device %s has for budgets in all (%s); use a smaller model or batch, or a device with more memory (--device-memory on the CPU)",
		kindOf(e.Kind), e.Holder, e.Bill, (Headroom-1)*100, trainer.FormatBytes(withHeadroom(e.Bill.DeviceBytes())), e.Device, trainer.FormatBytes(e.Capacity))
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

func kindOf(kind string) string {
	if kind == "" {
		return "trial"
	}
	return kind
}

func withHeadroom(bytes int64) int64 { return int64(float64(bytes) * Headroom) }

// Ticket is one request's place in the books: waiting, granted, or
// released.
type Ticket struct {
	b      *Broker
	ask    Ask
	led    *ledger
	seq    uint64 // the order the requests were booked in
	queued time.Time
	state  ticketState
	parked bool      // waiting to unpark rather than to start
	active time.Time // when the trial last showed progress (or was granted)
	// granted is when the budget was last granted; progressed, whether
	// the trial has reported progress since.
	granted    time.Time
	progressed bool
	// unparked: the last grant let the trial unpark.
	unparked bool
	// resident is what a parked worker still holds on the device, booked
	// while it waits to unpark: its context and its streams' scratch
	// (parking frees the model and the pool's workspace, not the process);
	// or, for a request that continues a kept worker's booking
	// (Ask.Continues), what that worker holds.
	resident int64
	// reclaim closes an idle kept worker (Idle.Reclaim).
	reclaim func(Eviction)
	// parkedFor is the request this ticket was last parked for, until
	// its next grant, or until that request parks or ends: while the
	// request holds its grant, the room its headroom took stays with it
	// (see wants).
	parkedFor *Ticket
}

// residentBytes is what a worker of bill keeps on its device while parked.
func residentBytes(bill trainer.Bill) int64 { return bill.Context + bill.StreamScratch }

// adds is what granting t adds to the books: its bill, less what of it a
// parked worker still holds and the books still count.
func (t *Ticket) adds() int64 { return t.ask.Bill.DeviceBytes() - t.resident }

type ticketState int

const (
	ticketWaiting ticketState = iota
	ticketGranted
	ticketParking // granted, told to park, not parked yet
	ticketReleased
	// ticketIdle is an idle kept worker's booking (Ticket.Keep), and
	// ticketReclaiming one whose worker was asked to close.
	ticketIdle
	ticketReclaiming
)

// Ask books a request. It returns the ticket and, when the request fits
// now (and nobody waits before it), its grant; a request that waits has
// granted false and hears of its grant through OnGrant. A request that
// could never fit is refused with a *RefusedError.
func (b *Broker) Ask(a Ask) (t *Ticket, g Grant, granted bool, err error) {
	defer b.changed(a.Device)
	var park func() // after the unlock: a victim's Park
	defer func() {
		if park != nil {
			park()
		}
	}()
	b.mu.Lock()
	defer b.mu.Unlock()
	led := b.devices[a.Device]
	if led == nil {
		led = &ledger{device: a.Device, holders: map[*Ticket]struct{}{}}
		b.devices[a.Device] = led
	}
	if len(led.holders) == 0 && led.granted == 0 {
		// Nothing of ours is on the device (no holder, and no parked
		// worker's context): what the worker found free,
		// with what its own context already holds (its bill counts that
		// again), is what budgets may take (less what the configuration
		// holds back).
		led.capacity = a.Free + a.Bill.Context
		if b.cfg.DeviceMemory > 0 && (b.cfg.DeviceMemory < led.capacity || led.capacity <= 0) {
			led.capacity = b.cfg.DeviceMemory
		}
	}
	need := a.Bill.DeviceBytes()
	if withHeadroom(need) > led.capacity {
		return nil, Grant{}, false, &RefusedError{Kind: a.Kind, Holder: a.Holder, Device: a.Device, Bill: a.Bill, Capacity: led.capacity}
	}
	b.asked++
	t = &Ticket{b: b, ask: a, led: led, seq: b.asked, queued: b.cfg.Now()}
	t.ask.Continues = nil
	// A request that continues a kept worker's booking is its worker's
	// next: it goes before those that wait (some may wait for that very
	// worker to close, which it will not while it serves this request).
	continued := led.continues(t, a.Continues)
	if (continued || !led.waitsAhead(t)) && led.fits(t) {
		g = led.grant(t, t.queued) // waited no time
		if continued {
			// A reclaim under way frees nothing now, and room given back
			// may serve a waiting request: whom to evict is chosen again.
			park = b.evict(led)
		}
		return t, g, true, nil
	}
	if continued {
		led.queue = slices.Insert(led.queue, 0, t)
	} else {
		led.enqueue(t)
	}
	park = b.evict(led)
	return t, Grant{}, false, nil
}

// continues makes the kept worker's idle booking c the new request t's:
// what the worker holds is booked once, as a parked worker's context is
// (t.resident), and c ends. It reports whether it did: c is an idle
// booking of l.
func (l *ledger) continues(t, c *Ticket) bool {
	if c == nil || c.b != t.b || c.led != l || (c.state != ticketIdle && c.state != ticketReclaiming) {
		return false
	}
	held := c.ask.Bill.DeviceBytes()
	t.resident = min(held, t.ask.Bill.DeviceBytes())
	l.granted -= held - t.resident
	delete(l.holders, c)
	c.state = ticketReleased
	return true
}

// evict chooses a holder to evict for the request at the head of l's
// queue (see ledger.victim) and returns the call that asks it, to be made
// outside the lock: an idle kept worker's Reclaim, else a holder's Park;
// nil when none is to go.
func (b *Broker) evict(l *ledger) func() {
	v, e := l.victim(b.cfg.Now(), b.cfg.MinResidence)
	switch {
	case v == nil:
		return nil
	case v.state == ticketReclaiming:
		return func() { v.reclaim(e) }
	}
	return func() { v.ask.Park(e) }
}

// waitsAhead reports whether a request that would be granted before t
// waits.
func (l *ledger) waitsAhead(t *Ticket) bool {
	return len(l.queue) > 0 && l.queue[0].ask.Priority >= t.ask.Priority
}

// enqueue puts t in the queue: higher priority first, then oldest first.
func (l *ledger) enqueue(t *Ticket) {
	i := len(l.queue)
	for i > 0 && l.queue[i-1].ask.Priority < t.ask.Priority {
		i--
	}
	l.queue = slices.Insert(l.queue, i, t)
}

// victim chooses the holder to evict for the request at the head of the
// queue, when it does not fit. An idle kept worker's booking (Ticket.Keep)
// goes first, whatever the priorities: closing a worker that runs nothing
// is the cheapest eviction; of several, the one idle longest (then the
// one booked first) is marked reclaiming. Otherwise a holder is marked
// parking. A candidate to park is a granted holder that can park, of the
// head's priority or lower, that
//
//   - has reported progress since it was last granted, if that grant let
//     it unpark (a parked worker is not parked again before it has made
//     progress), and
//   - if of the head's own priority, has held its budget at least
//     residence and reported progress since it was granted.
//
// Of the candidates the one of lowest priority is parked, then the least
// recently active (the oldest of its last grant and last progress
// report), then the one booked first. Nobody is evicted unless evicting
// every candidate (idle bookings and holders to park) could make room, nor
// while another holder of the device is parking or being reclaimed
// (evicting one at a time frees no more than needed).
func (l *ledger) victim(now time.Time, residence time.Duration) (*Ticket, Eviction) {
	if len(l.queue) == 0 {
		return nil, Eviction{}
	}
	head := l.queue[0]
	if l.fits(head) {
		return nil, Eviction{}
	}
	var room int64
	var pick, idle *Ticket
	for t := range l.holders {
		switch {
		case t.state == ticketParking || t.state == ticketReclaiming:
			return nil, Eviction{}
		case t.state == ticketIdle:
			room += t.ask.Bill.DeviceBytes() // closing the worker frees it all
			if idle == nil || t.idleBefore(idle) {
				idle = t
			}
			continue
		case !t.evictable(head, now, residence):
			continue
		}
		room += t.ask.Bill.DeviceBytes() - residentBytes(t.ask.Bill) // what parking it frees
		if t == head.parkedFor {
			// Parked, it no longer keeps its headroom from head (see wants).
			room += withHeadroom(t.ask.Bill.DeviceBytes()) - t.ask.Bill.DeviceBytes()
		}
		if pick == nil || t.before(pick) {
			pick = t
		}
	}
	if (pick == nil && idle == nil) || l.capacity-l.granted+room < l.wants(head) {
		return nil, Eviction{}
	}
	if idle != nil {
		idle.state = ticketReclaiming
		return idle, Eviction{For: head.ask.Holder, ForPriority: head.ask.Priority, Idle: now.Sub(idle.active)}
	}
	pick.state, pick.parkedFor = ticketParking, head
	return pick, Eviction{For: head.ask.Holder, ForPriority: head.ask.Priority, Idle: now.Sub(pick.active)}
}

// idleBefore says whether the idle booking t is reclaimed before u: the
// one idle longest, then the one booked first.
func (t *Ticket) idleBefore(u *Ticket) bool {
	if !t.active.Equal(u.active) {
		return t.active.Before(u.active)
	}
	return t.seq < u.seq
}

// evictable says whether t may be parked for head (see victim).
func (t *Ticket) evictable(head *Ticket, now time.Time, residence time.Duration) bool {
	switch {
	case t.state != ticketGranted || t.ask.Park == nil || t.ask.Priority > head.ask.Priority:
		return false
	case t.unparked && !t.progressed:
		return false
	case t.ask.Priority == head.ask.Priority:
		return t.progressed && now.Sub(t.granted) >= residence
	}
	return true
}

// before says whether t is parked before u: lower priority first, then
// the least recently active, then the one booked first.
func (t *Ticket) before(u *Ticket) bool {
	switch {
	case t.ask.Priority != u.ask.Priority:
		return t.ask.Priority < u.ask.Priority
	case !t.active.Equal(u.active):
		return t.active.Before(u.active)
	}
	return t.seq < u.seq
}

// wants is the room t needs on the device: its bill with headroom, less
// (with headroom) what of it a parked worker still holds and the books
// still count. A worker parked for a request that still holds its grant
// also leaves that request's headroom free: the park made room for the
// request with its headroom, and the books hold only its bill, so without
// this the parked worker would unpark into the headroom at once, undoing
// the park it was asked for.
func (l *ledger) wants(t *Ticket) int64 {
	w := withHeadroom(t.ask.Bill.DeviceBytes()) - withHeadroom(t.resident)
	if f := t.parkedFor; f != nil && f.state == ticketGranted {
		need := f.ask.Bill.DeviceBytes()
		w += withHeadroom(need) - need
	}
	return w
}

func (l *ledger) fits(t *Ticket) bool { return l.capacity-l.granted >= l.wants(t) }

func (l *ledger) grant(t *Ticket, now time.Time) Grant {
	t.state, t.active, t.granted, t.progressed, t.unparked = ticketGranted, now, now, false, t.parked
	t.parkedFor = nil
	need := t.ask.Bill.DeviceBytes()
	l.granted += t.adds()
	t.resident = 0
	l.holders[t] = struct{}{}
	g := Grant{Bytes: need, Waited: now.Sub(t.queued), Capacity: l.capacity, Granted: l.granted, Unpark: t.parked}
	t.parked = false
	return g
}

// pump grants the waiting requests that fit, oldest first, stopping at the
// first that does not (so a large request is not passed over for ever).
func (l *ledger) pump(now time.Time) (granted []*Ticket, grants []Grant) {
	for len(l.queue) > 0 && l.fits(l.queue[0]) {
		t := l.queue[0]
		l.queue = l.queue[1:]
		granted, grants = append(granted, t), append(grants, l.grant(t, now))
	}
	return granted, grants
}

// Release gives the ticket's budget back (the trial ended), or takes a
// waiting request out of the queue, and grants what now fits. Releasing
// twice does nothing.
func (t *Ticket) Release() {
	b := t.b
	b.mu.Lock()
	l := t.led
	switch t.state {
	case ticketGranted, ticketParking, ticketIdle, ticketReclaiming:
		l.granted -= t.ask.Bill.DeviceBytes()
		delete(l.holders, t)
	case ticketWaiting:
		l.granted -= t.resident // a parked worker that ends gives back its context
		t.resident = 0
		if i := slices.Index(l.queue, t); i >= 0 {
			l.queue = slices.Delete(l.queue, i, i+1)
		}
	case ticketReleased:
		b.mu.Unlock()
		return
	}
	t.state = ticketReleased
	b.settle(l)
}

// settle grants what fits now and parks a trial for the request that
// does not, then hears nothing more of l: it unlocks b.mu, held by the
// caller, and calls back outside the lock.
func (b *Broker) settle(l *ledger) {
	granted, grants := l.pump(b.cfg.Now())
	park := b.evict(l)
	b.mu.Unlock()
	b.changed(l.device)
	for i, w := range granted {
		if w.ask.OnGrant != nil {
			w.ask.OnGrant(grants[i])
		}
	}
	if park != nil {
		park()
	}
}

// Keep ends the request of a worker that is kept for another (a sweep's
// kept worker, between trials): its budget is released but for what the
// worker still holds (idle.Bill), which stays booked on the device by the
// returned ticket, an idle kept worker's, until the worker's next request
// continues it (Ask.Continues) or the booking is released (the worker
// closed). When a request cannot be granted, the broker reclaims an idle
// booking before it parks anyone: it calls idle.Reclaim, and the caller
// closes the worker and releases the booking. A ticket that holds no
// budget (it waits, or was parked, refused or released) is released, and
// Keep returns nil: nothing of it stays booked. What now fits is granted.
func (t *Ticket) Keep(idle Idle) *Ticket {
	b := t.b
	b.mu.Lock()
	l := t.led
	if t.state != ticketGranted && t.state != ticketParking {
		b.mu.Unlock()
		t.Release()
		return nil
	}
	b.asked++
	now := b.cfg.Now()
	k := &Ticket{b: b, led: l, seq: b.asked, queued: now, active: now, granted: now, state: ticketIdle, reclaim: idle.Reclaim,
		ask: Ask{Holder: idle.Holder, Kind: KindKeptWorker, Device: t.ask.Device, Bill: idle.Bill}}
	if k.ask.Bill.DeviceBytes() > t.ask.Bill.DeviceBytes() {
		// A worker holds no more idle than it did at work.
		k.ask.Bill = t.ask.Bill
	}
	l.granted += k.ask.Bill.DeviceBytes() - t.ask.Bill.DeviceBytes()
	delete(l.holders, t)
	t.state = ticketReleased
	l.holders[k] = struct{}{}
	b.settle(l)
	return k
}

// Parked takes back the budget of a trial told to park, now that it has
// parked, less what its process still holds (its context and its streams'
// scratch, booked until it unparks or ends), and queues it to unpark (by
// its priority, as a new request); what fits is granted. A trial that was
// not told to park is ignored.
func (t *Ticket) Parked() {
	b := t.b
	b.mu.Lock()
	l := t.led
	if t.state != ticketParking {
		b.mu.Unlock()
		return
	}
	// The worker freed its model and workspace; its context and its
	// streams' scratch stay on the device until it unparks or ends.
	t.resident = residentBytes(t.ask.Bill)
	l.granted -= t.ask.Bill.DeviceBytes() - t.resident
	delete(l.holders, t)
	// Parked, t gives up the headroom it was granted with: a worker
	// parked for it owes it nothing more, even once t is granted again.
	for _, q := range l.queue {
		if q.parkedFor == t {
			q.parkedFor = nil
		}
	}
	t.state, t.parked, t.queued = ticketWaiting, true, b.cfg.Now()
	l.enqueue(t)
	b.settle(l)
}

// Active notes that the trial made progress (a progress report): the
// broker parks the least recently active holder first, and a holder
// becomes one it may park for a request of its own priority only once it
// has made progress since its grant. A request waiting on the device may
// so find a holder to park now: it is asked, outside the lock.
func (t *Ticket) Active() {
	b := t.b
	b.mu.Lock()
	var park func()
	if t.state == ticketGranted {
		t.active, t.progressed = b.cfg.Now(), true
		park = b.evict(t.led)
	}
	b.mu.Unlock()
	if park != nil {
		park()
	}
}

func (b *Broker) changed(device string) {
	if b.cfg.Changed != nil {
		b.cfg.Changed(device)
	}
}

// Waiting lists the trials waiting for a budget on device, oldest first.
func (b *Broker) Waiting(device string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	if l := b.devices[device]; l != nil {
		for _, t := range l.queue {
			out = append(out, t.ask.Holder)
		}
	}
	return out
}

// Books are a device's figures: its capacity for budgets and what is
// granted now.
type Books struct {
	Capacity, Granted int64
	Holders, Waiting  int
	// Unparkable are the holders that cannot be parked (no Ask.Park):
	// their budgets are kept until they end.
	Unparkable int
	// Idle are the holders that are idle kept workers' bookings
	// (Ticket.Keep), and IdleBytes what they book (in Granted).
	Idle       int
	IdleBytes  int64
	OldestWait time.Time // when the oldest waiting request began to wait; zero: none waits
}

// Books returns device's figures.
func (b *Broker) Books(device string) Books {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.devices[device]
	if l == nil {
		return Books{}
	}
	bk := Books{Capacity: l.capacity, Granted: l.granted, Holders: len(l.holders), Waiting: len(l.queue)}
	for t := range l.holders {
		switch {
		case t.state == ticketIdle || t.state == ticketReclaiming:
			bk.Idle++
			bk.IdleBytes += t.ask.Bill.DeviceBytes()
		case t.ask.Park == nil:
			bk.Unparkable++
		}
	}
	if len(l.queue) > 0 {
		bk.OldestWait = l.queue[0].queued
	}
	return bk
}

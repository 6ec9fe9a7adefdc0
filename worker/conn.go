package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is a worker's end of one request: the request it read, and the
// answers it sends back. Its methods are safe for concurrent use (a run
// reports from several goroutines). A failed write is final: every later
// answer fails with the same error.
type Conn struct {
	req     Request
	in      io.Reader // told when the answer is sent, if it wants to know (the spool)
	dec     *decoder
	enc     *encoder
	grants  chan Message  // the coordinator's answers to budget requests, read by WatchCancel
	park    atomic.Bool   // the coordinator asked to park
	unparks chan struct{} // the coordinator's unpark, read by WatchCancel
	// work counts the advances of the work (Advance); stage names the last.
	work  atomic.Uint64
	stage atomic.Pointer[string]
	// held is what the final message reports the process still holds on
	// its device (Holding); nil: nothing measured.
	held atomic.Pointer[int64]
	// closed: the worker closed its device once the request ended
	// (ClosedDevice).
	closed atomic.Bool
}

// Accept reads the request from in; answers go to out.
func Accept(in io.Reader, out io.Writer) (*Conn, error) {
	c, err := Listen(in, out).Accept()
	if err != nil {
		return nil, fmt.Errorf("worker: reading the request: %w", err)
	}
	return c, nil
}

// Listener reads one request after another from one input: a kept
// worker's (see Kept). Each request is served as one from Accept is, and
// ends when the coordinator sends TypeEnd (Conn.WatchCancel's wait then
// returns); the worker then accepts the next.
type Listener struct {
	in  io.Reader
	dec *decoder
	enc *encoder
}

// Listen reads requests from in; answers go to out.
func Listen(in io.Reader, out io.Writer) *Listener {
	return &Listener{in: in, dec: newDecoder(in), enc: newEncoder(out)}
}

// Accept reads the next request. It returns io.EOF when the coordinator
// has closed the input between requests: the worker is done. Call it only
// once the previous request's WatchCancel wait has returned, if it
// watched; the end of one that did not is skipped here.
func (l *Listener) Accept() (*Conn, error) {
	first, err := l.dec.next()
	for err == nil && first.Type == TypeEnd {
		// The end of a request answered without waiting for it (one
		// refused before its work began).
		first, err = l.dec.next()
	}
	if err != nil {
		return nil, err
	}
	req := Request{Type: first.Type, Device: first.Device, Body: first.Body, Heartbeat: time.Duration(first.HeartbeatMS) * time.Millisecond,
		AskBudget: first.AskBudget}
	return &Conn{req: req, in: l.in, dec: l.dec, enc: l.enc, grants: make(chan Message, 1), unparks: make(chan struct{}, 1)}, nil
}

// Request is the request read.
func (c *Conn) Request() Request { return c.req }

// Hello says which device the worker opened.
func (c *Conn) Hello(h Hello) error { return c.enc.send(Message{Type: TypeHello, Hello: &h}) }

// Observe sends one measurement: its kind's name and its JSON.
func (c *Conn) Observe(name string, body json.RawMessage) error {
	return c.enc.send(Message{Type: TypeObserve, Name: name, Body: body})
}

// Progress sends a progress report.
func (c *Conn) Progress(body json.RawMessage) error {
	return c.enc.send(Message{Type: TypeProgress, Body: body})
}

// Log sends a progress line.
func (c *Conn) Log(line string) error { return c.enc.send(Message{Type: TypeLog, Text: line}) }

// Result sends v, encoded as JSON, as the request's outcome. A value JSON
// cannot carry (a float that is not finite) is not sent: Result returns a
// *Error of kind KindNonFinite for the caller to send with Fail instead,
// so the coordinator always hears how the request ended. A failed write
// is returned as it is.
func (c *Conn) Result(v any) error {
	body, err := json.Marshal(v)
	var uv *json.UnsupportedValueError
	if errors.As(err, &uv) {
		return &Error{Kind: KindNonFinite, Message: fmt.Sprintf("the %s cannot be sent: it holds %s, which is not finite", TypeResult, uv.Str)}
	}
	if err != nil {
		return fmt.Errorf("worker: encoding the result: %w", err)
	}
	defer c.answered()
	return c.enc.send(Message{Type: TypeResult, Body: body, HeldBytes: c.held.Load(), DeviceClosed: c.closed.Load()})
}

// Fail sends the request's failure.
func (c *Conn) Fail(e *Error) error {
	defer c.answered()
	return c.enc.send(Message{Type: TypeError, Error: e, HeldBytes: c.held.Load(), DeviceClosed: c.closed.Load()})
}

// Holding records what the worker's process still holds on its device
// once the request's memory is freed (see Message.HeldBytes): the result
// or error sent next carries it, and the coordinator books it while the
// worker waits for its next request. A kept worker measures it before it
// answers.
func (c *Conn) Holding(bytes int64) { c.held.Store(&bytes) }

// ClosedDevice records that the worker closed its device once the
// request's memory was freed, so its process holds nothing there (see
// Message.DeviceClosed): the result or error sent next says so, in place
// of a figure from Holding, and the coordinator books nothing for the
// worker while it waits.
func (c *Conn) ClosedDevice() {
	c.held.Store(nil)
	c.closed.Store(true)
}

// answered tells an input that wants to know (the spool's) that the
// request's answer is sent.
func (c *Conn) answered() {
	if a, ok := c.in.(interface{ Answered() }); ok {
		a.Answered()
	}
}

// WatchCancel returns a context that is cancelled when the coordinator
// sends cancel or closes its end (it has gone, or has the answer and is
// done), and a function that waits for that end. A worker serves its
// request under the context, answers, then waits, so that it returns only
// once the coordinator has let go. A kept worker's request ends, with its
// input still open, when the coordinator sends TypeEnd.
func (c *Conn) WatchCancel(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := c.dec.next()
			if err == nil && m.Type == TypeGrant {
				select {
				case c.grants <- m:
				default: // an answer nobody asked for
				}
				continue
			}
			if err == nil && m.Type == TypePark {
				c.park.Store(true)
				continue
			}
			if err == nil && m.Type == TypeUnpark {
				select {
				case c.unparks <- struct{}{}:
				default:
				}
				continue
			}
			if err != nil || m.Type == TypeCancel || m.Type == TypeEnd {
				cancel()
				if err != nil || m.Type == TypeEnd {
					return
				}
			}
		}
	}()
	return ctx, func() {
		<-done
		cancel()
	}
}

// AskBudget sends a budget request with the bill in body and waits for
// the coordinator's answer: the grant's body, or the refusal as an *Error
// of kind KindBudget. It needs WatchCancel running, which reads the
// answer, and gives up when ctx (WatchCancel's) ends. While it waits (in
// a queue behind other trials, for as long as they take) it advances the
// work counter at the heartbeat interval (stage StageBudgetWait): the
// worker waits for the coordinator, its work is not wedged.
func (c *Conn) AskBudget(ctx context.Context, body json.RawMessage) (json.RawMessage, error) {
	if err := c.enc.send(Message{Type: TypeBudget, Body: body}); err != nil {
		return nil, err
	}
	tick, stop := c.waiting(StageBudgetWait)
	defer stop()
	for {
		select {
		case m := <-c.grants:
			if m.Error != nil {
				return nil, m.Error
			}
			return m.Body, nil
		case <-tick:
			c.Advance(StageBudgetWait)
		case <-ctx.Done():
			return nil, fmt.Errorf("worker: waiting for a device-memory budget: %w", context.Cause(ctx))
		}
	}
}

// Stages of a worker waiting for the coordinator, not working: its wait
// is progress, never a wedge.
const (
	StageBudgetWait = "budget wait" // for its device-memory budget (AskBudget)
	StageParked     = "parked"      // parked, for its unpark (Parked)
)

// waiting advances the work counter with stage, and returns a channel
// that ticks at the heartbeat interval (none without heartbeats) for the
// caller to advance it again as long as it waits, and what stops it.
func (c *Conn) waiting(stage string) (<-chan time.Time, func()) {
	c.Advance(stage)
	if c.req.Heartbeat <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(c.req.Heartbeat)
	return t.C, t.Stop
}

// Advance notes that the work moved: a training step, an evaluation batch,
// a data file read, a capture or a checkpoint written. stage says what
// moved, for the message of a worker found wedged. The next heartbeat
// carries the count, so the coordinator can tell a worker that works from
// one whose heartbeat goroutine beats on while its work is stuck (a
// deadlock, an endless loop). It is cheap (an atomic add) and safe from
// any goroutine.
func (c *Conn) Advance(stage string) {
	if p := c.stage.Load(); p == nil || *p != stage {
		c.stage.Store(&stage)
	}
	c.work.Add(1)
}

// beat is a heartbeat carrying the work counter.
func (c *Conn) beat() Message {
	m := Message{Type: TypeBeat, Work: c.work.Load()}
	if p := c.stage.Load(); p != nil {
		m.Stage = *p
	}
	return m
}

// ParkRequested reports whether the coordinator asked to park since the
// last call (WatchCancel reads the request).
func (c *Conn) ParkRequested() bool { return c.park.Swap(false) }

// Parked tells the coordinator the worker has parked (body says what it
// released) and waits for its unpark, or for ctx (WatchCancel's) to end,
// however long that takes: it advances the work counter at the heartbeat
// interval as it waits (stage StageParked), so a parked worker is not
// taken for wedged.
func (c *Conn) Parked(ctx context.Context, body json.RawMessage) error {
	if err := c.enc.send(Message{Type: TypeParked, Body: body}); err != nil {
		return err
	}
	tick, stop := c.waiting(StageParked)
	defer stop()
	for {
		select {
		case <-c.unparks:
			return nil
		case <-tick:
			c.Advance(StageParked)
		case <-ctx.Done():
			return fmt.Errorf("worker: parked, waiting to unpark: %w", context.Cause(ctx))
		}
	}
}

// StartHeartbeat sends a heartbeat every Request().Heartbeat until stop is
// called (stop returns once the sender has ended), from a goroutine of its
// own: a worker busy in a long step, or writing a checkpoint, still shows
// it is alive, and only a stopped or frozen process falls silent. Each
// heartbeat carries the work counter (Advance), so a process whose work is
// wedged while this goroutine beats on is found too (see Hello.Advances).
// A request without a heartbeat interval starts nothing.
func (c *Conn) StartHeartbeat() (stop func()) {
	every := c.req.Heartbeat
	if every <= 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if c.enc.send(c.beat()) != nil {
					return // the coordinator has gone; nothing more can reach it
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

package cpu

import (
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// event tracks generations: each Record outside a capture bumps recorded,
// and the stream that reaches the record sets completed. A wait or query
// concerns the generation current when it is issued, as in CUDA.
type event struct {
	dev *Device

	mu        sync.Mutex
	cond      *sync.Cond
	recorded  uint64
	completed uint64
	at        time.Time // completion time of generation completed
	capture   *capture  // set while the latest Record is inside a capture in progress
	destroyed bool
}

// NewEvent creates an event.
func (d *Device) NewEvent() (device.Event, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, d.err("NewEvent", device.ErrClosed, "device closed")
	}
	e := &event{dev: d}
	e.cond = sync.NewCond(&e.mu)
	return e, nil
}

func (d *Device) event(op string, x device.Event) (*event, error) {
	e, ok := x.(*event)
	if !ok || e == nil || e.dev != d {
		return nil, d.err(op, device.ErrMisuse, "event was not created by this device")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return nil, d.err(op, device.ErrClosed, "event destroyed")
	}
	return e, nil
}

func (e *event) complete(gen uint64) {
	now := time.Now()
	e.mu.Lock()
	if gen > e.completed {
		e.completed, e.at = gen, now
	}
	e.cond.Broadcast()
	e.mu.Unlock()
}

// waitFor blocks until generation gen has completed.
func (e *event) waitFor(gen uint64) {
	e.mu.Lock()
	for e.completed < gen {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

// hostCheck is the common part of Query and Synchronize: both are
// capture-unsafe, and neither may observe an event recorded in a capture.
func (e *event) hostCheck(op string) (uint64, error) {
	if err := e.dev.checkSafe(op); err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return 0, e.dev.err(op, device.ErrClosed, "event destroyed")
	}
	if e.capture != nil {
		return 0, e.dev.err(op, device.ErrCaptureIsolation, "the event was recorded inside a capture in progress")
	}
	return e.recorded, nil
}

// Query reports whether the latest Record has completed.
func (e *event) Query() (bool, error) {
	gen, err := e.hostCheck("Event.Query")
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.completed >= gen, nil
}

// Synchronize blocks until the latest Record has completed.
func (e *event) Synchronize() error {
	gen, err := e.hostCheck("Event.Synchronize")
	if err != nil {
		return err
	}
	e.waitFor(gen)
	return nil
}

// Destroy releases the event.
func (e *event) Destroy() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.destroyed = true
	return nil
}

// Elapsed is the time between the completions of start and end.
func (d *Device) Elapsed(start, end device.Event) (time.Duration, error) {
	a, err := d.event("Elapsed", start)
	if err != nil {
		return 0, err
	}
	b, err := d.event("Elapsed", end)
	if err != nil {
		return 0, err
	}
	ta, oka := a.doneAt()
	tb, okb := b.doneAt()
	if !oka || !okb {
		return 0, d.err("Elapsed", device.ErrNotReady, "both events must be recorded and complete")
	}
	return tb.Sub(ta), nil
}

func (e *event) doneAt() (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at, e.recorded > 0 && e.completed >= e.recorded && e.capture == nil
}

// Record marks the point reached in the stream's work.
func (s *stream) Record(x device.Event) error {
	e, err := s.dev.event("Stream.Record", x)
	if err != nil {
		return err
	}
	if c := s.captureOf(); c != nil {
		// Inside a capture a record only orders captured work; it becomes
		// no node, and the event belongs to the capture until it ends.
		if err := c.check("Record"); err != nil {
			return err
		}
		e.mu.Lock()
		e.capture = c
		e.mu.Unlock()
		c.track(e)
		return nil
	}
	e.mu.Lock()
	e.recorded++
	gen := e.recorded
	e.capture = nil
	e.mu.Unlock()
	if err := s.enqueue("Record", node{kind: "record", run: func() { e.complete(gen) }}); err != nil {
		e.mu.Lock()
		if e.recorded == gen {
			e.recorded-- // nothing will complete this generation
		}
		e.mu.Unlock()
		return err
	}
	return nil
}

// Wait orders later work on the stream after the event's latest Record.
func (s *stream) Wait(x device.Event) error {
	e, err := s.dev.event("Stream.Wait", x)
	if err != nil {
		return err
	}
	e.mu.Lock()
	gen, ec := e.recorded, e.capture
	e.mu.Unlock()
	c := s.captureOf()
	switch {
	case c != nil && ec == c:
		return nil // in-stream order already holds inside the capture
	case c != nil && gen > 0:
		c.invalidate("the capturing stream waited on an event recorded outside the capture")
		return s.err("Wait", device.ErrCaptureIsolation, "the event was recorded outside this capture")
	case c != nil:
		return nil // never recorded: a no-op, as in CUDA
	case ec != nil:
		return s.err("Wait", device.ErrCaptureIsolation, "the event was recorded inside a capture in progress on another stream")
	case gen == 0:
		return nil
	}
	return s.enqueue("Wait", node{kind: "wait", run: func() { e.waitFor(gen) }})
}

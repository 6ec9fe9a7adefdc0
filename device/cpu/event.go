package cpu

import (
	"fmt"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// record is one Record of an event outside a capture: it completes when
// the recording stream reaches it. A wait, query or synchronisation binds
// to the record current when it is issued, as in CUDA, so a later Record
// on a faster stream never releases an earlier wait.
type record struct {
	done chan struct{}
	at   time.Time // set before done is closed
}

func (r *record) completed() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

type event struct {
	dev *Device

	mu        sync.Mutex
	cur       *record  // the latest Record outside a capture; nil if never recorded
	capture   *capture // set while the latest Record is inside a capture in progress
	destroyed bool
	timing    bool // made by NewTimingEvent: Elapsed takes it
}

// NewEvent creates an event without timing (see device.Device).
func (d *Device) NewEvent() (device.Event, error) { return d.newEvent("NewEvent", false) }

// NewTimingEvent creates an event that Elapsed can measure.
func (d *Device) NewTimingEvent() (device.Event, error) { return d.newEvent("NewTimingEvent", true) }

func (d *Device) newEvent(op string, timing bool) (device.Event, error) {
	if err := d.closedErr(op); err != nil {
		return nil, err
	}
	return &event{dev: d, timing: timing}, nil
}

func (d *Device) event(op string, x device.Event) (*event, error) {
	e, ok := x.(*event)
	if !ok || e == nil || e.dev != d {
		return nil, d.err(op, device.ErrMisuse, "event was not created by this device")
	}
	if err := d.closedErr(op); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return nil, d.err(op, device.ErrClosed, "event destroyed")
	}
	return e, nil
}

// hostCheck is the common part of Query and Synchronize: both are
// capture-unsafe, and neither may observe an event recorded in a capture.
// It returns the record to observe (nil: never recorded).
//
// An event whose latest Record is inside a capture in progress fails with
// ErrCaptureIsolation (CUDA_ERROR_CAPTURED_EVENT) in either capture mode,
// ahead of the global-mode rule, and invalidates that capture, as any
// invalid call during a capture does in CUDA. The call is also a host wait
// during a capture, so global-mode captures are invalidated as well.
func (e *event) hostCheck(op string) (*record, error) {
	if err := e.dev.closedErr(op); err != nil {
		return nil, err
	}
	e.mu.Lock()
	destroyed, c, r := e.destroyed, e.capture, e.cur
	e.mu.Unlock()
	if destroyed {
		return nil, e.dev.err(op, device.ErrClosed, "event destroyed")
	}
	if c != nil {
		c.invalidate(fmt.Sprintf("%s was called on an event recorded inside the capture on stream %d, by %s", op, c.stream.id, device.Culprit(0)))
		_ = e.dev.checkSafe(op)
		return nil, e.dev.err(op, device.ErrCaptureIsolation,
			"the event was recorded inside a capture in progress; the host cannot wait on captured work, and the capture is invalidated")
	}
	if err := e.dev.checkSafe(op); err != nil {
		return nil, err
	}
	return r, nil
}

// Query reports whether the latest Record has completed.
func (e *event) Query() (bool, error) {
	r, err := e.hostCheck("Event.Query")
	if err != nil {
		return false, err
	}
	return r == nil || r.completed(), nil
}

// Synchronize blocks until the latest Record has completed.
func (e *event) Synchronize() error {
	r, err := e.hostCheck("Event.Synchronize")
	if err != nil || r == nil {
		return err
	}
	<-r.done
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
	if !a.timing || !b.timing {
		return 0, d.err("Elapsed", device.ErrMisuse, "an event made by NewEvent records no time; make both with NewTimingEvent")
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
	r, inCapture := e.cur, e.capture != nil
	e.mu.Unlock()
	if r == nil || inCapture || !r.completed() {
		return time.Time{}, false
	}
	return r.at, true
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
		if e.destroyed {
			e.mu.Unlock()
			return s.dev.err("Stream.Record", device.ErrClosed, "event destroyed")
		}
		e.capture = c
		e.mu.Unlock()
		c.track(e)
		return nil
	}
	// The record is enqueued and published under e.mu in one step: a wait
	// or query on another goroutine never binds to a record whose enqueue
	// then fails (on a destroyed stream) and that would never complete,
	// and an event destroyed since s.dev.event looked is not recorded.
	r := &record{done: make(chan struct{})}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return s.dev.err("Stream.Record", device.ErrClosed, "event destroyed")
	}
	err = s.enqueue("Record", node{kind: "record", run: func(*team) {
		r.at = time.Now()
		close(r.done)
	}})
	if err == nil {
		e.cur, e.capture = r, nil
	}
	return err
}

// Wait orders later work on the stream after the event's latest Record.
func (s *stream) Wait(x device.Event) error {
	e, err := s.dev.event("Stream.Wait", x)
	if err != nil {
		return err
	}
	e.mu.Lock()
	r, ec, destroyed := e.cur, e.capture, e.destroyed
	e.mu.Unlock()
	if destroyed {
		return s.dev.err("Stream.Wait", device.ErrClosed, "event destroyed")
	}
	s.mu.Lock()
	c, stopped := s.capture, s.stopped
	s.mu.Unlock()
	if stopped {
		// Checked here too: a wait that needs no node enqueues nothing.
		return s.stoppedErr("Wait")
	}
	switch {
	case c != nil && ec == c:
		return nil // in-stream order already holds inside the capture
	case c != nil && r != nil:
		c.invalidate(fmt.Sprintf("capturing stream %d waited on an event recorded outside the capture, by %s", s.id, device.Culprit(0)))
		return s.err("Wait", device.ErrCaptureIsolation, "the event was recorded outside this capture")
	case c != nil:
		return nil // never recorded: a no-op, as in CUDA
	case ec != nil:
		return s.err("Wait", device.ErrCaptureIsolation, "the event was recorded inside a capture in progress on another stream")
	case r == nil:
		return nil
	}
	return s.enqueue("Wait", node{kind: "wait", run: func(*team) { <-r.done }})
}

//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"time"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

// A freed block's memory may be handed out again once the work queued
// before its Free has run, on every stream. cuMemFree waits for that by
// synchronising the whole device, so one Free stalls every stream. Free
// here records an event on each stream instead (a streamFence) and the
// pool keeps the block aside until they have all completed; nothing waits
// unless the pool needs the memory back from the driver.
//
// Work on the legacy stream needs no event: this backend synchronises the
// device around it. A stream destroyed with work still queued leaves the
// event it recorded last (a streamTail), which later fences include until
// it has completed: cuStreamDestroy returns at once and the work runs on.
//
// Beside a capture. A block can come back while a stream captures: a graph
// or executable that held it is destroyed, or updated away from it, by one
// trainer while another captures. A fence must then touch nothing. An
// event recorded on the capturing stream would stand for the capture's
// nodes, not for the work queued before it, and asking about it is
// CUDA_ERROR_CAPTURED_EVENT; and on a GPU a host query of or wait for any
// event during a global-mode capture is refused with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and breaks that capture (PyTorch's
// caching allocator defers its event queries until no capture runs for
// that reason; docs/cuda.md cites the evidence). So a fence is made
// unarmed, with no driver call, and the pool arms it (records its events)
// and asks it only while no capture is in progress, with BeginCapture kept
// out meanwhile (pool.gate). Armed later, it covers more work than the
// Free had queued, never less: the block waits a little longer, never too
// little. Destroying an executable is deferred the same way
// (destroyExec). A fence whose event cannot be asked reports the error; it
// never counts as passed.

// streamTail is a destroyed stream's last event.
type streamTail struct {
	ev     cu.Event
	stream string
	passed bool // guarded by Device.mu; ev is destroyed once it is set
}

// fenceEvent is one event of a fence and the stream it was recorded on.
type fenceEvent struct {
	ev     cu.Event
	stream string
}

// streamFence is the work queued on every stream at (or after) one Free.
type streamFence struct {
	d      *Device
	op     string // the call that gave the block back, for errors
	armed  bool
	events []fenceEvent  // recorded by arm, destroyed once completed
	tails  []*streamTail // of streams destroyed before arm
}

// fence returns the fence for a block that op gives back. It makes no
// driver call, so it is safe during any capture; the pool arms it.
func (d *Device) fence(op string) *streamFence { return &streamFence{d: d, op: op} }

// arm records an event on every live stream of d and gathers the tails of
// destroyed streams still running; the pool calls it only while no stream
// captures. An event that cannot be created or recorded ends the fence as
// a device-wide wait: correct, only slower.
func (f *streamFence) arm() error {
	if f.armed {
		return nil
	}
	d := f.d
	d.mu.Lock()
	streams := make([]*Stream, 0, len(d.streams))
	for s := range d.streams {
		if !s.legacy {
			streams = append(streams, s)
		}
	}
	d.mu.Unlock()
	for _, s := range streams {
		if err := s.use(f.op); err != nil {
			continue // destroyed since: its tail is gathered below
		}
		ev, err := cu.MakeEvent(cu.DisableTiming)
		if err == nil {
			if err = ev.Record(s.cu); err != nil {
				_ = cu.DestroyEvent(&ev)
			}
		}
		label := s.label()
		s.mu.RUnlock()
		if err != nil {
			f.release()
			if serr := cu.Synchronize(); serr != nil {
				return f.failed(label, "recording an event (then synchronising the device instead)", serr)
			}
			f.armed = true
			return nil
		}
		f.events = append(f.events, fenceEvent{ev: ev, stream: label})
	}
	d.mu.Lock()
	kept := d.tails[:0]
	for _, t := range d.tails {
		if !t.passed {
			kept = append(kept, t)
			f.tails = append(f.tails, t)
		}
	}
	clear(d.tails[len(kept):])
	d.tails = kept
	d.mu.Unlock()
	f.armed = true
	return nil
}

// failed is the error of a fence whose driver call failed: the block stays
// out of use, and the caller learns which call, on which stream, and why.
func (f *streamFence) failed(stream, what string, err error) error {
	e := driverErr(f.d.name, "pool fence", int(codeOf(err)))
	e.Detail = fmt.Sprintf("a block given back by %s waits for the work queued on %s; %s failed, so the block stays out of use", f.op, stream, what)
	return e
}

// passed arms the fence if need be and reports, without waiting, whether
// every event has completed; it destroys those that have. An event whose
// query fails (the context is broken) is an error, never "completed".
func (f *streamFence) passed() (bool, error) {
	if err := f.arm(); err != nil {
		return false, err
	}
	for len(f.events) > 0 {
		e := f.events[0]
		switch err := e.ev.Query(); codeOf(err) {
		case cuSuccess:
		case cuErrNotReady:
			return false, nil
		default:
			return false, f.failed(e.stream, "cuEventQuery", err)
		}
		_ = cu.DestroyEvent(&e.ev)
		f.events = f.events[1:]
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	for len(f.tails) > 0 {
		t := f.tails[0]
		if !t.passed {
			switch err := t.ev.Query(); codeOf(err) {
			case cuSuccess:
			case cuErrNotReady:
				return false, nil
			default:
				return false, f.failed(t.stream+" (destroyed)", "cuEventQuery", err)
			}
			t.passed = true
			_ = cu.DestroyEvent(&t.ev)
		}
		f.tails = f.tails[1:]
	}
	return true, nil
}

// wait arms the fence if need be and blocks until every event has
// completed. A tail is polled rather than waited on under Device.mu, which
// other calls need meanwhile.
func (f *streamFence) wait() error {
	if err := f.arm(); err != nil {
		return err
	}
	for len(f.events) > 0 {
		e := f.events[0]
		if err := e.ev.Synchronize(); err != nil {
			return f.failed(e.stream, "cuEventSynchronize", err)
		}
		_ = cu.DestroyEvent(&e.ev)
		f.events = f.events[1:]
	}
	for {
		ok, err := f.passed()
		if ok || err != nil {
			return err
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// drop destroys the fence's own events without waiting (the tails are
// the device's: Close drops them).
func (f *streamFence) drop() { f.release() }

// release destroys the fence's own events without waiting.
func (f *streamFence) release() {
	for _, e := range f.events {
		_ = cu.DestroyEvent(&e.ev)
	}
	f.events = nil
}

// retire keeps a stream's last event before the stream is destroyed (with
// s.mu held for writing): later fences wait for it. A stream whose event
// cannot be recorded is synchronised instead. Recording on a stream that
// is not capturing is allowed beside any capture (Destroy refuses a
// capturing stream).
func (d *Device) retire(s *Stream) error {
	ev, err := cu.MakeEvent(cu.DisableTiming)
	if err == nil {
		if err = ev.Record(s.cu); err != nil {
			_ = cu.DestroyEvent(&ev)
		}
	}
	if err != nil {
		return s.cu.Synchronize()
	}
	d.mu.Lock()
	d.tails = append(d.tails, &streamTail{ev: ev, stream: s.label()})
	d.mu.Unlock()
	return nil
}

// dropTailsLocked destroys the tails' events (Close, after the device is
// idle).
func (d *Device) dropTailsLocked() {
	for _, t := range d.tails {
		if !t.passed {
			t.passed = true
			_ = cu.DestroyEvent(&t.ev)
		}
	}
	d.tails = nil
}

// destroyExec destroys an executable's driver handle (cuGraphExecDestroy)
// now, or, while a stream captures, once none does: the driver refuses the
// call during a global-mode capture and the refusal breaks that capture
// (docs/cuda.md). Destroy has already made the executable unusable to
// callers and given its blocks back behind fences, so nothing waits for
// the handle; an error from a deferred destruction goes to the caller of
// the pool call that made it.
func (d *Device) destroyExec(op string, e execHandle) error {
	return d.pool.outsideCapture(op, func() error {
		d.graphMu.Lock()
		r := graphExecDestroy(e)
		d.graphMu.Unlock()
		if r != cuSuccess {
			return d.driver(op, r)
		}
		return nil
	})
}

// putErr is the error of a Free whose block the pool took back with
// trouble: a block it never handed out is the caller's misuse; a fence's
// failure (the block stays out of use) passes through as it is.
func (d *Device) putErr(op string, err error) error {
	if errors.Is(err, errNotInUse) {
		return device.Errorf(d.name, op, device.ErrMisuse, "%v", err)
	}
	return d.wrap(op, err)
}

var _ fence = (*streamFence)(nil)

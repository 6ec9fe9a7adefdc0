//go:build cuda

package cuda

import (
	"time"

	"gorgonia.org/cu"
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

// streamTail is a destroyed stream's last event.
type streamTail struct {
	ev     cu.Event
	passed bool // guarded by Device.mu; ev is destroyed once it is set
}

// streamFence is the work queued on every stream at one Free.
type streamFence struct {
	d      *Device
	events []cu.Event    // recorded by the Free, destroyed once completed
	tails  []*streamTail // of streams destroyed before it
}

// fence records an event on every live stream of d and gathers the tails
// of destroyed streams still running. An event that cannot be created or
// recorded ends the fence as a device-wide wait: correct, only slower.
func (d *Device) fence(op string) (*streamFence, error) {
	d.mu.Lock()
	streams := make([]*Stream, 0, len(d.streams))
	for s := range d.streams {
		if !s.legacy {
			streams = append(streams, s)
		}
	}
	d.mu.Unlock()
	f := &streamFence{d: d}
	for _, s := range streams {
		if err := s.use(op); err != nil {
			continue // destroyed since: its tail is gathered below
		}
		ev, err := cu.MakeEvent(cu.DisableTiming)
		if err == nil {
			if err = ev.Record(s.cu); err != nil {
				_ = cu.DestroyEvent(&ev)
			}
		}
		s.mu.RUnlock()
		if err != nil {
			f.release()
			return nil, d.wrap(op, cu.Synchronize())
		}
		f.events = append(f.events, ev)
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
	return f, nil
}

// passed reports, without waiting, whether every event has completed; it
// destroys those that have. An event whose query fails (the context is
// broken) counts as completed: nothing will run any more.
func (f *streamFence) passed() bool {
	for len(f.events) > 0 {
		if codeOf(f.events[0].Query()) == cuErrNotReady {
			return false
		}
		_ = cu.DestroyEvent(&f.events[0])
		f.events = f.events[1:]
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	for len(f.tails) > 0 {
		t := f.tails[0]
		if !t.passed {
			if codeOf(t.ev.Query()) == cuErrNotReady {
				return false
			}
			t.passed = true
			_ = cu.DestroyEvent(&t.ev)
		}
		f.tails = f.tails[1:]
	}
	return true
}

// wait blocks until every event has completed. A tail is polled rather
// than waited on under Device.mu, which other calls need meanwhile.
func (f *streamFence) wait() error {
	var first error
	for _, ev := range f.events {
		if err := ev.Synchronize(); err != nil && first == nil {
			first = err
		}
		_ = cu.DestroyEvent(&ev)
	}
	f.events = nil
	for !f.passed() {
		time.Sleep(50 * time.Microsecond)
	}
	return first
}

// drop destroys the fence's own events without waiting (the tails are
// the device's: Close drops them).
func (f *streamFence) drop() { f.release() }

// release destroys the fence's own events without waiting.
func (f *streamFence) release() {
	for _, ev := range f.events {
		_ = cu.DestroyEvent(&ev)
	}
	f.events = nil
}

// retire keeps a stream's last event before the stream is destroyed (with
// s.mu held for writing): later fences wait for it. A stream whose event
// cannot be recorded is synchronised instead.
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
	d.tails = append(d.tails, &streamTail{ev: ev})
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

//go:build cuda

package cuda

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

// controlThread is a goroutine locked to one OS thread for the calls that
// must stay on one thread: opening and closing the device, and beginning and
// ending stream captures (in global mode the driver requires
// cuStreamEndCapture on the thread that began the capture). The goroutine
// never unlocks its thread, so the thread exits with it, taking its context
// binding along.
type controlThread struct {
	work chan func()
	done chan struct{}
}

func startControl() *controlThread {
	c := &controlThread{work: make(chan func()), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *controlThread) loop() {
	runtime.LockOSThread()
	defer close(c.done)
	for f := range c.work {
		f()
	}
}

// do runs f on the control thread and returns its error.
func (c *controlThread) do(f func() error) error {
	errc := make(chan error, 1)
	c.work <- func() { errc <- f() }
	return <-errc
}

// stop ends the goroutine and waits for it.
func (c *controlThread) stop() {
	close(c.work)
	<-c.done
}

// capture is one capture sequence begun on a stream. As in the contract
// (and the CPU device), a capture is one stream's chain of work: another
// stream cannot join it through an event.
type capture struct {
	mode        device.CaptureMode
	origin      *Stream
	invalidated atomic.Bool
	reason      string                    // why it was invalidated; guarded by Device.mu
	events      []*Event                  // events recorded inside it; guarded by Device.mu
	refs        map[*deviceAlloc]struct{} // allocations its work names; guarded by Device.mu
}

// checkUnsafe is called by every capture-unsafe operation (allocation,
// freeing, synchronisation, synchronous copies, event queries, work on the
// legacy stream). While a capture in global mode is in progress, from any
// goroutine, it invalidates that capture and fails with ErrCaptureViolation.
//
// The driver enforces the same rule for the calls it sees, but not all of
// them reach it: an allocation served from the pool's cache makes no driver
// call. Checking here gives every backend the same, deterministic rule.
func (d *Device) checkUnsafe(op string) error {
	if d.globalCaptures.Load() == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var streams []string
	who := ""
	for _, c := range d.captures {
		if c.mode == device.CaptureGlobal {
			if who == "" {
				// Only on a violation: the stack walk is not free.
				who = device.Culprit(0)
			}
			streams = append(streams, c.origin.label())
			d.invalidateLocked(c, fmt.Sprintf("%s was called during the global-mode capture on %s, by %s", op, c.origin.label(), who))
		}
	}
	if len(streams) == 0 {
		return nil
	}
	// The culprit is named in both errors: this one goes to the goroutine
	// that made the call, which may not be the one that ends the capture.
	return device.Errorf(d.name, op, device.ErrCaptureViolation,
		"%s was called while %s captured in global mode, which invalidates the capture; called by %s",
		op, strings.Join(streams, ", "), who)
}

// invalidateLocked marks c invalidated, keeping the first reason.
func (d *Device) invalidateLocked(c *capture, why string) {
	if c.invalidated.CompareAndSwap(false, true) {
		c.reason = why
	}
}

func (d *Device) invalidate(c *capture, why string) {
	d.mu.Lock()
	d.invalidateLocked(c, why)
	d.mu.Unlock()
}

// beginCapture registers a capture the driver has begun.
func (d *Device) beginCapture(c *capture) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.captures = append(d.captures, c)
	if c.mode == device.CaptureGlobal {
		d.globalCaptures.Add(1)
	}
	c.origin.capture.Store(c)
}

// endCapture unregisters a capture, releases the events recorded inside it,
// and returns why it was invalidated ("" if it was not).
func (d *Device) endCapture(c *capture) (reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, o := range d.captures {
		if o == c {
			d.captures = append(d.captures[:i], d.captures[i+1:]...)
			if c.mode == device.CaptureGlobal {
				d.globalCaptures.Add(-1)
			}
			break
		}
	}
	c.origin.capture.CompareAndSwap(c, nil)
	for _, e := range c.events {
		e.inCapture.CompareAndSwap(c, nil)
	}
	return c.reason
}

// recordInCapture notes that e's latest Record is inside c.
func (d *Device) recordInCapture(c *capture, e *Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e.inCapture.Store(c)
	c.events = append(c.events, e)
}

// wrap turns an error from gorgonia.org/cu into a *device.Error; a
// *device.Error passes through.
func (d *Device) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*device.Error); ok {
		return e
	}
	return driverErr(d.name, op, codeOf(err))
}

// driver turns a failed result of our own cgo calls into a *device.Error.
func (d *Device) driver(op string, r cuResult) *device.Error { return driverErr(d.name, op, r) }

func (d *Device) misuse(op, format string, args ...any) error {
	return device.Errorf(d.name, op, device.ErrMisuse, format, args...)
}

func (d *Device) released(op, what string) error {
	return device.Errorf(d.name, op, device.ErrClosed, "the %s was destroyed", what)
}

// devPtr resolves a buffer of this device to its device address. Its
// error names the operation and the argument.
func (d *Device) devPtr(op, name string, b device.Buffer) (cu.DevicePtr, error) {
	a, ok := b.Allocation().(*deviceAlloc)
	switch {
	case b.IsZero():
		return 0, d.misuse(op, "%s is the zero Buffer", name)
	case !ok || a.dev != d:
		return 0, d.misuse(op, "%s was not allocated by this device", name)
	case a.freed.Load():
		return 0, device.Errorf(d.name, op, device.ErrClosed, "%s was freed", name)
	}
	return a.ptr + cu.DevicePtr(b.Offset())*4, nil
}

// hostPtr resolves a host buffer to its first element: pinned memory of
// this device, or pageable memory (device.Pageable).
func (d *Device) hostPtr(op, name string, h device.HostBuffer) (unsafe.Pointer, error) {
	if h.Len() == 0 {
		return nil, d.misuse(op, "%s is empty", name)
	}
	if !h.IsPageable() {
		a, ok := h.Allocation().(*hostAlloc)
		switch {
		case !ok || a.dev != d:
			return nil, d.misuse(op, "%s is not pinned memory of this device", name)
		case a.freed.Load():
			return nil, device.Errorf(d.name, op, device.ErrClosed, "%s was freed", name)
		}
	}
	return unsafe.Pointer(unsafe.SliceData(h.Data())), nil
}

// ownStream, ownEvent, ownGraph and ownExec check that a handle is this
// device's. Whether it was destroyed is checked under its lock, by the
// call that uses it (Stream.use, Event.use, Graph.lock, Exec.lock).
func (d *Device) ownStream(op string, s device.Stream) (*Stream, error) {
	st, ok := s.(*Stream)
	switch {
	case !ok || st == nil || st.dev != d:
		return nil, d.misuse(op, "a stream of another device")
	}
	return st, nil
}

func (d *Device) ownEvent(op string, e device.Event) (*Event, error) {
	ev, ok := e.(*Event)
	switch {
	case !ok || ev == nil || ev.dev != d:
		return nil, d.misuse(op, "an event of another device")
	}
	return ev, nil
}

func (d *Device) ownGraph(op string, g device.Graph) (*Graph, error) {
	gr, ok := g.(*Graph)
	switch {
	case !ok || gr == nil || gr.dev != d:
		return nil, d.misuse(op, "a graph of another device")
	}
	return gr, nil
}

func (d *Device) ownExec(op string, x device.Exec) (*Exec, error) {
	ex, ok := x.(*Exec)
	switch {
	case !ok || ex == nil || ex.dev != d:
		return nil, d.misuse(op, "an executable of another device")
	}
	return ex, nil
}

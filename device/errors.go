package device

import (
	"errors"
	"fmt"
)

// Sentinel errors. Backends wrap them in *Error so callers can test with
// errors.Is and still read which operation failed.
var (
	// ErrCaptureViolation: a capture-unsafe call was made while a stream was
	// capturing in global mode. The capture in progress is invalidated.
	ErrCaptureViolation = errors.New("operation not permitted when stream is capturing")
	// ErrCaptureInvalidated: EndCapture (or work on the capturing stream)
	// after an earlier violation invalidated the capture.
	ErrCaptureInvalidated = errors.New("capture was invalidated by an earlier capture-unsafe call")
	// ErrCaptureIsolation: a dependency would cross the capture boundary,
	// such as a capturing stream waiting on an event recorded outside the
	// capture, or the host waiting on an event recorded inside one.
	ErrCaptureIsolation = errors.New("dependency crosses the capture boundary")
	// ErrOutOfMemory: the allocation does not fit in the device's memory limit.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrMisuse: an invalid argument or handle (wrong sizes, freed buffer,
	// a handle of another device, EndCapture without BeginCapture, ...).
	ErrMisuse = errors.New("invalid use")
	// ErrTopologyChanged: Exec.Update was given a graph whose topology differs
	// from the one the executable was instantiated from.
	ErrTopologyChanged = errors.New("graph topology differs from the executable's")
	// ErrClosed: the device, stream, event, graph or executable was released.
	ErrClosed = errors.New("use after release")
	// ErrNotReady: the events given to Elapsed have not completed, or one
	// was never recorded.
	ErrNotReady = errors.New("not ready")
	// ErrNoDevice: the backend has no usable device (no GPU, no driver).
	ErrNoDevice = errors.New("no usable device")
)

// Error records the operation that failed and why.
type Error struct {
	Device string // device name, e.g. "cpu" or "cuda:0"
	Op     string // operation, e.g. "AllocHost" or "Stream.EndCapture"
	Err    error  // one of the sentinels above, possibly wrapped
	Detail string // optional detail for humans
}

func (e *Error) Error() string {
	s := fmt.Sprintf("device %s: %s: %v", e.Device, e.Op, e.Err)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with a formatted detail.
func Errorf(dev, op string, err error, format string, args ...any) *Error {
	return &Error{Device: dev, Op: op, Err: err, Detail: fmt.Sprintf(format, args...)}
}

// HostBuffersLive is the error of a Close that released nothing because n
// pinned host buffers (bytes in all) from AllocHost are still allocated:
// callers may still hold their Data() slices. It wraps ErrMisuse.
func HostBuffersLive(dev string, n int, bytes int64) *Error {
	return Errorf(dev, "Close", ErrMisuse,
		"pinned host buffers from AllocHost still allocated: %d (%d bytes), whose Data() slices may be in use; nothing was released: FreeHost them, then Close again", n, bytes)
}

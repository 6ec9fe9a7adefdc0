//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

// Stream is a non-blocking CUDA stream, or the legacy default stream.
type Stream struct {
	dev     *Device
	cu      cu.Stream // zero for the legacy stream
	legacy  bool
	id      int64                   // numbers the device's streams in errors; 0 for the legacy stream
	capture atomic.Pointer[capture] // the capture in progress on it, if any

	// mu is held shared by every call that uses the stream's driver handle,
	// across the driver call, and exclusively by Destroy and Close: Destroy
	// never frees a handle another goroutine's call is using, and a call
	// that comes after it finds destroyed set and makes no driver call.
	mu        sync.RWMutex
	destroyed bool // guarded by mu

	// scratch holds the partial sums of the kernels that split a long
	// reduction over blocks (tl_gemm_klanes over parts of k): allocated
	// with the stream, freed with it, used only by work on this stream, so
	// two streams' kernels never share it. Zero for the legacy stream and
	// for a stream made under a memory limit too small for it: their
	// reductions are not split.
	scratch device.Buffer
}

// StreamScratchBytes is the device memory each NewStream allocates besides
// the driver's stream (device.StreamScratch; the trainer's bill counts it).
func (d *Device) StreamScratchBytes() int64 { return StreamScratchBytes() }

var _ device.StreamScratch = (*Device)(nil)

// use takes s.mu shared for a call on the stream, or fails with ErrClosed
// when the stream was destroyed. On success the caller calls s.mu.RUnlock.
func (s *Stream) use(op string) error {
	s.mu.RLock()
	if s.destroyed {
		s.mu.RUnlock()
		return s.dev.released(op, "stream")
	}
	return nil
}

// enqueue runs f, which enqueues work on s, inside a device call. It fails
// with ErrCaptureInvalidated while s's capture is invalidated. On the legacy
// stream, which the driver does not order against non-blocking streams, f
// runs between two device-wide synchronisations: that keeps the contract's
// promise that the legacy stream synchronises with every other stream (and
// makes its work capture-unsafe, as the contract says).
func (s *Stream) enqueue(op string, f func() error) error { return s.enqueueBinding(op, true, f) }

// enqueueBinding is enqueue for an f that binds the context itself when
// bind is false (a kernel launch does, in its one cgo call); work on the
// legacy stream is bound first either way, for its synchronisations.
func (s *Stream) enqueueBinding(op string, bind bool, f func() error) error {
	d := s.dev
	if err := d.enterBinding(op, bind || s.legacy); err != nil {
		return err
	}
	defer d.exit()
	if err := s.use(op); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if c := s.capture.Load(); c != nil && c.invalidated.Load() {
		return device.Errorf(d.name, op, device.ErrCaptureInvalidated,
			"the stream's capture was invalidated: %s", d.reason(c))
	}
	if s.legacy {
		if err := d.checkUnsafe(op + " on the legacy default stream"); err != nil {
			return err
		}
		if err := cu.Synchronize(); err != nil {
			return d.wrap(op, err)
		}
	}
	if err := f(); err != nil {
		return d.wrap(op, err)
	}
	if s.legacy {
		return d.wrap(op, cu.Synchronize())
	}
	return nil
}

// label names the stream in errors.
func (s *Stream) label() string {
	if s.legacy {
		return "the legacy default stream"
	}
	return fmt.Sprintf("stream %d", s.id)
}

func (d *Device) reason(c *capture) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return c.reason
}

// pageableCopy runs a copy with pageable host memory: capture-unsafe, never
// captured, and synchronous with respect to the host. The copy is enqueued
// on s, so it is ordered with s's other work, and waited for before
// returning, so the driver never uses Go memory after this call.
func (s *Stream) pageableCopy(op string, host []float32, f func() error) error {
	d := s.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := s.use(op); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := d.checkUnsafe(op + " with pageable host memory"); err != nil {
		return err
	}
	if s.capture.Load() != nil {
		return device.Errorf(d.name, op, device.ErrCaptureViolation, "a copy with pageable host memory cannot be captured")
	}
	if s.legacy {
		if err := cu.Synchronize(); err != nil {
			return d.wrap(op, err)
		}
	}
	if err := f(); err != nil {
		return d.wrap(op, err)
	}
	var err error
	if s.legacy {
		err = cu.Synchronize()
	} else {
		err = s.cu.Synchronize()
	}
	runtime.KeepAlive(host)
	return d.wrap(op, err)
}

// CopyHtoD copies host memory to the device: asynchronously from pinned
// memory, synchronously (and capture-unsafely) from device.Pageable memory.
func (s *Stream) CopyHtoD(dst device.Buffer, src device.HostBuffer) error {
	const op = "Stream.CopyHtoD"
	d := s.dev
	dp, err := d.devPtr(op, "dst", dst)
	if err != nil {
		return err
	}
	if src.Len() != dst.Len() {
		return d.misuse(op, "src has %d elements, dst %d", src.Len(), dst.Len())
	}
	hp, err := d.hostPtr(op, "src", src)
	if err != nil {
		return err
	}
	copyFn := func() error { return cu.MemcpyHtoDAsync(dp, hp, dst.Bytes(), s.cu) }
	if src.IsPageable() {
		return s.pageableCopy(op, src.Data(), copyFn)
	}
	s.note(dst.Allocation().(*deviceAlloc))
	return s.enqueue(op, copyFn)
}

// CopyDtoH copies device memory to host memory: asynchronously to pinned
// memory, synchronously (and capture-unsafely) to device.Pageable memory.
func (s *Stream) CopyDtoH(dst device.HostBuffer, src device.Buffer) error {
	const op = "Stream.CopyDtoH"
	d := s.dev
	sp, err := d.devPtr(op, "src", src)
	if err != nil {
		return err
	}
	if src.Len() != dst.Len() {
		return d.misuse(op, "src has %d elements, dst %d", src.Len(), dst.Len())
	}
	hp, err := d.hostPtr(op, "dst", dst)
	if err != nil {
		return err
	}
	copyFn := func() error { return cu.MemcpyDtoHAsync(hp, sp, src.Bytes(), s.cu) }
	if dst.IsPageable() {
		return s.pageableCopy(op, dst.Data(), copyFn)
	}
	s.note(src.Allocation().(*deviceAlloc))
	return s.enqueue(op, copyFn)
}

// CopyDtoD copies between device buffers of equal length asynchronously.
func (s *Stream) CopyDtoD(dst, src device.Buffer) error {
	const op = "Stream.CopyDtoD"
	d := s.dev
	dp, err := d.devPtr(op, "dst", dst)
	if err != nil {
		return err
	}
	sp, err := d.devPtr(op, "src", src)
	if err != nil {
		return err
	}
	if src.Len() != dst.Len() {
		return d.misuse(op, "src has %d elements, dst %d", src.Len(), dst.Len())
	}
	s.note(dst.Allocation().(*deviceAlloc))
	s.note(src.Allocation().(*deviceAlloc))
	return s.enqueue(op, func() error { return cu.MemcpyDtoDAsync(dp, sp, dst.Bytes(), s.cu) })
}

// Record marks the event (cuEventRecord). Inside a capture a record only
// orders the captured chain, which is in order already: it becomes no graph
// node and touches no driver event; the event belongs to the capture until
// the capture ends, and the host cannot wait on it meanwhile.
func (s *Stream) Record(e device.Event) error {
	const op = "Stream.Record"
	d := s.dev
	ev, err := d.ownEvent(op, e)
	if err != nil {
		return err
	}
	return s.enqueue(op, func() error {
		if err := ev.use(op); err != nil {
			return err
		}
		defer ev.mu.RUnlock()
		if c := s.capture.Load(); c != nil {
			d.recordInCapture(c, ev)
			return nil
		}
		if err := ev.ev.Record(s.cu); err != nil {
			return err
		}
		ev.inCapture.Store(nil)
		ev.recorded.Store(true)
		return nil
	})
}

// Wait makes later work on the stream wait for the event's latest Record
// (cuStreamWaitEvent). Waiting on an event never recorded is a no-op. A
// capturing stream waiting on an event recorded outside its capture fails
// with ErrCaptureIsolation and invalidates the capture; any stream waiting
// on an event recorded inside another stream's capture fails the same way.
func (s *Stream) Wait(e device.Event) error {
	const op = "Stream.Wait"
	d := s.dev
	ev, err := d.ownEvent(op, e)
	if err != nil {
		return err
	}
	return s.enqueue(op, func() error {
		if err := ev.use(op); err != nil {
			return err
		}
		defer ev.mu.RUnlock()
		c, ec, recorded := s.capture.Load(), ev.inCapture.Load(), ev.recorded.Load()
		switch {
		case c != nil && ec == c:
			return nil // in-stream order already holds inside the capture
		case c != nil && recorded:
			d.invalidate(c, fmt.Sprintf("capturing %s waited on an event recorded outside the capture, by %s", s.label(), device.Culprit(0)))
			return device.Errorf(d.name, op, device.ErrCaptureIsolation, "the event was recorded outside this capture")
		case c != nil:
			return nil // never recorded: a no-op, as in CUDA
		case ec != nil:
			return device.Errorf(d.name, op, device.ErrCaptureIsolation,
				"the event was recorded inside a capture in progress on another stream")
		case !recorded:
			return nil
		}
		return s.cu.Wait(ev.ev, 0)
	})
}

// Synchronize blocks until the stream's work is done. It is capture-unsafe;
// on a capturing stream it fails and invalidates the capture in either mode,
// since the driver cannot wait for work that is being recorded.
func (s *Stream) Synchronize() error {
	const op = "Stream.Synchronize"
	d := s.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := s.use(op); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := d.checkUnsafe(op); err != nil {
		return err
	}
	if c := s.capture.Load(); c != nil {
		who := device.Culprit(0)
		d.invalidate(c, fmt.Sprintf("%s was called on the capturing %s, by %s", op, s.label(), who))
		return device.Errorf(d.name, op, device.ErrCaptureViolation, "%s is capturing; the capture is invalidated; called by %s", s.label(), who)
	}
	if s.legacy {
		return d.wrap(op, cu.Synchronize())
	}
	return d.wrap(op, s.cu.Synchronize())
}

// BeginCapture starts capturing the stream's work into a graph
// (cuStreamBeginCapture with CU_STREAM_CAPTURE_MODE_GLOBAL or _RELAXED), on
// the device's control thread.
func (s *Stream) BeginCapture(mode device.CaptureMode) error {
	const op = "Stream.BeginCapture"
	d := s.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := s.use(op); err != nil {
		return err
	}
	defer s.mu.RUnlock()
	switch {
	case s.legacy:
		return d.misuse(op, "the legacy default stream cannot be captured; capture a stream from NewStream")
	case mode != device.CaptureGlobal && mode != device.CaptureRelaxed:
		return d.misuse(op, "unknown capture mode %d", mode)
	case s.capture.Load() != nil:
		return d.misuse(op, "the stream is already capturing")
	}
	var r cuResult
	// Through the pool's gate: no fence records or asks an event meanwhile
	// (fence_cuda.go).
	d.pool.gate(func() {
		d.ctl.do(func() error {
			if r = bindContext(d.ctx); r == cuSuccess {
				r = streamBeginCapture(s.cu, mode)
			}
			return nil
		})
		if r == cuSuccess {
			d.beginCapture(&capture{mode: mode, origin: s})
		}
	})
	if r != cuSuccess {
		return d.driver(op, r)
	}
	return nil
}

// EndCapture ends the capture (cuStreamEndCapture, on the control thread)
// and returns the graph, or an error wrapping ErrCaptureInvalidated when a
// capture-unsafe call or an isolation error invalidated it; the partial
// graph is then destroyed.
func (s *Stream) EndCapture() (device.Graph, error) {
	const op = "Stream.EndCapture"
	d := s.dev
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.exit()
	if err := s.use(op); err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	c := s.capture.Load()
	if c == nil {
		return nil, d.misuse(op, "the stream is not capturing")
	}
	var (
		g graphHandle
		r cuResult
	)
	d.ctl.do(func() error {
		if r = bindContext(d.ctx); r == cuSuccess {
			g, r = streamEndCapture(s.cu)
		}
		return nil
	})
	reason := d.endCapture(c)
	if c.invalidated.Load() || r != cuSuccess {
		if g != nil {
			d.graphMu.Lock()
			graphDestroy(g)
			d.graphMu.Unlock()
		}
		if c.invalidated.Load() {
			return nil, device.Errorf(d.name, op, device.ErrCaptureInvalidated, "%s", reason)
		}
		return nil, d.driver(op, r)
	}
	d.graphMu.Lock()
	n, r := graphNodeCount(g)
	if r != cuSuccess {
		graphDestroy(g)
	}
	d.graphMu.Unlock()
	if r != cuSuccess {
		return nil, d.driver(op, r)
	}
	gr := &Graph{dev: d, g: g, nodes: n}
	d.mu.Lock()
	gr.refs = holdLocked(c.refs)
	d.graphs[gr] = struct{}{}
	d.mu.Unlock()
	return gr, nil
}

// IsCapturing reports whether a capture is in progress on the stream,
// invalidated or not, as the driver sees it (cuStreamIsCapturing), and fails
// when the driver call does. It is always safe: the driver allows the query
// during a capture in any mode, from any thread. The legacy stream is never
// asked: it cannot capture (BeginCapture refuses it).
//
// When the driver reports the capture invalidated (a driver-refused call can
// invalidate it without this package's own checks seeing it), the capture's
// bookkeeping is marked invalidated too, so later work on the stream fails
// with ErrCaptureInvalidated at once.
func (s *Stream) IsCapturing() (bool, error) {
	const op = "Stream.IsCapturing"
	d := s.dev
	if err := d.enter(op); err != nil {
		return false, err
	}
	defer d.exit()
	if err := s.use(op); err != nil {
		return false, err
	}
	defer s.mu.RUnlock()
	if s.legacy {
		return false, nil
	}
	st, r := streamCaptureStatus(s.cu)
	if r != cuSuccess {
		return false, d.driver(op, r)
	}
	switch st {
	case captureStatusNone:
		return false, nil
	case captureStatusInvalidated:
		if c := s.capture.Load(); c != nil {
			d.invalidate(c, "the driver reports the capture invalidated")
		}
	}
	return true, nil
}

// Launch enqueues an executable as one unit (cuGraphLaunch). It holds the
// executable's lock across the driver call: an executable is not internally
// synchronised, so its launches, updates and destruction are serialised.
func (s *Stream) Launch(x device.Exec) error {
	const op = "Stream.Launch"
	d := s.dev
	ex, err := d.ownExec(op, x)
	if err != nil {
		return err
	}
	return s.enqueue(op, func() error {
		if err := ex.lock(op); err != nil {
			return err
		}
		defer ex.mu.Unlock()
		d.graphMu.Lock()
		r := graphLaunch(ex.e, s.cu)
		d.graphMu.Unlock()
		if r != cuSuccess {
			return d.driver(op, r)
		}
		return nil
	})
}

// Destroy releases the stream once its queued work completes. It waits for
// calls on the stream in progress on other goroutines; calls after it fail
// with ErrClosed. Destroying it again is a no-op.
func (s *Stream) Destroy() error {
	destroyed, err := s.destroy()
	if destroyed && s.scratch.Len() > 0 {
		// Freed by the next Alloc, NewStream or Close (freeOrphans):
		// then it waits for the stream's queued work (fence_cuda.go) and
		// for the graphs that hold it, as any freed buffer does.
		s.dev.orphan(s.scratch)
	}
	return err
}

// destroy destroys the driver's stream; destroyed is true when this call did.
func (s *Stream) destroy() (destroyed bool, err error) {
	const op = "Stream.Destroy"
	d := s.dev
	if s.legacy {
		return false, d.misuse(op, "the legacy default stream cannot be destroyed")
	}
	if err := d.enter(op); err != nil {
		return false, err
	}
	defer d.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return false, nil
	}
	if s.capture.Load() != nil {
		return false, d.misuse(op, "the stream is capturing; end the capture first")
	}
	s.destroyed = true
	d.mu.Lock()
	delete(d.streams, s)
	d.mu.Unlock()
	st := s.cu
	// Its queued work runs on after cuStreamDestroy: freed blocks wait for
	// it (fence_cuda.go).
	retireErr := d.retire(s)
	return true, d.wrap(op, errors.Join(retireErr, st.Destroy()))
}

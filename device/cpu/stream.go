package cpu

import (
	"fmt"
	"sync"

	"github.com/tolaria-ml/tolaria/device"
)

// node is one unit of device work: a kernel, a copy, a wait or an event
// completion. kind names it for graph topology comparison.
type node struct {
	kind string
	run  func(t *team)
	// exec is the executable a launch node runs, and ticket its place
	// among that executable's launches (see launchOrder); nil for other
	// work, and for a launch captured into another graph.
	exec   *exec
	ticket uint64
}

// do runs n on the stream goroutine that holds t: a launch in its turn
// among the launches of its executable.
func (n node) do(t *team) {
	if n.exec != nil {
		n.exec.order.run(n, t)
		return
	}
	n.run(t)
}

// stream runs its queue in order on one goroutine. Enqueueing never blocks
// on the work, as on a GPU.
type stream struct {
	dev    *Device
	id     int64
	legacy bool

	// team splits the kernels this stream's goroutine runs.
	team team

	mu   sync.Mutex
	cond *sync.Cond
	// queue[head:] is the work not yet started. The queue is emptied in
	// place, so a steady stream of launches enqueues without allocating.
	queue   []node
	head    int
	running bool // the goroutine is executing a node
	stopped bool
	idle    *sync.Cond
	capture *capture // non-nil while capturing
}

// startStream registers and starts a stream, unless the device is closed:
// the check and the registration are one step, so Close never misses a
// stream it should stop.
func (d *Device) startStream(legacy bool) (*stream, bool) {
	s := &stream{dev: d, id: d.streamIDs.Add(1), legacy: legacy}
	s.team.h = d.helpers
	s.cond = sync.NewCond(&s.mu)
	s.idle = sync.NewCond(&s.mu)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, false
	}
	d.streams[s] = struct{}{}
	d.wg.Add(1)
	go s.loop()
	return s, true
}

func (s *stream) loop() {
	defer s.dev.wg.Done()
	s.mu.Lock()
	for {
		for s.head == len(s.queue) && !s.stopped {
			s.idle.Broadcast()
			s.cond.Wait()
		}
		if s.head == len(s.queue) {
			s.idle.Broadcast()
			s.mu.Unlock()
			return
		}
		n := s.queue[s.head]
		s.queue[s.head] = node{}
		s.head++
		if s.head == len(s.queue) {
			s.queue, s.head = s.queue[:0], 0
		}
		s.running = true
		s.mu.Unlock()
		n.do(&s.team)
		s.mu.Lock()
		s.running = false
	}
}

func (s *stream) waitIdle() {
	s.mu.Lock()
	for s.head < len(s.queue) || s.running {
		s.idle.Wait()
	}
	s.mu.Unlock()
}

func (s *stream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.cond.Signal()
	s.mu.Unlock()
}

func (s *stream) err(op string, err error, format string, args ...any) error {
	return s.dev.err("Stream."+op, err, format, args...)
}

// enqueue appends work: to the capture when capturing, else to the queue.
func (s *stream) enqueue(op string, n node) error {
	if s.legacy {
		if err := s.dev.checkSafe(op + " on the legacy default stream"); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return s.stoppedErr(op)
	}
	if c := s.capture; c != nil {
		n.exec = nil // part of the capturing graph, run with it
		return c.add(op, n)
	}
	if n.exec != nil {
		n.ticket = n.exec.order.issue()
	}
	if s.head > 0 && len(s.queue) == cap(s.queue) {
		// Reuse the room of started work rather than grow.
		m := copy(s.queue, s.queue[s.head:])
		clear(s.queue[m:])
		s.queue, s.head = s.queue[:m], 0
	}
	s.queue = append(s.queue, n)
	s.cond.Signal()
	return nil
}

// stoppedErr is the ErrClosed of a stream that was destroyed or whose
// device was closed.
func (s *stream) stoppedErr(op string) error {
	if err := s.dev.closedErr("Stream." + op); err != nil {
		return err
	}
	return s.err(op, device.ErrClosed, "stream destroyed")
}

// captureOf returns the stream's capture in progress, or nil.
func (s *stream) captureOf() *capture {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capture
}

func (s *stream) misuse(op string, err error) error {
	return s.err(op, device.ErrMisuse, "%v", err)
}

// CopyHtoD copies host memory to the device. A pageable source makes it a
// synchronous copy, which is capture-unsafe.
func (s *stream) CopyHtoD(dst device.Buffer, src device.HostBuffer) error {
	const op = "CopyHtoD"
	d, err := s.dev.view(op, dst)
	if err != nil {
		return err
	}
	if len(d) != src.Len() {
		return s.misuse(op, fmt.Errorf("source has %d elements, destination %d", src.Len(), len(d)))
	}
	if src.IsPageable() {
		return s.pageableCopy(op, func() { copy(d, src.Data()) })
	}
	if _, err := s.dev.own(op, src.Allocation(), true); err != nil {
		return err
	}
	h, slow := src.Data(), s.dev.cfg.SlowCopy
	return s.enqueue(op, node{kind: "memcpyHtoD", run: func(*team) {
		if slow > 0 {
			half := len(d) / 2
			copy(d[:half], h[:half])
			sleep(slow)
			copy(d[half:], h[half:])
			return
		}
		copy(d, h)
	}})
}

// pageableCopy is a copy from or to pageable memory: capture-unsafe, and
// synchronous with respect to the host.
func (s *stream) pageableCopy(op string, do func()) error {
	if err := s.dev.checkSafe(op + " with pageable host memory"); err != nil {
		return err
	}
	if s.captureOf() != nil {
		return s.err(op, device.ErrCaptureViolation, "a copy with pageable host memory cannot be captured")
	}
	done := make(chan struct{})
	if err := s.enqueue(op, node{kind: "memcpyPageable", run: func(*team) { do(); close(done) }}); err != nil {
		return err
	}
	<-done
	return nil
}

// CopyDtoH copies device memory to host memory.
func (s *stream) CopyDtoH(dst device.HostBuffer, src device.Buffer) error {
	const op = "CopyDtoH"
	v, err := s.dev.view(op, src)
	if err != nil {
		return err
	}
	if len(v) != dst.Len() {
		return s.misuse(op, fmt.Errorf("destination has %d elements, source %d", dst.Len(), len(v)))
	}
	if dst.IsPageable() {
		return s.pageableCopy(op, func() { copy(dst.Data(), v) })
	}
	if _, err := s.dev.own(op, dst.Allocation(), true); err != nil {
		return err
	}
	h := dst.Data()
	return s.enqueue(op, node{kind: "memcpyDtoH", run: func(*team) { copy(h, v) }})
}

// CopyDtoD copies between device buffers.
func (s *stream) CopyDtoD(dst, src device.Buffer) error {
	const op = "CopyDtoD"
	d, err := s.dev.view(op, dst)
	if err != nil {
		return err
	}
	v, err := s.dev.view(op, src)
	if err != nil {
		return err
	}
	if len(d) != len(v) {
		return s.misuse(op, fmt.Errorf("destination has %d elements, source %d", len(d), len(v)))
	}
	return s.enqueue(op, node{kind: "memcpyDtoD", run: func(*team) { copy(d, v) }})
}

// Synchronize waits for the stream's queued work. Capture-unsafe; on the
// capturing stream itself it fails and invalidates the capture in either
// mode, as cuStreamSynchronize does (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED):
// captured work is recorded, not run, so there is nothing to wait for.
func (s *stream) Synchronize() error {
	if err := s.dev.checkSafe("Stream.Synchronize"); err != nil {
		return err
	}
	s.mu.Lock()
	c, stopped := s.capture, s.stopped
	s.mu.Unlock()
	if stopped {
		return s.stoppedErr("Synchronize")
	}
	if c != nil {
		who := device.Culprit(0)
		c.invalidate(fmt.Sprintf("Stream.Synchronize was called on the capturing stream %d, by %s", s.id, who))
		return s.err("Synchronize", device.ErrCaptureViolation, "stream %d is capturing; the capture is invalidated; called by %s", s.id, who)
	}
	s.waitIdle()
	return nil
}

// Destroy stops the stream after its queued work. Calls after it fail with
// ErrClosed. The check that no capture is in progress and the stop are one
// step, so a BeginCapture on another goroutine cannot slip between them.
func (s *stream) Destroy() error {
	if s.legacy {
		return s.err("Destroy", device.ErrMisuse, "the legacy default stream cannot be destroyed")
	}
	s.mu.Lock()
	if s.capture != nil {
		s.mu.Unlock()
		return s.err("Destroy", device.ErrMisuse, "stream is capturing; end the capture first")
	}
	s.stopped = true
	s.cond.Signal()
	s.mu.Unlock()
	s.dev.mu.Lock()
	delete(s.dev.streams, s)
	s.dev.mu.Unlock()
	s.waitIdle()
	return nil
}

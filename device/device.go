package device

import "time"

// CaptureMode is the stream-capture mode. tolaria captures in CaptureGlobal
// so that any capture-unsafe call from any goroutine is caught.
type CaptureMode int

const (
	// CaptureGlobal prohibits capture-unsafe calls from every goroutine
	// while the capture is in progress (CU_STREAM_CAPTURE_MODE_GLOBAL).
	CaptureGlobal CaptureMode = iota
	// CaptureRelaxed prohibits nothing (CU_STREAM_CAPTURE_MODE_RELAXED).
	CaptureRelaxed
)

func (m CaptureMode) String() string {
	switch m {
	case CaptureGlobal:
		return "global"
	case CaptureRelaxed:
		return "relaxed"
	}
	return "unknown"
}

// Device is one accelerator (or the CPU reference) and everything allocated
// on it. A Device, and every stream, event, graph and executable it makes,
// is safe for concurrent use by multiple goroutines. Destroying a handle
// while other goroutines use it is safe too: each call on it either takes
// effect before the Destroy or fails with ErrClosed, never reaches the
// driver with a released handle, and Destroy waits for calls on the handle
// in progress. (Freeing a buffer that work being enqueued on another
// goroutine names is the caller's race, as with cuMemFree.)
type Device interface {
	// Name identifies the device, e.g. "cpu" or "cuda:0".
	Name() string
	// Description is a human-readable model name, e.g. "NVIDIA H100 80GB HBM3".
	Description() string

	// Alloc returns n float32 elements of device memory, not initialised.
	// Capture-unsafe.
	Alloc(n int) (Buffer, error)
	// Free releases memory returned by Alloc. Capture-unsafe. A graph or
	// executable captured against the buffer keeps its memory: no later
	// Alloc receives it until every such graph and executable is destroyed
	// (or the executable is updated to a graph that does not name it), so a
	// launch after the Free never writes into another buffer. A backend that
	// reuses memory (CUDA's pool) counts it as in use (MemoryStats) until
	// then; the CPU device never reuses memory and counts it freed at once.
	Free(Buffer) error
	// AllocHost returns n float32 elements of pinned host memory, zeroed.
	// Capture-unsafe.
	AllocHost(n int) (HostBuffer, error)
	// FreeHost releases memory returned by AllocHost. Capture-unsafe.
	FreeHost(HostBuffer) error

	// Upload copies pageable host memory to the device synchronously with
	// respect to the host (it waits for the device to be idle first, like
	// cuMemcpyHtoD on the legacy stream). Capture-unsafe.
	Upload(dst Buffer, src []float32) error
	// Download copies device memory to pageable host memory synchronously.
	// Capture-unsafe.
	Download(dst []float32, src Buffer) error

	// NewStream creates a non-blocking stream.
	NewStream() (Stream, error)
	// DefaultStream is the legacy default stream, which synchronises with
	// every other stream. Work on it is capture-unsafe.
	DefaultStream() Stream
	// NewEvent creates an event for ordering streams and for host waits.
	// It records no time: Elapsed refuses it (ErrMisuse). A host waiting on
	// it sleeps rather than spins.
	NewEvent() (Event, error)
	// NewTimingEvent creates an event that also records when it completes,
	// for Elapsed; a host waiting on it sleeps too. Timing costs the
	// device a timestamp per Record, so only events measured take it.
	NewTimingEvent() (Event, error)
	// Elapsed is the time between two completed events, both made by
	// NewTimingEvent.
	Elapsed(start, end Event) (time.Duration, error)
	// Synchronize waits until all work on all streams is done. Capture-unsafe.
	Synchronize() error

	// Instantiate turns a captured graph into an executable.
	Instantiate(Graph) (Exec, error)

	// MemoryStats reports memory use.
	MemoryStats() MemoryStats
	// Close releases everything allocated on the device and stops its
	// goroutines. Using the device afterwards returns ErrClosed; closing
	// again is a no-op. While pinned host buffers from AllocHost are still
	// allocated, Close releases nothing, leaves the device open and fails
	// with ErrMisuse naming how many (HostBuffersLive): callers may still
	// hold their Data() slices, and on CUDA their memory goes with the
	// context. FreeHost them, then Close again.
	Close() error
}

// Stream is an ordered queue of device work. Methods that enqueue work
// return before the work runs. A stream may be used from several
// goroutines, but work is ordered by the order of the calls.
type Stream interface {
	Kernels
	ImageKernels
	SequenceKernels

	// CopyHtoD copies pinned host memory to the device. len(src) must equal
	// dst.Len().
	CopyHtoD(dst Buffer, src HostBuffer) error
	// CopyDtoH copies device memory to pinned host memory.
	CopyDtoH(dst HostBuffer, src Buffer) error
	// CopyDtoD copies between device buffers of equal length.
	CopyDtoD(dst, src Buffer) error

	// Record marks the event as the point in this stream's work reached so far.
	Record(Event) error
	// Wait makes later work on this stream wait until the event's most
	// recent Record (as of this call) completes. Waiting on an event never
	// recorded is a no-op, as in CUDA.
	Wait(Event) error
	// Synchronize blocks until all work on the stream is done. Capture-unsafe.
	Synchronize() error

	// BeginCapture starts recording this stream's work into a graph instead
	// of running it.
	BeginCapture(CaptureMode) error
	// EndCapture stops recording and returns the graph. It returns an error
	// wrapping ErrCaptureInvalidated when a violation invalidated the capture.
	EndCapture() (Graph, error)
	// IsCapturing reports whether the stream is capturing.
	IsCapturing() (bool, error)
	// Launch enqueues an executable; it runs as one unit on this stream.
	Launch(Exec) error

	// Destroy releases the stream after its queued work completes. It
	// fails with ErrMisuse while the stream captures. Calls on the stream
	// after it fail with ErrClosed; destroying it again is a no-op.
	Destroy() error
}

// Event marks a point in a stream's work.
type Event interface {
	// Query reports whether the work before the most recent Record is done.
	// An event never recorded is done. Capture-unsafe.
	Query() (bool, error)
	// Synchronize blocks until the most recent Record completes. Capture-unsafe.
	Synchronize() error
	// Destroy releases the event. Calls on or with it after it fail with
	// ErrClosed; destroying it again is a no-op.
	Destroy() error
}

// Graph is the work captured from a stream.
type Graph interface {
	// Nodes is the number of operations in the graph.
	Nodes() int
	// Destroy releases the graph; executables made from it stay valid.
	// Instantiate and Update with it afterwards fail with ErrClosed.
	Destroy() error
}

// Exec is an instantiated graph, launched with Stream.Launch. Launches,
// updates and the destruction of one executable may come from different
// goroutines: the backend serialises them (the CUDA driver documents graph
// objects as not internally synchronised). Launches of one executable run
// one at a time, each after the one issued before it, whatever streams
// they were issued on, as cuGraphLaunch orders them (the conformance case
// "launches of one executable in issue order").
type Exec interface {
	// Update replaces the executable's node parameters (buffers, scalars)
	// with those of g, which must have the same topology: the same nodes,
	// kernels and dependencies. It returns ErrTopologyChanged otherwise, and
	// the executable is left as it was. Launches enqueued before it keep
	// the parameters they were enqueued with.
	Update(g Graph) error
	// Upload prepares the executable for launch on the stream ahead of its
	// first launch, so that the first launch is not slower than the rest.
	Upload(s Stream) error
	// Nodes is the number of operations launched per Launch.
	Nodes() int
	// Destroy releases the executable once a launch, upload or update of
	// it in progress returns; launches already enqueued still run. Calls
	// after it fail with ErrClosed.
	Destroy() error
}

// ThreadAffine is implemented by backends whose calls are cheapest when
// they come from one OS thread that keeps the device context current, as
// with the CUDA driver. A caller that issues its hot path from one
// goroutine (the trainer's step loop) locks that goroutine to its thread
// for the loop when PrefersLockedThread reports true, so every call finds
// the context already current and no call hops to another goroutine.
type ThreadAffine interface {
	PrefersLockedThread() bool
}

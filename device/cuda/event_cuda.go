//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

// Event is a CUDA event: with timing (NewTimingEvent) or without (NewEvent).
type Event struct {
	dev       *Device
	ev        cu.Event
	seq       uint64                  // creation order: Elapsed locks two events in this order
	timing    bool                    // created without CU_EVENT_DISABLE_TIMING
	recorded  atomic.Bool             // recorded outside a capture at least once
	inCapture atomic.Pointer[capture] // the capture in progress holding the latest Record

	// mu is held shared by every call that uses the event's driver handle,
	// across the driver call, and exclusively by Destroy and Close (see
	// Stream.mu).
	mu        sync.RWMutex
	destroyed bool // guarded by mu
}

// use takes e.mu shared for a call on the event, or fails with ErrClosed
// when the event was destroyed. On success the caller calls e.mu.RUnlock.
func (e *Event) use(op string) error {
	e.mu.RLock()
	if e.destroyed {
		e.mu.RUnlock()
		return e.dev.released(op, "event")
	}
	return nil
}

// Query reports whether the work before the latest Record is done
// (cuEventQuery). Capture-unsafe; ErrCaptureIsolation for an event last
// recorded inside a capture in progress, which that capture does not survive.
func (e *Event) Query() (bool, error) {
	const op = "Event.Query"
	d := e.dev
	if err := e.hostWaitable(op); err != nil {
		return false, err
	}
	defer e.leave()
	err := e.ev.Query()
	switch codeOf(err) {
	case cuSuccess:
		return true, nil
	case cuErrNotReady:
		return false, nil
	}
	return false, d.wrap(op, err)
}

// Synchronize blocks until the latest Record completes (cuEventSynchronize).
func (e *Event) Synchronize() error {
	const op = "Event.Synchronize"
	d := e.dev
	if err := e.hostWaitable(op); err != nil {
		return err
	}
	defer e.leave()
	return d.wrap(op, e.ev.Synchronize())
}

// hostWaitable enters a device call for a host wait on e, holding e.mu
// shared; on success the caller must call leave.
//
// An event whose latest Record is inside a capture in progress is the
// driver's CUDA_ERROR_CAPTURED_EVENT, ErrCaptureIsolation, in either capture
// mode and ahead of the global-mode rule; as every invalid call during a
// capture does, it invalidates that capture. The call is also a host wait
// during a capture, so global-mode captures are invalidated as well.
func (e *Event) hostWaitable(op string) error {
	d := e.dev
	if err := d.enter(op); err != nil {
		return err
	}
	if err := e.use(op); err != nil {
		d.exit()
		return err
	}
	fail := func(err error) error {
		e.leave()
		return err
	}
	if c := e.inCapture.Load(); c != nil {
		d.invalidate(c, fmt.Sprintf("%s was called on an event recorded inside the capture on %s, by %s", op, c.origin.label(), device.Culprit(0)))
		_ = d.checkUnsafe(op)
		return fail(device.Errorf(d.name, op, device.ErrCaptureIsolation,
			"the event was last recorded inside a capture in progress; the host cannot wait on it, and the capture is invalidated"))
	}
	if err := d.checkUnsafe(op); err != nil {
		return fail(err)
	}
	return nil
}

// leave ends a call begun by hostWaitable.
func (e *Event) leave() {
	e.mu.RUnlock()
	e.dev.exit()
}

// Destroy releases the event once calls on it in progress on other
// goroutines return; calls after it fail with ErrClosed. Destroying it
// again is a no-op.
func (e *Event) Destroy() error {
	const op = "Event.Destroy"
	d := e.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.destroyed {
		return nil
	}
	e.destroyed = true
	d.mu.Lock()
	delete(d.events, e)
	d.mu.Unlock()
	ev := e.ev
	return d.wrap(op, cu.DestroyEvent(&ev))
}

// Graph is a captured CUDA graph.
type Graph struct {
	dev   *Device
	g     graphHandle
	nodes int
	refs  []*deviceAlloc // held; guarded by Device.mu

	// mu serialises every driver call on the graph (Instantiate, an
	// executable's Update from it, Destroy): the driver documents graph
	// objects as not internally synchronised, even for calls that look
	// read-only such as cuGraphInstantiate ("Graph object thread safety").
	mu        sync.Mutex
	destroyed bool // guarded by mu
}

// lock takes g.mu for a driver call on the graph, or fails with ErrClosed
// when the graph was destroyed. On success the caller calls g.mu.Unlock.
func (g *Graph) lock(op string) error {
	g.mu.Lock()
	if g.destroyed {
		g.mu.Unlock()
		return g.dev.released(op, "graph")
	}
	return nil
}

// Nodes is the number of nodes in the graph.
func (g *Graph) Nodes() int { return g.nodes }

// Destroy releases the graph; executables made from it stay valid. It
// waits for calls on the graph in progress; calls after it fail with
// ErrClosed. Destroying it again is a no-op.
func (g *Graph) Destroy() error {
	const op = "Graph.Destroy"
	d := g.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.destroyed {
		return nil
	}
	g.destroyed = true
	d.mu.Lock()
	delete(d.graphs, g)
	back := d.releaseLocked(g.refs)
	g.refs = nil
	d.mu.Unlock()
	d.graphMu.Lock()
	r := graphDestroy(g.g)
	d.graphMu.Unlock()
	if r != cuSuccess {
		return errors.Join(d.driver(op, r), d.giveBack(op, back))
	}
	return d.giveBack(op, back)
}

// Exec is an instantiated CUDA graph.
type Exec struct {
	dev   *Device
	e     execHandle
	nodes int
	refs  []*deviceAlloc // held; guarded by Device.mu

	// mu serialises every driver call on the executable (Launch, Upload,
	// Update, Destroy), as for Graph.mu: an update never races a launch,
	// and Destroy never frees a handle a launch is using.
	mu        sync.Mutex
	destroyed bool // guarded by mu
}

// lock takes x.mu for a driver call on the executable, or fails with
// ErrClosed when it was destroyed. On success the caller calls x.mu.Unlock.
func (x *Exec) lock(op string) error {
	x.mu.Lock()
	if x.destroyed {
		x.mu.Unlock()
		return x.dev.released(op, "executable")
	}
	return nil
}

// Nodes is the number of nodes launched per Launch.
func (x *Exec) Nodes() int { return x.nodes }

// Update swaps in the node parameters of g (cuGraphExecUpdate). When the
// driver refuses (different topology, kernels or node types) it returns
// ErrTopologyChanged and the executable is unchanged; the caller
// re-instantiates. It holds the executable's lock, then the graph's, so no
// launch of the executable runs meanwhile.
func (x *Exec) Update(g device.Graph) error {
	const op = "Exec.Update"
	d := x.dev
	gr, err := d.ownGraph(op, g)
	if err != nil {
		return err
	}
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if err := x.lock(op); err != nil {
		return err
	}
	defer x.mu.Unlock()
	if err := gr.lock(op); err != nil {
		return err
	}
	defer gr.mu.Unlock()
	d.graphMu.Lock()
	r, result, entry := graphExecUpdate(x.e, gr.g, false)
	d.graphMu.Unlock()
	if r == cuErrGraphExecUpdateFailure || (r == cuSuccess && result != 0) {
		return device.Errorf(d.name, op, device.ErrTopologyChanged, "%s (%s)", graphUpdateResultName(result), entry)
	}
	if r != cuSuccess {
		return d.driver(op, r)
	}
	// The executable now refers to g's buffers, no longer to its old ones.
	d.mu.Lock()
	old := x.refs
	x.refs = append([]*deviceAlloc(nil), gr.refs...)
	holdAllLocked(x.refs)
	back := d.releaseLocked(old)
	d.mu.Unlock()
	return d.giveBack(op, back)
}

// Upload prepares the executable's first launch on s (cuGraphUpload).
func (x *Exec) Upload(s device.Stream) error {
	const op = "Exec.Upload"
	d := x.dev
	st, err := d.ownStream(op, s)
	if err != nil {
		return err
	}
	return st.enqueue(op, func() error {
		if err := x.lock(op); err != nil {
			return err
		}
		defer x.mu.Unlock()
		d.graphMu.Lock()
		r := graphUpload(x.e, st.cu)
		d.graphMu.Unlock()
		if r != cuSuccess {
			return d.driver(op, r)
		}
		return nil
	})
}

// Destroy releases the executable once a launch, upload or update of it in
// progress returns; calls after it fail with ErrClosed. Destroying it again
// is a no-op.
func (x *Exec) Destroy() error {
	const op = "Exec.Destroy"
	d := x.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.destroyed {
		return nil
	}
	x.destroyed = true
	d.mu.Lock()
	delete(d.execs, x)
	back := d.releaseLocked(x.refs)
	x.refs = nil
	d.mu.Unlock()
	// Put off while a stream captures (fence_cuda.go).
	return errors.Join(d.destroyExec(op, x.e), d.giveBack(op, back))
}

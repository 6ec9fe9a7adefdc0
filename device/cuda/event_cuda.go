//go:build cuda

package cuda

import (
	"fmt"
	"sync/atomic"

	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

// Event is a CUDA event: with timing (NewTimingEvent) or without (NewEvent).
type Event struct {
	dev       *Device
	ev        cu.Event
	timing    bool // created without CU_EVENT_DISABLE_TIMING
	destroyed atomic.Bool
	recorded  atomic.Bool             // recorded outside a capture at least once
	inCapture atomic.Pointer[capture] // the capture in progress holding the latest Record
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
	defer d.exit()
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
	defer d.exit()
	return d.wrap(op, e.ev.Synchronize())
}

// hostWaitable enters a device call for a host wait on e; on success the
// caller must call exit.
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
	fail := func(err error) error {
		d.exit()
		return err
	}
	if e.destroyed.Load() {
		return fail(d.released(op, "event"))
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

// Destroy releases the event; destroying it again is a no-op.
func (e *Event) Destroy() error {
	const op = "Event.Destroy"
	d := e.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if !e.destroyed.CompareAndSwap(false, true) {
		return nil
	}
	d.mu.Lock()
	delete(d.events, e)
	d.mu.Unlock()
	ev := e.ev
	return d.wrap(op, cu.DestroyEvent(&ev))
}

// Graph is a captured CUDA graph.
type Graph struct {
	dev       *Device
	g         graphHandle
	nodes     int
	destroyed atomic.Bool
	refs      []*deviceAlloc // held; guarded by Device.mu
}

// Nodes is the number of nodes in the graph.
func (g *Graph) Nodes() int { return g.nodes }

// Destroy releases the graph; executables made from it stay valid.
// Destroying it again is a no-op.
func (g *Graph) Destroy() error {
	const op = "Graph.Destroy"
	d := g.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if !g.destroyed.CompareAndSwap(false, true) {
		return nil
	}
	d.mu.Lock()
	delete(d.graphs, g)
	d.releaseLocked(g.refs)
	g.refs = nil
	d.mu.Unlock()
	if r := graphDestroy(g.g); r != cuSuccess {
		return d.driver(op, r)
	}
	return nil
}

// Exec is an instantiated CUDA graph.
type Exec struct {
	dev       *Device
	e         execHandle
	nodes     int
	destroyed atomic.Bool
	refs      []*deviceAlloc // held; guarded by Device.mu
}

// Nodes is the number of nodes launched per Launch.
func (x *Exec) Nodes() int { return x.nodes }

// Update swaps in the node parameters of g (cuGraphExecUpdate). When the
// driver refuses (different topology, kernels or node types) it returns
// ErrTopologyChanged and the executable is unchanged; the caller
// re-instantiates.
func (x *Exec) Update(g device.Graph) error {
	const op = "Exec.Update"
	d := x.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if x.destroyed.Load() {
		return d.released(op, "executable")
	}
	gr, err := d.ownGraph(op, g)
	if err != nil {
		return err
	}
	r, result := graphExecUpdate(x.e, gr.g)
	if r == cuErrGraphExecUpdateFailure || (r == cuSuccess && result != 0) {
		return device.Errorf(d.name, op, device.ErrTopologyChanged, "%s", graphUpdateResultName(result))
	}
	if r != cuSuccess {
		return d.driver(op, r)
	}
	// The executable now refers to g's buffers, no longer to its old ones.
	d.mu.Lock()
	old := x.refs
	x.refs = append([]*deviceAlloc(nil), gr.refs...)
	holdAllLocked(x.refs)
	d.releaseLocked(old)
	d.mu.Unlock()
	return nil
}

// Upload prepares the executable's first launch on s (cuGraphUpload).
func (x *Exec) Upload(s device.Stream) error {
	const op = "Exec.Upload"
	d := x.dev
	st, err := d.ownStream(op, s)
	if err != nil {
		return err
	}
	if x.destroyed.Load() {
		return d.released(op, "executable")
	}
	return st.enqueue(op, func() error {
		if r := graphUpload(x.e, st.cu); r != cuSuccess {
			return d.driver(op, r)
		}
		return nil
	})
}

// Destroy releases the executable; destroying it again is a no-op.
func (x *Exec) Destroy() error {
	const op = "Exec.Destroy"
	d := x.dev
	if err := d.enter(op); err != nil {
		return err
	}
	defer d.exit()
	if !x.destroyed.CompareAndSwap(false, true) {
		return nil
	}
	d.mu.Lock()
	delete(d.execs, x)
	d.releaseLocked(x.refs)
	x.refs = nil
	d.mu.Unlock()
	if r := graphExecDestroy(x.e); r != cuSuccess {
		return d.driver(op, r)
	}
	return nil
}

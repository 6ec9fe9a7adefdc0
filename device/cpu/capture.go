package cpu

import (
	"fmt"
	"sync"

	"github.com/tolaria-ml/tolaria/device"
)

// capture is a stream capture in progress.
type capture struct {
	stream *stream
	mode   device.CaptureMode

	mu      sync.Mutex
	nodes   []node
	invalid string // why the capture was invalidated; "" while valid
	events  []*event
}

func (c *capture) invalidate(why string) {
	c.mu.Lock()
	if c.invalid == "" {
		c.invalid = why
	}
	c.mu.Unlock()
}

func (c *capture) check(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.invalid != "" {
		return c.stream.err(op, device.ErrCaptureInvalidated, "%s", c.invalid)
	}
	return nil
}

func (c *capture) add(op string, n node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.invalid != "" {
		return c.stream.err(op, device.ErrCaptureInvalidated, "%s", c.invalid)
	}
	c.nodes = append(c.nodes, n)
	return nil
}

func (c *capture) track(e *event) {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
}

// BeginCapture starts recording the stream's work into a graph.
func (s *stream) BeginCapture(mode device.CaptureMode) error {
	if mode != device.CaptureGlobal && mode != device.CaptureRelaxed {
		return s.err("BeginCapture", device.ErrMisuse, "unknown capture mode %d", mode)
	}
	if s.legacy {
		return s.err("BeginCapture", device.ErrMisuse, "the legacy default stream cannot be captured")
	}
	s.mu.Lock()
	if s.capture != nil {
		s.mu.Unlock()
		return s.err("BeginCapture", device.ErrMisuse, "stream %d is already capturing", s.id)
	}
	if s.stopped {
		s.mu.Unlock()
		return s.stoppedErr("BeginCapture")
	}
	c := &capture{stream: s, mode: mode}
	s.capture = c
	s.mu.Unlock()
	if mode == device.CaptureGlobal {
		s.dev.mu.Lock()
		s.dev.captures[c] = struct{}{}
		s.dev.mu.Unlock()
	}
	return nil
}

// EndCapture stops recording and returns the graph, or the reason the
// capture was invalidated.
func (s *stream) EndCapture() (device.Graph, error) {
	s.mu.Lock()
	c := s.capture
	s.capture = nil
	s.mu.Unlock()
	if c == nil {
		return nil, s.err("EndCapture", device.ErrMisuse, "stream %d is not capturing", s.id)
	}
	s.dev.mu.Lock()
	delete(s.dev.captures, c)
	s.dev.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		e.mu.Lock()
		if e.capture == c {
			e.capture = nil
		}
		e.mu.Unlock()
	}
	if c.invalid != "" {
		return nil, s.err("EndCapture", device.ErrCaptureInvalidated, "%s", c.invalid)
	}
	return &graph{dev: s.dev, nodes: c.nodes}, nil
}

// IsCapturing reports whether the stream is capturing. It is always safe.
func (s *stream) IsCapturing() (bool, error) {
	s.mu.Lock()
	stopped, c := s.stopped, s.capture
	s.mu.Unlock()
	if stopped {
		return false, s.stoppedErr("IsCapturing")
	}
	return c != nil, nil
}

// graph is a captured sequence of nodes. A stream capture yields a chain,
// so topology is the sequence of node kinds.
type graph struct {
	dev   *Device
	mu    sync.Mutex
	nodes []node
	freed bool
}

func (g *graph) Nodes() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.nodes)
}

func (g *graph) Destroy() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.freed = true
	return nil
}

func (d *Device) graph(op string, x device.Graph) ([]node, error) {
	g, ok := x.(*graph)
	if !ok || g == nil || g.dev != d {
		return nil, d.err(op, device.ErrMisuse, "graph was not captured on this device")
	}
	if err := d.closedErr(op); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed {
		return nil, d.err(op, device.ErrClosed, "graph destroyed")
	}
	return g.nodes, nil
}

// exec is an instantiated graph.
type exec struct {
	dev   *Device
	mu    sync.Mutex
	nodes []node
	// launch runs nodes; it is made with them, so that Launch enqueues
	// without allocating, and a launch enqueued before an Update keeps
	// running the nodes it was enqueued with.
	launch node
	freed  bool
	order  launchOrder
}

// launchOrder runs the launches of one executable one at a time, in the
// order they were enqueued, on whatever streams: each is ordered behind
// the previous one, as cuGraphLaunch orders launches of one executable.
// Without it two streams could run one executable's kernels at once, and
// its kernels keep state of their own between their parts (a clip's
// sums). Tickets are issued as launches join a stream's queue, under that
// stream's lock; a launch runs once every earlier ticket's has finished.
// Every enqueued launch runs (a destroyed stream drains its queue), so
// every ticket is reached.
type launchOrder struct {
	mu     sync.Mutex
	turn   sync.Cond // on mu
	issued uint64    // tickets handed out
	done   uint64    // launches finished: the ticket whose turn it is
}

// issue hands out the next ticket.
func (o *launchOrder) issue() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.issued
	o.issued++
	return t
}

// run runs the launch n when its ticket's turn comes.
func (o *launchOrder) run(n node, t *team) {
	o.mu.Lock()
	for o.done != n.ticket {
		o.turn.Wait()
	}
	o.mu.Unlock()
	n.run(t)
	o.mu.Lock()
	o.done++
	o.turn.Broadcast()
	o.mu.Unlock()
}

// launchNode is the node that runs nodes in order as one unit.
func launchNode(nodes []node) node {
	return node{kind: "graph", run: func(t *team) {
		for _, n := range nodes {
			n.run(t)
		}
	}}
}

// Instantiate makes an executable from a graph.
func (d *Device) Instantiate(x device.Graph) (device.Exec, error) {
	nodes, err := d.graph("Instantiate", x)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, d.err("Instantiate", device.ErrMisuse, "graph is empty")
	}
	e := &exec{dev: d, nodes: nodes, launch: launchNode(nodes)}
	e.order.turn.L = &e.order.mu
	return e, nil
}

func (e *exec) snapshot(op string) (node, error) {
	if err := e.dev.closedErr(op); err != nil {
		return node{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.freed {
		return node{}, e.dev.err(op, device.ErrClosed, "executable destroyed")
	}
	return e.launch, nil
}

// Update takes g's node parameters when its topology matches.
func (e *exec) Update(x device.Graph) error {
	nodes, err := e.dev.graph("Exec.Update", x)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.freed {
		return e.dev.err("Exec.Update", device.ErrClosed, "executable destroyed")
	}
	if why := sameTopology(e.nodes, nodes); why != "" {
		return e.dev.err("Exec.Update", device.ErrTopologyChanged, "%s", why)
	}
	e.nodes, e.launch = nodes, launchNode(nodes)
	return nil
}

func sameTopology(a, b []node) string {
	if len(a) != len(b) {
		return fmt.Sprintf("executable has %d nodes, graph has %d", len(a), len(b))
	}
	for i := range a {
		if a[i].kind != b[i].kind {
			return fmt.Sprintf("node %d is %s in the executable and %s in the graph", i, a[i].kind, b[i].kind)
		}
	}
	return ""
}

// Upload is a no-op on the CPU device: executables need no preparation.
// It fails with ErrClosed for a destroyed executable or stream.
func (e *exec) Upload(x device.Stream) error {
	if _, err := e.snapshot("Exec.Upload"); err != nil {
		return err
	}
	if s, ok := x.(*stream); ok && s != nil {
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			return s.stoppedErr("Upload")
		}
	}
	return nil
}

func (e *exec) Nodes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.nodes)
}

func (e *exec) Destroy() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.freed = true
	return nil
}

// Launch enqueues the executable as one unit: one hand-off to the stream
// goroutine for the whole graph, which is what replay saves over eager
// dispatch. Later updates do not affect a launch already enqueued.
func (s *stream) Launch(x device.Exec) error {
	e, ok := x.(*exec)
	if !ok || e == nil || e.dev != s.dev {
		return s.err("Launch", device.ErrMisuse, "executable was not instantiated on this device")
	}
	n, err := e.snapshot("Stream.Launch")
	if err != nil {
		return err
	}
	n.exec = e
	return s.enqueue("Launch", n)
}

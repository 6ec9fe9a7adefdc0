// Package graphs captures a step's device work into a graph, instantiates
// it and replays it with one launch. Its Pool is shared by every trainer of
// a process: it keeps workspace memory and instantiated executables per
// device and step signature, so a later capture of the same step allocates
// nothing and updates an executable in place instead of instantiating one.
// Its Engine is the step engine the trainer and the bench share: one step
// per static input buffer, captured together, then replayed, or run
// eagerly with the reason for the caller to count.
package graphs

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// StepFunc enqueues one step's work on s. Under capture it must follow the
// capture rules: no allocation, no synchronisation, no host reads.
type StepFunc func(s device.Stream) error

// WarmUp runs step eagerly n times on s and waits for it, so that every
// buffer the step touches exists and has been used before capture.
func WarmUp(s device.Stream, n int, step StepFunc) error {
	for i := range n {
		if err := step(s); err != nil {
			return fmt.Errorf("graphs: warm-up step %d of %d: %w", i+1, n, err)
		}
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("graphs: warm-up: %w", err)
	}
	return nil
}

// Capture records step on s in global capture mode and returns the graph.
// If the step fails, the capture is still ended so the stream is usable.
func Capture(s device.Stream, step StepFunc) (device.Graph, error) {
	if err := s.BeginCapture(device.CaptureGlobal); err != nil {
		return nil, fmt.Errorf("graphs: begin capture: %w", err)
	}
	stepErr := step(s)
	g, endErr := s.EndCapture()
	if stepErr != nil {
		if g != nil {
			_ = g.Destroy()
		}
		return nil, fmt.Errorf("graphs: capture: %w", errors.Join(stepErr, endErr))
	}
	if endErr != nil {
		return nil, fmt.Errorf("graphs: end capture: %w", endErr)
	}
	return g, nil
}

// Stats are the pool's counters since it was made.
type Stats struct {
	Captures         uint64  // graphs captured
	Instantiations   uint64  // executables instantiated
	Updates          uint64  // executables updated in place from a new capture
	UpdatesRefused   uint64  // updates refused for a topology change (then re-instantiated)
	Replays          uint64  // launches through Lease.Replay
	ColdCaptures     uint64  // captures that needed an instantiation
	PooledCaptures   uint64  // captures served by updating a pooled executable
	ColdSeconds      float64 // total time of cold captures (capture + instantiate + upload)
	PooledSeconds    float64 // total time of pooled captures (capture + update)
	WorkspaceAllocs  uint64  // workspace buffers allocated
	ReservedBytes    int64   // device memory the pool's workspace holds, leased or free (each buffer rounded up to the device's granule)
	LeasedEntries    int     // entries held by leases now
	FreeEntries      int     // entries ready for the next Acquire
	LastCaptureNodes int     // nodes in the latest captured graph
}

type key struct {
	dev device.Device
	sig string
}

// entry is one set of workspace buffers and the executables captured
// against them, one per slot (for example one per staging input buffer).
type entry struct {
	key       key
	sizes     []int
	workspace []device.Buffer
	execs     map[int]device.Exec
}

// Pool is the shared graph pool. It is safe for concurrent use.
type Pool struct {
	mu     sync.Mutex
	free   map[key][]*entry
	leased map[*entry]bool
	stats  Stats
}

// NewPool returns an empty pool.
func NewPool() *Pool {
	return &Pool{free: make(map[key][]*entry), leased: make(map[*entry]bool)}
}

// Stats returns a snapshot of the counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.LeasedEntries = len(p.leased)
	for _, es := range p.free {
		s.FreeEntries += len(es)
	}
	return s
}

// Prewarm allocates n entries of workspace for dev and signature sig ahead
// of the first trainer, so that start-up pays for memory once.
func (p *Pool) Prewarm(dev device.Device, sig string, sizes []int, n int) error {
	for range n {
		e, err := p.newEntry(key{dev, sig}, sizes)
		if err != nil {
			return err
		}
		p.mu.Lock()
		if p.free == nil {
			p.mu.Unlock()
			return errors.Join(errPoolClosed, p.destroy(e))
		}
		p.free[e.key] = append(p.free[e.key], e)
		p.mu.Unlock()
	}
	return nil
}

var errPoolClosed = errors.New("graphs: the pool is closed")

func (p *Pool) newEntry(k key, sizes []int) (*entry, error) {
	e := &entry{key: k, sizes: append([]int(nil), sizes...), execs: make(map[int]device.Exec)}
	var bytes int64
	for i, n := range sizes {
		b, err := k.dev.Alloc(n)
		if err != nil {
			for _, w := range e.workspace {
				_ = k.dev.Free(w)
			}
			return nil, fmt.Errorf("graphs: pool workspace buffer %d (%d elements) for %q: %w", i, n, k.sig, err)
		}
		e.workspace = append(e.workspace, b)
		bytes += device.AllocBytes(k.dev, n)
	}
	p.mu.Lock()
	p.stats.WorkspaceAllocs += uint64(len(sizes))
	p.stats.ReservedBytes += bytes
	p.mu.Unlock()
	return e, nil
}

func sameSizes(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Acquire leases an entry for dev and signature sig with workspace buffers
// of the given sizes (in float32 elements). A free entry is reused when
// there is one; otherwise new workspace is allocated. The signature must
// determine the sizes: a mismatch is a programming error and is reported.
func (p *Pool) Acquire(dev device.Device, sig string, sizes []int) (*Lease, error) {
	k := key{dev, sig}
	p.mu.Lock()
	if p.free == nil {
		p.mu.Unlock()
		return nil, errPoolClosed
	}
	if es := p.free[k]; len(es) > 0 {
		e := es[len(es)-1]
		p.free[k] = es[:len(es)-1]
		if !sameSizes(e.sizes, sizes) {
			p.free[k] = append(p.free[k], e)
			p.mu.Unlock()
			return nil, fmt.Errorf("graphs: signature %q was pooled with workspace sizes %v, now asked for %v; the signature must determine the sizes", sig, e.sizes, sizes)
		}
		p.leased[e] = true
		p.mu.Unlock()
		return &Lease{pool: p, entry: e}, nil
	}
	p.mu.Unlock()
	e, err := p.newEntry(k, sizes)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.leased[e] = true
	p.mu.Unlock()
	return &Lease{pool: p, entry: e}, nil
}

// Close releases every free entry's memory and executables. Leased entries
// are released when their lease is (after Close, a released lease frees its
// entry instead of pooling it).
func (p *Pool) Close() error {
	p.mu.Lock()
	var all []*entry
	for k, es := range p.free {
		all = append(all, es...)
		delete(p.free, k)
	}
	p.free = nil
	p.mu.Unlock()
	var errs []error
	for _, e := range all {
		errs = append(errs, p.destroy(e))
	}
	return errors.Join(errs...)
}

// Drop frees the pooled entries of dev: their executables and workspace.
// Call it before closing a device the pool has served, once every lease on
// it is released, so that the pool holds nothing of a closed device.
func (p *Pool) Drop(dev device.Device) error {
	p.mu.Lock()
	var drop []*entry
	for k, es := range p.free {
		if k.dev == dev {
			drop = append(drop, es...)
			delete(p.free, k)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, e := range drop {
		errs = append(errs, p.destroy(e))
	}
	return errors.Join(errs...)
}

// Retain frees the pooled entries of dev whose signature is not sig:
// their executables and workspace. A process that keeps a device for
// successive jobs (a kept worker) calls it before each job, so that the
// pool holds only what the job's bill counts: the workspace of its own
// step, which its captures then update instead of instantiating. Leased
// entries are not touched.
func (p *Pool) Retain(dev device.Device, sig string) error {
	p.mu.Lock()
	var drop []*entry
	for k, es := range p.free {
		if k.dev == dev && k.sig != sig {
			drop = append(drop, es...)
			delete(p.free, k)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, e := range drop {
		errs = append(errs, p.destroy(e))
	}
	return errors.Join(errs...)
}

// Holds reports whether the pool has a free entry for dev and signature
// sig: the next Acquire of it allocates nothing, and captures into it
// update executables already instantiated.
func (p *Pool) Holds(dev device.Device, sig string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free[key{dev, sig}]) > 0
}

func (p *Pool) destroy(e *entry) error {
	var errs []error
	for _, x := range e.execs {
		errs = append(errs, x.Destroy())
	}
	var bytes int64
	for _, b := range e.workspace {
		errs = append(errs, e.key.dev.Free(b))
		bytes += device.AllocBytes(e.key.dev, b.Len())
	}
	p.mu.Lock()
	p.stats.ReservedBytes -= bytes
	p.mu.Unlock()
	return errors.Join(errs...)
}

// Lease is a trainer's hold on one pool entry.
type Lease struct {
	pool  *Pool
	entry *entry
	once  sync.Once
}

// Workspace returns the entry's workspace buffers, in the order of the
// sizes given to Acquire. They keep their addresses for the lease's life
// and across leases, which is what lets a new capture update an old
// executable.
func (l *Lease) Workspace() []device.Buffer { return l.entry.workspace }

// CaptureResult describes one capture.
type CaptureResult struct {
	Seconds float64 // capture plus instantiate (cold) or update (pooled)
	Pooled  bool    // an existing executable was updated; nothing was instantiated
	Nodes   int     // nodes in the captured graph
	// Leftover is set when the executable is made but the captured graph,
	// no longer needed, could not be destroyed (it may stay allocated):
	// worth a warning, not a failed capture.
	Leftover error
}

// Capture records step on s and makes it the executable for slot: by
// updating the entry's executable for that slot when the topology allows,
// otherwise by instantiating a new one. The executable is uploaded to s.
func (l *Lease) Capture(s device.Stream, slot int, step StepFunc) (res CaptureResult, err error) {
	start := time.Now()
	g, err := Capture(s, step)
	if err != nil {
		return CaptureResult{}, err
	}
	defer func() {
		if derr := g.Destroy(); derr != nil && err == nil {
			res.Leftover = fmt.Errorf("graphs: destroying the captured graph of slot %d: %w", slot, derr)
		}
	}()
	res = CaptureResult{Nodes: g.Nodes()}
	p := l.pool
	p.mu.Lock()
	p.stats.Captures++
	p.stats.LastCaptureNodes = res.Nodes
	p.mu.Unlock()

	if x, ok := l.entry.execs[slot]; ok {
		err := x.Update(g)
		if err == nil {
			res.Pooled = true
			res.Seconds = time.Since(start).Seconds()
			p.mu.Lock()
			p.stats.Updates++
			p.stats.PooledCaptures++
			p.stats.PooledSeconds += res.Seconds
			p.mu.Unlock()
			return res, nil
		}
		if !errors.Is(err, device.ErrTopologyChanged) {
			return CaptureResult{}, fmt.Errorf("graphs: update executable for slot %d: %w", slot, err)
		}
		p.mu.Lock()
		p.stats.UpdatesRefused++
		p.mu.Unlock()
		_ = x.Destroy()
		delete(l.entry.execs, slot)
	}
	x, err := l.entry.key.dev.Instantiate(g)
	if err != nil {
		return CaptureResult{}, fmt.Errorf("graphs: instantiate slot %d: %w", slot, err)
	}
	if err := x.Upload(s); err != nil {
		_ = x.Destroy()
		return CaptureResult{}, fmt.Errorf("graphs: upload slot %d: %w", slot, err)
	}
	l.entry.execs[slot] = x
	res.Seconds = time.Since(start).Seconds()
	p.mu.Lock()
	p.stats.Instantiations++
	p.stats.ColdCaptures++
	p.stats.ColdSeconds += res.Seconds
	p.mu.Unlock()
	return res, nil
}

// Ready reports whether slot has an executable.
func (l *Lease) Ready(slot int) bool {
	_, ok := l.entry.execs[slot]
	return ok
}

// Replay launches slot's executable on s.
func (l *Lease) Replay(s device.Stream, slot int) error {
	x, ok := l.entry.execs[slot]
	if !ok {
		return fmt.Errorf("graphs: no executable captured for slot %d", slot)
	}
	if err := s.Launch(x); err != nil {
		return fmt.Errorf("graphs: replay slot %d: %w", slot, err)
	}
	l.pool.mu.Lock()
	l.pool.stats.Replays++
	l.pool.mu.Unlock()
	return nil
}

// Discard drops slot's executable, for example after a device error made
// it suspect; the next Capture of the slot instantiates afresh.
func (l *Lease) Discard(slot int) {
	if x, ok := l.entry.execs[slot]; ok {
		_ = x.Destroy()
		delete(l.entry.execs, slot)
	}
}

// Release returns the entry to the pool for the next trainer with the
// same signature. The caller must make sure no launched work still uses
// the workspace (synchronise the streams that used it first).
func (l *Lease) Release() error {
	var err error
	l.once.Do(func() {
		p := l.pool
		p.mu.Lock()
		delete(p.leased, l.entry)
		if p.free != nil {
			p.free[l.entry.key] = append(p.free[l.entry.key], l.entry)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		err = p.destroy(l.entry)
	})
	return err
}

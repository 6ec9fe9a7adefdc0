package cuda

import (
	"errors"
	"fmt"
	"sync"
)

// poolGranule is the rounding of pool blocks: cuMemAlloc aligns to at least
// 256 bytes, and rounding to 512 lets nearby sizes share cached blocks.
const poolGranule = 512

// errPoolLimit: the allocation would exceed Config.MemoryLimit.
var errPoolLimit = errors.New("exceeds the configured memory limit")

// errNotInUse: put of a block the pool did not hand out.
var errNotInUse = errors.New("is not in use")

// pool is the device-memory pool: it rounds requests up to poolGranule,
// keeps freed blocks by size and hands them out again, so that allocations
// after warm-up (a second trainer, re-created buffers) do not reach the
// driver. Blocks go back to the driver when the limit or the driver asks for
// room, and at Close. The driver calls are injected so the bookkeeping is
// tested without a GPU.
//
// Beside a capture the pool arms and asks no fence, and makes no deferred
// call (outsideCapture): recording an event on a capturing stream, or
// querying or waiting for any event during a global-mode capture, would
// break the capture (fence_cuda.go). A block given back meanwhile waits,
// unarmed, for the pool's first call with no capture in progress. gate
// keeps captures from beginning while the pool is in such a call.
type pool struct {
	limit   int64                              // bytes that may be in use; 0: none
	alloc   func(bytes int64) (uintptr, error) // cuMemAlloc
	release func(addr uintptr) error           // cuMemFree
	// capturing reports whether a stream capture is in progress (nil:
	// never). Called with mu held; a capture begins only through gate.
	capturing func() bool

	mu    sync.Mutex
	cache map[int64][]uintptr // freed blocks by rounded size
	// pending are freed blocks whose fence has not passed: work queued
	// before their Free may still use them, so they are not handed out.
	pending []pendingBlock
	// late are calls outsideCapture put off until no capture runs.
	late     []lateCall
	live     map[uintptr]int64 // rounded size of blocks handed out
	cached   int64             // bytes in cache
	reserved int64             // bytes held from the driver: live and cached
	inUse    int64             // requested bytes handed out
	peak     int64
	allocs   uint64
}

func newPool(limit int64, alloc func(int64) (uintptr, error), release func(uintptr) error) *pool {
	return &pool{
		limit:   limit,
		alloc:   alloc,
		release: release,
		cache:   map[int64][]uintptr{},
		live:    map[uintptr]int64{},
	}
}

// fence is what must pass before a freed block's memory may be handed out
// again: the work queued, on every stream, before its Free. The pool calls
// passed and wait only while no capture is in progress.
type fence interface {
	// passed reports, without waiting, whether that work has run. An error
	// (the device is broken) is returned, never taken for "passed": the
	// block then stays out of use.
	passed() (bool, error)
	// wait blocks until that work has run, or fails.
	wait() error
	// drop lets go of what the fence holds without waiting: the device is
	// idle, or being closed.
	drop()
}

// pendingBlock is a freed block waiting for its fence.
type pendingBlock struct {
	addr uintptr
	size int64
	f    fence
}

// lateCall is a call put off until no capture runs, and what made it.
type lateCall struct {
	op   string
	call func() error
}

// quietLocked reports whether no capture is in progress: fences may be
// armed and asked, and put-off calls made.
func (p *pool) quietLocked() bool { return p.capturing == nil || !p.capturing() }

// gate runs begin, which begins a capture, with the pool locked, so that
// no fence is being armed or asked as the capture begins: an event
// recorded on the stream just as it starts capturing, or a query racing
// the start of a global-mode capture, would break it.
func (p *pool) gate(begin func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	begin()
}

// outsideCapture makes call (op names it in errors) now when no capture is
// in progress; otherwise it keeps it for the pool's first call with none,
// whose caller gets its error, or for releaseAll.
func (p *pool) outsideCapture(op string, call func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.quietLocked() {
		p.late = append(p.late, lateCall{op: op, call: call})
		return nil
	}
	return call()
}

// settleLocked makes the put-off calls once no capture is in progress.
func (p *pool) settleLocked() error {
	if len(p.late) == 0 || !p.quietLocked() {
		return nil
	}
	return p.runLateLocked()
}

func (p *pool) runLateLocked() error {
	var errs []error
	for _, l := range p.late {
		if err := l.call(); err != nil {
			errs = append(errs, fmt.Errorf("%s, put off until no stream captured: %w", l.op, err))
		}
	}
	p.late = nil
	return errors.Join(errs...)
}

func roundUp(bytes int64) int64 { return (bytes + poolGranule - 1) / poolGranule * poolGranule }

// get returns a block of at least bytes. A driver error is returned as is.
func (p *pool) get(bytes int64) (uintptr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limit > 0 && p.inUse+bytes > p.limit {
		return 0, fmt.Errorf("%d bytes in use + %d requested %w of %d bytes", p.inUse, bytes, errPoolLimit, p.limit)
	}
	size := roundUp(bytes)
	if err := errors.Join(p.settleLocked(), p.reapLocked(false)); err != nil {
		return 0, err
	}
	addr, ok := p.fromCache(size)
	if !ok {
		if p.limit > 0 && p.reserved+size > p.limit {
			// Room first from blocks whose work has run, then from the
			// ones still waiting for it (not during a capture: their
			// fences cannot be asked then).
			p.trimLocked()
			if p.reserved+size > p.limit && len(p.pending) > 0 {
				if err := p.reapLocked(true); err != nil {
					return 0, err
				}
				p.trimLocked()
			}
		}
		var err error
		addr, err = p.alloc(size)
		if err != nil && p.cached+p.pendingBytes() > 0 {
			// The driver is out of room; blocks of other sizes may free
			// it, once the work that used them has run.
			if rerr := p.reapLocked(true); rerr != nil {
				return 0, errors.Join(err, rerr)
			}
			p.trimLocked()
			addr, err = p.alloc(size)
		}
		if err != nil {
			return 0, err
		}
		p.reserved += size
	}
	p.live[addr] = size
	p.inUse += bytes
	p.peak = max(p.peak, p.inUse)
	p.allocs++
	return addr, nil
}

func (p *pool) fromCache(size int64) (uintptr, bool) {
	list := p.cache[size]
	if len(list) == 0 {
		return 0, false
	}
	addr := list[len(list)-1]
	p.cache[size] = list[:len(list)-1]
	p.cached -= size
	return addr, true
}

// put takes back a block handed out by get for bytes. With a fence, the
// block waits until the fence has passed before get hands it out again;
// without one (nil), the caller knows no work uses it. While a capture is
// in progress the fence is neither armed nor asked: the block waits for a
// pool call with no capture. The error of a fence that fails is returned,
// and its block stays out of use.
func (p *pool) put(addr uintptr, bytes int64, f fence) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	size, ok := p.live[addr]
	if !ok {
		return fmt.Errorf("block %#x %w", addr, errNotInUse)
	}
	delete(p.live, addr)
	p.inUse -= bytes
	if f == nil {
		p.cache[size] = append(p.cache[size], addr)
		p.cached += size
		return nil
	}
	if !p.quietLocked() {
		p.pending = append(p.pending, pendingBlock{addr: addr, size: size, f: f})
		return nil
	}
	settled := p.settleLocked()
	done, err := f.passed() // arms it now, so it waits for no more than it must
	if !done {
		p.pending = append(p.pending, pendingBlock{addr: addr, size: size, f: f})
		return errors.Join(settled, err)
	}
	p.cache[size] = append(p.cache[size], addr)
	p.cached += size
	return settled
}

// reapLocked moves the pending blocks whose fence has passed to the
// cache; with wait, it waits for every fence first. During a capture it
// does nothing. A fence that fails keeps its block, and the first such
// error is returned: an error is never taken for "passed".
func (p *pool) reapLocked(wait bool) error {
	if len(p.pending) == 0 || !p.quietLocked() {
		return nil
	}
	var first error
	kept := p.pending[:0]
	for _, b := range p.pending {
		var done bool
		var err error
		if wait {
			err = b.f.wait()
			done = err == nil
		} else {
			done, err = b.f.passed()
		}
		if err != nil && first == nil {
			first = err
		}
		if done {
			p.cache[b.size] = append(p.cache[b.size], b.addr)
			p.cached += b.size
			continue
		}
		kept = append(kept, b)
	}
	clear(p.pending[len(kept):])
	p.pending = kept
	return first
}

func (p *pool) pendingBytes() int64 {
	var n int64
	for _, b := range p.pending {
		n += b.size
	}
	return n
}

// trimLocked gives every cached block back to the driver. A block the
// driver refuses is dropped anyway: keeping it would only hide it.
func (p *pool) trimLocked() error {
	var first error
	for size, list := range p.cache {
		for _, addr := range list {
			if err := p.release(addr); err != nil && first == nil {
				first = err
			}
			p.reserved -= size
		}
		delete(p.cache, size)
	}
	p.cached = 0
	return first
}

// trim gives the cached blocks back to the driver, the pending ones too
// once the work that used them has run (cuMemFree would wait for it
// anyway); during a capture, the pending ones stay.
func (p *pool) trim() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.settleLocked(), p.reapLocked(true), p.trimLocked())
}

// releaseAll makes the put-off calls and gives every block, cached,
// pending or in use, back to the driver (Close, once the device is idle
// and no capture is left: no fence is waited for, and capturing is not
// asked, since Close holds what it would lock).
func (p *pool) releaseAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	lateErr := p.runLateLocked()
	for _, b := range p.pending {
		b.f.drop()
		p.cache[b.size] = append(p.cache[b.size], b.addr)
		p.cached += b.size
	}
	p.pending = nil
	first := p.trimLocked()
	for addr, size := range p.live {
		if err := p.release(addr); err != nil && first == nil {
			first = err
		}
		p.reserved -= size
		delete(p.live, addr)
	}
	p.inUse = 0
	return errors.Join(lateErr, first)
}

// poolStats is a snapshot of the pool's accounting.
type poolStats struct {
	inUse, peak, reserved, cached int64
	allocs                        uint64
}

func (p *pool) stats() poolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return poolStats{inUse: p.inUse, peak: p.peak, reserved: p.reserved, cached: p.cached + p.pendingBytes(), allocs: p.allocs}
}

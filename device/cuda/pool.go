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

// pool is the device-memory pool: it rounds requests up to poolGranule,
// keeps freed blocks by size and hands them out again, so that allocations
// after warm-up (a second trainer, re-created buffers) do not reach the
// driver. Blocks go back to the driver when the limit or the driver asks for
// room, and at Close. The driver calls are injected so the bookkeeping is
// tested without a GPU.
type pool struct {
	limit   int64                              // bytes that may be in use; 0: none
	alloc   func(bytes int64) (uintptr, error) // cuMemAlloc
	release func(addr uintptr) error           // cuMemFree

	mu    sync.Mutex
	cache map[int64][]uintptr // freed blocks by rounded size
	// pending are freed blocks whose fence has not passed: work queued
	// before their Free may still use them, so they are not handed out.
	pending  []pendingBlock
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
// again: the work queued, on every stream, before its Free.
type fence interface {
	// passed reports, without waiting, whether that work has run.
	passed() bool
	// wait blocks until it has.
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

func roundUp(bytes int64) int64 { return (bytes + poolGranule - 1) / poolGranule * poolGranule }

// get returns a block of at least bytes. A driver error is returned as is.
func (p *pool) get(bytes int64) (uintptr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limit > 0 && p.inUse+bytes > p.limit {
		return 0, fmt.Errorf("%d bytes in use + %d requested %w of %d bytes", p.inUse, bytes, errPoolLimit, p.limit)
	}
	size := roundUp(bytes)
	p.reapLocked(false)
	addr, ok := p.fromCache(size)
	if !ok {
		if p.limit > 0 && p.reserved+size > p.limit {
			// Room first from blocks whose work has run, then from the
			// ones still waiting for it.
			p.trimLocked()
			if p.reserved+size > p.limit && len(p.pending) > 0 {
				p.reapLocked(true)
				p.trimLocked()
			}
		}
		var err error
		addr, err = p.alloc(size)
		if err != nil && p.cached+p.pendingBytes() > 0 {
			// The driver is out of room; blocks of other sizes may free
			// it, once the work that used them has run.
			p.reapLocked(true)
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
// without one (nil), the caller knows no work uses it.
func (p *pool) put(addr uintptr, bytes int64, f fence) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	size, ok := p.live[addr]
	if !ok {
		return fmt.Errorf("block %#x is not in use", addr)
	}
	delete(p.live, addr)
	p.inUse -= bytes
	if f != nil && !f.passed() {
		p.pending = append(p.pending, pendingBlock{addr: addr, size: size, f: f})
		return nil
	}
	p.cache[size] = append(p.cache[size], addr)
	p.cached += size
	return nil
}

// reapLocked moves the pending blocks whose fence has passed to the
// cache; with wait, it waits for every fence first. A fence whose wait
// fails (the device is broken) counts as passed: nothing runs any more.
func (p *pool) reapLocked(wait bool) {
	kept := p.pending[:0]
	for _, b := range p.pending {
		if wait {
			_ = b.f.wait()
		}
		if wait || b.f.passed() {
			p.cache[b.size] = append(p.cache[b.size], b.addr)
			p.cached += b.size
			continue
		}
		kept = append(kept, b)
	}
	clear(p.pending[len(kept):])
	p.pending = kept
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
// anyway).
func (p *pool) trim() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reapLocked(true)
	return p.trimLocked()
}

// releaseAll gives every block, cached, pending or in use, back to the
// driver (Close, once the device is idle: no fence is waited for).
func (p *pool) releaseAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
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
	return first
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

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

	mu       sync.Mutex
	cache    map[int64][]uintptr // freed blocks by rounded size
	live     map[uintptr]int64   // rounded size of blocks handed out
	cached   int64               // bytes in cache
	reserved int64               // bytes held from the driver: live and cached
	inUse    int64               // requested bytes handed out
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

func roundUp(bytes int64) int64 { return (bytes + poolGranule - 1) / poolGranule * poolGranule }

// get returns a block of at least bytes. A driver error is returned as is.
func (p *pool) get(bytes int64) (uintptr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limit > 0 && p.inUse+bytes > p.limit {
		return 0, fmt.Errorf("%d bytes in use + %d requested %w of %d bytes", p.inUse, bytes, errPoolLimit, p.limit)
	}
	size := roundUp(bytes)
	addr, ok := p.fromCache(size)
	if !ok {
		if p.limit > 0 && p.reserved+size > p.limit {
			p.trimLocked()
		}
		var err error
		addr, err = p.alloc(size)
		if err != nil && p.cached > 0 {
			// The driver is out of room; blocks of other sizes may free it.
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

// put takes back a block handed out by get for bytes.
func (p *pool) put(addr uintptr, bytes int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	size, ok := p.live[addr]
	if !ok {
		return fmt.Errorf("block %#x is not in use", addr)
	}
	delete(p.live, addr)
	p.cache[size] = append(p.cache[size], addr)
	p.cached += size
	p.inUse -= bytes
	return nil
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

// trim gives the cached blocks back to the driver.
func (p *pool) trim() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.trimLocked()
}

// releaseAll gives every block, cached or in use, back to the driver (Close).
func (p *pool) releaseAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
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
	return poolStats{inUse: p.inUse, peak: p.peak, reserved: p.reserved, cached: p.cached, allocs: p.allocs}
}

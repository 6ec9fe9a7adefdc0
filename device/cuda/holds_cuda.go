//go:build cuda

package cuda

import "errors"

// A graph or executable holds the device addresses it was captured
// against. Freeing one of those buffers succeeds, but the pool must not hand
// its memory to another Alloc while a graph or executable that refers to it
// lives, or a launch would write into the new owner's buffer. So captures
// record the allocations their work names, graphs and executables hold
// them (holds), and Free parks a held block until the last holder is
// destroyed or, for an executable, updated away from it.

// note records that the capture in progress on s, if any, refers to a.
func (s *Stream) note(a *deviceAlloc) {
	c := s.capture.Load()
	if c == nil || a == nil {
		return
	}
	d := s.dev
	d.mu.Lock()
	if c.refs == nil {
		c.refs = map[*deviceAlloc]struct{}{}
	}
	c.refs[a] = struct{}{}
	d.mu.Unlock()
}

// holdLocked takes a hold on each allocation and returns them as a list.
func holdLocked(refs map[*deviceAlloc]struct{}) []*deviceAlloc {
	list := make([]*deviceAlloc, 0, len(refs))
	for a := range refs {
		a.holds++
		list = append(list, a)
	}
	return list
}

// holdAllLocked takes another hold on each allocation of list.
func holdAllLocked(list []*deviceAlloc) {
	for _, a := range list {
		a.holds++
	}
}

// releaseLocked drops one hold on each allocation of list and returns the
// parked blocks whose last hold this was, for giveBack once d.mu is
// unlocked.
func (d *Device) releaseLocked(list []*deviceAlloc) []*deviceAlloc {
	var back []*deviceAlloc
	for _, a := range list {
		a.holds--
		if a.holds == 0 && a.parked {
			a.parked = false
			back = append(back, a)
		}
	}
	return back
}

// giveBack returns freed blocks to the pool behind a fence: launches of the
// graph or executable that held them may still be running. It is safe
// beside a capture: the fence records and asks nothing until none runs.
func (d *Device) giveBack(op string, list []*deviceAlloc) error {
	if len(list) == 0 {
		return nil
	}
	f := d.fence(op)
	var errs []error
	for _, a := range list {
		// The pool handed the block out, so only the fence can fail.
		if err := d.pool.put(uintptr(a.ptr), int64(a.n)*4, f); err != nil {
			errs = append(errs, d.putErr(op, err))
		}
	}
	return errors.Join(errs...)
}

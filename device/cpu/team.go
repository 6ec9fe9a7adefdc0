package cpu

import "sync"

// A kernel splits its work into parts that the device's worker threads run
// at once. The split depends only on the kernel's arguments and the
// device's thread count, never on which goroutine runs which part or when,
// so a kernel gives the same bits on every run with the same thread count,
// and replay equals eager.
//
// The device has Threads-1 helper goroutines; the stream goroutine that
// runs a kernel is the last worker: it takes part 0 itself, then waits for
// the others. Streams running kernels at the same time share the helpers,
// so the device never has more than Threads kernel goroutines busy beyond
// its streams. Nothing here allocates: a kernel's parts are described by a
// value made when the kernel was enqueued (or captured), and a part is
// handed to a helper by value over a channel.

// task is a kernel split into parts; part(i, n) runs part i of n.
type task interface {
	part(i, n int)
}

// job is one part of a task, handed to a helper.
type job struct {
	t    task
	i, n int
	done *sync.WaitGroup
}

// helpers are the device's worker goroutines beyond the stream goroutines.
type helpers struct {
	threads int // the device's thread count, helpers included
	jobs    chan job
	wg      sync.WaitGroup
}

// startHelpers starts threads-1 helper goroutines; stop ends them.
func startHelpers(threads int) *helpers {
	h := &helpers{threads: threads, jobs: make(chan job, 4*threads)}
	for range threads - 1 {
		h.wg.Add(1)
		go h.loop()
	}
	return h
}

func (h *helpers) loop() {
	defer h.wg.Done()
	for j := range h.jobs {
		j.t.part(j.i, j.n)
		j.done.Done()
	}
}

// stop ends the helpers once every job handed to them has run. No kernel
// may run any more: the streams are stopped first.
func (h *helpers) stop() {
	close(h.jobs)
	h.wg.Wait()
}

// team is how one stream goroutine runs a kernel's parts: the device's
// helpers and the stream's own wait group (one per stream, because a
// stream runs one kernel at a time, while two streams may wait at once).
type team struct {
	h    *helpers
	done sync.WaitGroup
}

// threads is how many parts a kernel may usefully split into.
func (t *team) threads() int {
	if t == nil || t.h == nil {
		return 1
	}
	return t.h.threads
}

// run runs t's n parts and returns when all are done. n <= 1 runs the
// whole task on the calling goroutine.
func (t *team) run(k task, n int) {
	if n <= 1 || t.threads() == 1 {
		k.part(0, 1)
		return
	}
	t.done.Add(n - 1)
	for i := 1; i < n; i++ {
		t.h.jobs <- job{t: k, i: i, n: n, done: &t.done}
	}
	k.part(0, n)
	t.done.Wait()
}

// parts is how many parts to split work of the given size into: one per
// grain of work, at most one per thread.
func (t *team) parts(work, grain int) int {
	return max(1, min(t.threads(), work/grain))
}

// span returns part i of n of the range [0, total), in multiples of align
// except for the last part: parts differ by at most align.
func span(i, n, total, align int) (lo, hi int) {
	units := (total + align - 1) / align
	lo = min(total, (units*i/n)*align)
	hi = min(total, (units*(i+1)/n)*align)
	return lo, hi
}

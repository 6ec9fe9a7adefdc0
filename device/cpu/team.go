package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A kernel splits its work into parts that the device's worker threads run
// at once. The split depends only on the kernel's arguments and the
// device's thread count, never on which goroutine runs which part or when,
// so a kernel gives the same bits on every run with the same thread count,
// and replay equals eager.
//
// The device has Threads-1 helper goroutines; the stream goroutine that
// runs a kernel is the last worker. A kernel is split into up to
// partsPerThread parts per thread, and each worker takes the next part not
// yet taken until none is left: on a machine shared with other work, a
// thread that gets less of its core takes fewer parts instead of holding
// up the kernel. Streams running kernels at the same time share the
// helpers: a kernel ends only once every job it handed out has been taken
// from the channel and finished, even a job that found no part left, so a
// stream may wait for helpers busy with another stream's kernel. (A
// training step's kernels run on one compute stream; the staging stream's
// copies are not split.) Nothing here allocates: a kernel's parts are
// described by a value made when the kernel was enqueued (or captured),
// and a helper is handed the kernel by value over a channel.

// task is a kernel split into parts; part(i, n, s) runs part i of n with
// the scratch memory of the thread that runs it.
type task interface {
	part(i, n int, s *scratch)
}

// scratch is memory of one worker thread's own, for kernels that copy
// operands into a cache-friendly order (the GEMM's packed panels of B).
// Each helper goroutine and each stream's team has one, allocated once, so
// no kernel allocates it on the step path and no two parts running at
// once share it.
type scratch struct {
	pack  []float32 // gemmKC×16 floats: one packed panel of B
	packA []float32 // gemmMC×gemmKC floats: a block of a transposed A
}

func newScratch() *scratch {
	return &scratch{pack: make([]float32, gemmKC*16), packA: make([]float32, gemmMC*gemmKC)}
}

// job asks a helper to take parts of a task until none is left.
type job struct {
	t    task
	n    int   // parts
	team *team // the stream's team that handed it out
}

// spinFor is how long a worker spins, yielding, before it blocks: a
// helper waiting for the next kernel, a stream goroutine waiting for its
// helpers to finish a kernel. A training step's kernels follow each other
// within microseconds, and waking a blocked goroutine's thread costs tens
// of microseconds on a virtual machine: without the spin, a helper woken
// for a small product arrived when the stream goroutine had taken most of
// its parts. Spinning costs only when the device is idle (at most this
// long after each kernel) and changes no result: which worker runs which
// part never does.
const spinFor = 50 * time.Microsecond

// spinEager is how long a spin goes before it yields the thread to other
// threads of the machine. sched_yield takes about half a microsecond on a
// virtual machine, and a worker in the middle of one answers that much
// later: without it for the first microseconds, the hand-off of a
// kernel's parts to a helper and back took 0.1-0.3 µs on the development
// machine, against 0.5-0.8 µs yielding from the start, which is most of a
// batch-64 product of the MLP's last layer (see BenchmarkGemmThreads). A
// few microseconds are far below any scheduler's time slice, so another
// process waiting for the core loses nothing it would have had.
const spinEager = 5 * time.Microsecond

// spin calls done until it reports true or spinFor has passed. Every 16
// calls it lets other goroutines run (runtime.Gosched: the stager and the
// loader share the device's threads), and after spinEager it yields to
// other threads of the machine too (osYield), so that a spinning worker
// does not hold a core another process is waiting for. It reports whether
// done did.
func spin(done func() bool) bool {
	start := time.Now()
	for i := 0; ; i++ {
		if done() {
			return true
		}
		if i%16 == 15 {
			d := time.Since(start)
			if d >= spinFor {
				return false
			}
			runtime.Gosched()
			if d >= spinEager {
				osYield()
			}
		}
	}
}

// take runs parts of j's task until none is left, with s as scratch.
func (j job) take(s *scratch) {
	for {
		i := int(j.team.next.Add(1) - 1)
		if i >= j.n {
			return
		}
		j.t.part(i, j.n, s)
	}
}

// finish tells the job's team that a helper has finished it, waking the
// stream goroutine if it is the last and the stream goroutine has stopped
// spinning (see team.wait). Unless it wakes the stream goroutine, the
// helper touches nothing of the team after its decrement: the stream
// goroutine may be running its next kernel by then.
func (j job) finish() {
	t := j.team
	if t.state.Add(-1) == sleeping {
		t.wake <- struct{}{}
	}
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
	s := newScratch()
	for {
		var j job
		ok := false
		polled := spin(func() bool {
			// len reads the count without the channel's lock, which
			// the stream goroutine handing out a job needs.
			if len(h.jobs) == 0 {
				return false
			}
			select {
			case j, ok = <-h.jobs:
				return true
			default:
				return false
			}
		})
		if !polled {
			j, ok = <-h.jobs
		}
		if !ok {
			return
		}
		j.take(s)
		j.finish()
	}
}

// stop ends the helpers once every job handed to them has run. No kernel
// may run any more: the streams are stopped first.
func (h *helpers) stop() {
	close(h.jobs)
	h.wg.Wait()
}

// team is how one stream goroutine runs a kernel's parts: the device's
// helpers and the stream's own count of jobs handed out and not finished
// (one per stream, because a stream runs one kernel at a time, while two
// streams may wait at once).
type team struct {
	h    *helpers
	next atomic.Int64 // the next part of the running kernel not yet taken
	// state is the number of jobs of the running kernel handed to the
	// helpers and not yet finished (one helper may take several), plus
	// sleeping once the stream goroutine has stopped spinning and waits on
	// wake. One word for both, so that the last job's decrement alone
	// tells its helper whether to send on wake.
	state atomic.Int64
	wake  chan struct{}
	s     *scratch // the stream goroutine's, made on its first kernel
}

// sleeping is the flag in team.state, above any count of jobs.
const sleeping = 1 << 32

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
	if t == nil {
		k.part(0, 1, newScratch())
		return
	}
	if t.s == nil {
		t.s = newScratch()
	}
	if n <= 1 || t.threads() == 1 {
		k.part(0, 1, t.s)
		return
	}
	if t.wake == nil {
		t.wake = make(chan struct{}, 1)
	}
	t.next.Store(0)
	j := job{t: k, n: n, team: t}
	helpers := min(n, t.threads()) - 1
	t.state.Store(int64(helpers))
	for range helpers {
		t.h.jobs <- j
	}
	j.take(t.s)
	t.wait()
}

// wait returns when every helper handed the running kernel has finished
// it: at once if they have, after spinning if they finish within spinFor,
// else blocked until the last one wakes it. Setting the flag and the last
// helper's decrement are two additions to one word, so one comes first:
// when the flag does, the decrement leaves exactly sleeping and that
// helper sends, once, while this goroutine waits for it; when the
// decrement does, no helper sends, and this goroutine, seeing the count
// at 0, does not wait. Either way no send is left over for a later kernel.
func (t *team) wait() {
	if spin(func() bool { return t.state.Load() == 0 }) {
		return
	}
	if t.state.Add(sleeping) != sleeping {
		<-t.wake
	}
	t.state.Store(0)
}

// partsPerThread is how many parts per thread a large kernel is split
// into, so that the parts balance across threads of unequal speed.
const partsPerThread = 4

// parts is how many parts to split work of the given size into: one per
// grain of work, at most partsPerThread per thread, and one when there is
// one thread.
func (t *team) parts(work, grain int) int {
	if t.threads() == 1 {
		return 1
	}
	return max(1, min(partsPerThread*t.threads(), work/grain))
}

// span returns part i of n of the range [0, total), in multiples of align
// except for the last part: parts differ by at most align.
func span(i, n, total, align int) (lo, hi int) {
	units := (total + align - 1) / align
	lo = min(total, (units*i/n)*align)
	hi = min(total, (units*(i+1)/n)*align)
	return lo, hi
}

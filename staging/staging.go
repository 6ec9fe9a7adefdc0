// Package staging moves batches from host to device outside any capture.
// Loader goroutines fill a ring of pinned host slots without touching the
// device; one stager goroutine copies each slot into static device input
// buffer k on its own stream and records copy-done[k]. The compute stream
// waits on copy-done[k] before its step and records step-done[k], which the
// stager waits on before it overwrites buffer k. A capture guard keeps the
// stager's device calls out of any capture in progress.
package staging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// Meta describes the batch in a slot; the source fills it in.
type Meta struct {
	Seq    int  // sequence number of the batch
	Epoch  int  // epoch the batch belongs to
	Step   int  // step within the epoch
	Valid  int  // valid rows (the rest is padding)
	Ragged bool // the batch is the short last batch of an epoch
}

// Source fills pinned slots with batches. Fill is called from loader
// goroutines, concurrently for different sequence numbers; it must write
// all of dst and return io.EOF when seq is past the last batch. It has no
// device handle and never calls the device.
type Source interface {
	Fill(seq int, dst []float32) (Meta, error)
}

// Config sizes the staging pipeline.
type Config struct {
	BatchLen int // float32 elements per batch (inputs, labels, mask, hyper-parameters)
	Slots    int // pinned host slots in the ring (>= 2)
	Buffers  int // static device input buffers (>= 1; 2 overlaps copy and step)
	Loaders  int // loader goroutines (>= 1)
	// PrefetchToDevice lets the stager issue its copies without the capture
	// guard, like a data loader that prefetches to the device on its own
	// stream. It is switched off around each capture.
	PrefetchToDevice bool
	// StartSeq is the first sequence number, for resuming mid-run.
	StartSeq int
	// Guard is the capture guard the stager's device calls honour: the
	// one guard of the process, shared by every stager in it (see Guard).
	Guard  *Guard
	Logger *slog.Logger
	// OnCopy, when set, receives each batch copy's device time in seconds,
	// measured with events around the copy on the staging stream.
	OnCopy func(seconds float64)
}

// Guard keeps staging device calls out of captures. A global-mode capture
// is broken by an unsafe call from any thread of the process, so every
// stager whose calls could reach a capture must share its guard: a
// process has one, made in main and passed down (trainer.Shared holds
// it), as CUDA's global capture mode spans the process. Two trainers on
// one device in one process then keep each other's staging out of their
// captures; captures are rare and short, so unrelated devices sharing it
// lose nothing measurable.
type Guard struct {
	rw       sync.RWMutex
	captures atomic.Uint64
}

// Capture runs capture while no stager sharing the guard is inside a
// device call, and keeps them out until it returns.
func (g *Guard) Capture(capture func() error) error {
	g.rw.Lock()
	defer g.rw.Unlock()
	g.captures.Add(1)
	return capture()
}

// Captures is the number of guarded captures so far.
func (g *Guard) Captures() uint64 { return g.captures.Load() }

// Validate reports a configuration error.
func (c Config) Validate() error {
	switch {
	case c.BatchLen <= 0:
		return fmt.Errorf("staging: BatchLen must be positive, got %d", c.BatchLen)
	case c.Slots < 2:
		return fmt.Errorf("staging: Slots must be at least 2, got %d", c.Slots)
	case c.Buffers < 1:
		return fmt.Errorf("staging: Buffers must be at least 1, got %d", c.Buffers)
	case c.Loaders < 1:
		return fmt.Errorf("staging: Loaders must be at least 1, got %d", c.Loaders)
	case c.StartSeq < 0:
		return fmt.Errorf("staging: StartSeq must be >= 0, got %d", c.StartSeq)
	case c.Guard == nil:
		return fmt.Errorf("staging: Guard is required: pass the process's capture guard, shared by every stager in it")
	}
	return nil
}

// Staged is a batch whose copy into input buffer K has been enqueued.
type Staged struct {
	Meta
	K        int          // input buffer index
	CopyDone device.Event // the compute stream must Wait on it before reading buffer K
}

type slot struct {
	host   device.HostBuffer
	start  device.Event // recorded before the copy out of this slot
	done   device.Event // recorded after the copy out of this slot
	filled chan fillResult
}

type fillResult struct {
	meta Meta
	err  error
}

// Stager owns the pinned ring, the staging stream and the input buffers.
type Stager struct {
	dev     device.Device
	cfg     Config
	src     Source
	log     *slog.Logger
	stream  device.Stream
	slots   []*slot
	inputs  []device.Buffer
	copied  []device.Event // copy-done[k]
	stepped []device.Event // step-done[k]
	release []chan struct{}
	jobs    chan int // sequence numbers whose slot is free, for the loaders
	out     chan Staged
	guard   *Guard

	prefetch    atomic.Bool
	prefetchMu  sync.Mutex // held by unguarded calls in prefetch mode
	copies      atomic.Uint64
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	errMu       sync.Mutex
	err         error
	startedOnce sync.Once
}

// New allocates everything the pipeline needs: pinned slots, input
// buffers, the staging stream and its events. Nothing is allocated later,
// so staging never allocates during a capture.
func New(dev device.Device, cfg Config, src Source) (*Stager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st := &Stager{dev: dev, cfg: cfg, src: src, log: cfg.Logger, out: make(chan Staged, cfg.Buffers), guard: cfg.Guard}
	if st.log == nil {
		st.log = slog.New(slog.DiscardHandler)
	}
	st.prefetch.Store(cfg.PrefetchToDevice)
	if err := st.allocate(); err != nil {
		st.free()
		return nil, err
	}
	return st, nil
}

func (st *Stager) allocate() error {
	var err error
	if st.stream, err = st.dev.NewStream(); err != nil {
		return fmt.Errorf("staging: stream: %w", err)
	}
	st.jobs = make(chan int, st.cfg.Slots)
	for i := range st.cfg.Slots {
		sl, err := st.newSlot()
		if err != nil {
			return err
		}
		st.slots = append(st.slots, sl)
		st.jobs <- st.cfg.StartSeq + i
	}
	for range st.cfg.Buffers {
		if err := st.newInput(); err != nil {
			return err
		}
	}
	return nil
}

// newSlot makes one pinned slot with its events; on failure it releases
// what it made.
func (st *Stager) newSlot() (*slot, error) {
	h, err := st.dev.AllocHost(st.cfg.BatchLen)
	if err != nil {
		return nil, fmt.Errorf("staging: pinned slot: %w", err)
	}
	evs, err := st.newEvents(2, true) // the copy's time is measured between them
	if err != nil {
		_ = st.dev.FreeHost(h)
		return nil, err
	}
	return &slot{host: h, start: evs[0], done: evs[1], filled: make(chan fillResult, 1)}, nil
}

// newInput makes one device input buffer with its copy-done and step-done
// events and its release token.
func (st *Stager) newInput() error {
	b, err := st.dev.Alloc(st.cfg.BatchLen)
	if err != nil {
		return fmt.Errorf("staging: input buffer: %w", err)
	}
	evs, err := st.newEvents(2, false)
	if err != nil {
		_ = st.dev.Free(b)
		return err
	}
	st.inputs = append(st.inputs, b)
	st.copied, st.stepped = append(st.copied, evs[0]), append(st.stepped, evs[1])
	rel := make(chan struct{}, 1)
	rel <- struct{}{}
	st.release = append(st.release, rel)
	return nil
}

// newEvents makes n events, with timing when they are to be measured.
func (st *Stager) newEvents(n int, timing bool) ([]device.Event, error) {
	create := st.dev.NewEvent
	if timing {
		create = st.dev.NewTimingEvent
	}
	var evs []device.Event
	for range n {
		ev, err := create()
		if err != nil {
			for _, e := range evs {
				_ = e.Destroy()
			}
			return nil, fmt.Errorf("staging: event: %w", err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Input returns static device input buffer k. Its address never changes,
// so graphs captured against it stay valid.
func (st *Stager) Input(k int) device.Buffer { return st.inputs[k] }

// Buffers is the number of input buffers.
func (st *Stager) Buffers() int { return len(st.inputs) }

// StepDone is the event the compute stream records after the step that
// read input buffer k.
func (st *Stager) StepDone(k int) device.Event { return st.stepped[k] }

// Copies is the number of batch copies issued so far.
func (st *Stager) Copies() uint64 { return st.copies.Load() }

// PrefetchToDevice reports whether prefetch to device is on now.
func (st *Stager) PrefetchToDevice() bool { return st.prefetch.Load() }

// Start starts the loader goroutines and the stager goroutine. Stop ends them.
func (st *Stager) Start(ctx context.Context) {
	st.startedOnce.Do(func() {
		ctx, st.cancel = context.WithCancel(ctx)
		for range st.cfg.Loaders {
			st.wg.Add(1)
			go st.load(ctx)
		}
		st.wg.Add(1)
		go st.stage(ctx)
	})
}

// load fills slots for the sequence numbers the stager hands out: a
// sequence number is handed out only when its slot (seq mod Slots) is
// free, so every slot holds exactly the batch the stager expects there,
// whatever the number of loaders.
func (st *Stager) load(ctx context.Context) {
	defer st.wg.Done()
	n := len(st.slots)
	for {
		var seq int
		select {
		case seq = <-st.jobs:
		case <-ctx.Done():
			return
		}
		sl := st.slots[seq%n]
		meta, err := st.src.Fill(seq, sl.host.Data())
		meta.Seq = seq
		select {
		case sl.filled <- fillResult{meta, err}:
		case <-ctx.Done():
			return
		}
	}
}

// device runs fn under the capture guard, or without it in prefetch mode.
func (st *Stager) device(fn func() error) error {
	if st.prefetch.Load() {
		st.prefetchMu.Lock()
		defer st.prefetchMu.Unlock()
		if st.prefetch.Load() {
			return fn()
		}
	}
	st.guard.rw.RLock()
	defer st.guard.rw.RUnlock()
	return fn()
}

func (st *Stager) stage(ctx context.Context) {
	defer st.wg.Done()
	defer close(st.out)
	n := len(st.slots)
	// Sequence numbers whose copy is issued but not yet known to be done.
	// Finished copies free their slot at once; the stager blocks on a copy
	// only when more than Slots-2 are pending, which leaves the loaders a
	// free slot ahead of the stager (and at most Slots-1, so the slot of
	// the next batch is always free before the stager waits for it).
	keep := max(1, n-2)
	var pending []int
	for seq := st.cfg.StartSeq; ; seq++ {
		sl := st.slots[seq%n]
		var res fillResult
		select {
		case res = <-sl.filled:
		case <-ctx.Done():
			return
		}
		if res.err != nil {
			if !errors.Is(res.err, io.EOF) {
				st.fail(fmt.Errorf("staging: loading batch %d: %w", seq, res.err))
			}
			return
		}
		if res.meta.Seq != seq {
			st.fail(fmt.Errorf("staging: slot %d holds batch %d where batch %d was expected", seq%n, res.meta.Seq, seq))
			return
		}
		k := seq % len(st.inputs)
		select {
		case <-st.release[k]:
		case <-ctx.Done():
			return
		}
		err := st.device(func() error {
			return errors.Join(
				st.stream.Wait(st.stepped[k]),
				st.stream.Record(sl.start),
				st.stream.CopyHtoD(st.inputs[k], sl.host),
				st.stream.Record(st.copied[k]),
				st.stream.Record(sl.done))
		})
		if err != nil {
			st.fail(fmt.Errorf("staging: copy batch %d into input buffer %d: %w", seq, k, err))
			return
		}
		st.copies.Add(1)
		select {
		case st.out <- Staged{Meta: res.meta, K: k, CopyDone: st.copied[k]}:
		case <-ctx.Done():
			return
		}
		// Hand slots back to the loaders once their copies are done.
		pending = append(pending, seq)
		for len(pending) > 0 {
			must := len(pending) > keep
			done, ok := st.recycle(ctx, pending[0], must)
			if !ok {
				return
			}
			if !done {
				break
			}
			pending = pending[1:]
		}
	}
}

// recycle frees the slot of batch seq for batch seq+Slots once its copy
// is done: waiting for the copy when wait is set, else only if it is done
// already. It reports whether the slot was freed, and false for ok when
// the pipeline must stop.
func (st *Stager) recycle(ctx context.Context, seq int, wait bool) (done, ok bool) {
	sl := st.slots[seq%len(st.slots)]
	var took time.Duration
	err := st.device(func() error {
		if wait {
			if err := sl.done.Synchronize(); err != nil {
				return err
			}
		} else {
			ready, err := sl.done.Query()
			if err != nil || !ready {
				return err
			}
		}
		done = true
		var err error
		took, err = st.dev.Elapsed(sl.start, sl.done)
		return err
	})
	if err != nil {
		st.fail(fmt.Errorf("staging: waiting for a copy: %w", err))
		return false, false
	}
	if !done {
		return false, true
	}
	if st.cfg.OnCopy != nil {
		st.cfg.OnCopy(took.Seconds())
	}
	select {
	case st.jobs <- seq + len(st.slots):
		return true, true
	case <-ctx.Done():
		return true, false
	}
}

func (st *Stager) fail(err error) {
	st.errMu.Lock()
	if st.err == nil {
		st.err = err
	}
	st.errMu.Unlock()
}

// Err returns the error that stopped the pipeline, if any.
func (st *Stager) Err() error {
	st.errMu.Lock()
	defer st.errMu.Unlock()
	return st.err
}

// Next returns the next staged batch. It returns io.EOF when the source is
// exhausted, or the pipeline's error.
func (st *Stager) Next(ctx context.Context) (Staged, error) {
	select {
	case b, ok := <-st.out:
		if !ok {
			if err := st.Err(); err != nil {
				return Staged{}, err
			}
			if ctx.Err() != nil {
				return Staged{}, ctx.Err()
			}
			return Staged{}, io.EOF
		}
		return b, nil
	case <-ctx.Done():
		return Staged{}, ctx.Err()
	}
}

// Release tells the stager that the compute stream has recorded
// StepDone(b.K) after the step that read b, so buffer b.K may be refilled
// once that event completes on the device.
func (st *Stager) Release(b Staged) {
	st.release[b.K] <- struct{}{}
}

// DisablePrefetch switches prefetch to device off, before a capture, and
// logs why. It reports whether it was on. After it returns no unguarded
// device call of this stager is in flight.
func (st *Stager) DisablePrefetch(reason string) bool {
	if !st.prefetch.Load() {
		return false
	}
	st.prefetchMu.Lock()
	was := st.prefetch.Swap(false)
	st.prefetchMu.Unlock()
	if was {
		st.log.Info("prefetch to device switched off", "reason", reason)
	}
	return was
}

// EnablePrefetch switches prefetch to device back on after a capture, if
// the configuration asked for it.
func (st *Stager) EnablePrefetch() {
	if st.cfg.PrefetchToDevice {
		st.prefetch.Store(true)
	}
}

// GuardCapture switches prefetch off around capture (logging reason) and
// runs capture under the stager's guard: no staging copy, record or
// synchronisation happens while it runs. Loaders keep filling host slots
// meanwhile. Prefetch is back on when it returns, if it was on before.
func (st *Stager) GuardCapture(reason string, capture func() error) error {
	if st.DisablePrefetch(reason) {
		defer st.EnablePrefetch()
	}
	return st.guard.Capture(capture)
}

// Guard returns the guard the stager's device calls honour; a capture run
// under it (Guard().Capture or GuardCapture) sees no call of this stager.
func (st *Stager) Guard() *Guard { return st.guard }

// Stop ends the goroutines, waits for the staging stream and releases
// everything New allocated.
func (st *Stager) Stop() error {
	if st.cancel != nil {
		st.cancel()
	}
	// A stager blocked on a release token or an output slot sees the
	// cancellation; drain the output so nothing is left blocked.
	st.wg.Wait()
	return st.free()
}

func (st *Stager) free() error {
	var errs []error
	if st.stream != nil {
		errs = append(errs, st.stream.Synchronize(), st.stream.Destroy())
	}
	for _, sl := range st.slots {
		errs = append(errs, st.dev.FreeHost(sl.host), sl.start.Destroy(), sl.done.Destroy())
	}
	for k, b := range st.inputs {
		errs = append(errs, st.dev.Free(b), st.copied[k].Destroy(), st.stepped[k].Destroy())
	}
	st.slots, st.inputs, st.stream = nil, nil, nil
	return errors.Join(errs...)
}

package sweep

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/worker"
)

// keptWorkers are a sweep's worker processes kept for later trials
// (Config.ReuseWorkers): each runs one trial at a time, and between
// trials waits idle for the next on a slot of its device. An idle one
// keeps what it still holds on the device (its context and its graph
// pool's workspace) booked with the broker; the broker may reclaim that
// booking for a request that does not fit, and the worker is then closed.
type keptWorkers struct {
	mu   sync.Mutex
	idle []*keptWorker
	all  []*keptWorker
	made int // kept workers made, naming them
	// closing counts the idle workers being closed for the broker.
	closing sync.WaitGroup
}

// keptWorker is one kept process, its slot's device, the shape of its
// last trial and where the running trial's log lines go.
type keptWorker struct {
	k      *worker.Kept
	name   string // its holder's name while idle, e.g. "kept worker 2 on cpu"
	device string // the slot's, e.g. cpu or cuda:1
	shape  string
	stderr io.Writer
	// booking is what it holds booked while idle (budget.Ticket.Keep): its
	// last trial's, which the next trial's request continues; nil when it
	// has none (its trial held no budget), and it is then closed when
	// given back.
	booking *budget.Ticket
	// ending: its trial has ended and it is not yet given back; retire:
	// the broker reclaimed its booking meanwhile, so it is closed when
	// given back.
	ending, retire bool
	// reclaimed is the idle booking the broker reclaimed while the worker
	// served its next trial (see reclaim): that trial's request was to
	// continue it; if it is still the worker's booking when the worker is
	// given back, no request did, and the worker is closed.
	reclaimed *budget.Ticket
}

// take is an idle kept worker for a trial of shape on slot sl, taken off
// the idle list: one of the slot's device, the one whose last trial had
// the shape first; nil when none waits (or sl is remote). The worker has
// its device open: the attempt needs no probe.
func (w *keptWorkers) take(sl launch.Slot, shape string) *keptWorker {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.takeLocked(sl, shape)
}

// takeLocked is take with w.mu held.
func (w *keptWorkers) takeLocked(sl launch.Slot, shape string) *keptWorker {
	if sl.Remote() {
		return nil
	}
	pick := -1
	for i, kw := range w.idle {
		if kw.device == sl.String() && (pick < 0 || kw.shape == shape) {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	kw := w.idle[pick]
	w.idle = append(w.idle[:pick], w.idle[pick+1:]...)
	kw.shape, kw.ending, kw.retire, kw.reclaimed = shape, false, false, nil
	return kw
}

// assign takes the trial free slot sl runs next off q (see trialQueue,
// which the idle kept workers steer) and the idle kept worker that
// serves its first attempt (see take; nil: a fresh one). Deciding both
// under w.mu, no trial ending meanwhile changes the idle workers between
// the choice of the trial and of its worker.
func (w *keptWorkers) assign(q *trialQueue, sl launch.Slot) (int, *keptWorker) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var here []string
	held := map[string]bool{}
	for _, kw := range w.idle {
		held[kw.shape] = true
		if kw.device == sl.String() && !sl.Remote() {
			here = append(here, kw.shape)
		}
	}
	i, shape := q.next(here, held)
	if i < 0 {
		return -1, nil
	}
	return i, w.takeLocked(sl, shape)
}

// start is a new kept worker for a trial of shape on slot sl, made with
// the settings of the attempt the launcher readied as h; nil when h is
// not a local worker process.
func (w *keptWorkers) start(sl launch.Slot, shape string, h *launch.Handle) *keptWorker {
	p, ok := h.Transport.(*worker.Process)
	if !ok || sl.Remote() {
		return nil
	}
	proc := *p
	proc.Stderr = nil // each trial's own log, through For
	w.mu.Lock()
	defer w.mu.Unlock()
	w.made++
	kw := &keptWorker{k: &worker.Kept{Process: proc}, name: fmt.Sprintf("kept worker %d on %s", w.made, sl.String()),
		device: sl.String(), shape: shape}
	w.all = append(w.all, kw)
	return kw
}

// continued is the booking of kw's trial's request to continue: kw's
// idle booking, taken with it.
func (w *keptWorkers) continued(kw *keptWorker) *budget.Ticket {
	w.mu.Lock()
	defer w.mu.Unlock()
	return kw.booking
}

// end hears that kw's trial ended: keep books what the worker still
// holds (nil: nothing), and end releases the booking the trial's request
// continued when the request did not (it never asked, or was refused).
func (w *keptWorkers) end(kw *keptWorker, keep func() *budget.Ticket) {
	w.mu.Lock()
	kw.ending = true // a reclaim from here on closes it when given back
	w.mu.Unlock()
	idle := keep()
	w.mu.Lock()
	before := kw.booking
	kw.booking = idle
	w.mu.Unlock()
	if before != nil {
		before.Release() // continued, it gives back nothing twice
	}
}

// reclaim answers the broker, which needs kw's idle booking (for e.For):
// an idle worker is closed, in the background, and its booking released
// once it has gone; one whose trial has just ended is closed when given
// back. One that serves its next trial already is left alone: that
// trial's request continues the booking. If the attempt fails before its
// request is made (its configuration, its start or its preparation
// failed), nothing continues the booking; the broker, having asked once,
// evicts nobody else on the device while the booking is being reclaimed,
// so give closes the worker and releases the booking then.
func (w *keptWorkers) reclaim(kw *keptWorker, e budget.Eviction, log *slog.Logger) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i := slices.Index(w.idle, kw); i >= 0 {
		w.idle = slices.Delete(w.idle, i, i+1)
		w.forget(kw)
		log.Info("closing an idle kept worker to make room for another", "worker", kw.name, "device", kw.device, "for", e.For)
		w.closing.Add(1)
		go func() {
			defer w.closing.Done()
			w.close(kw)
		}()
		return
	}
	if kw.ending {
		kw.retire = true
		log.Info("closing a kept worker as its trial ends, to make room for another", "worker", kw.name, "device", kw.device, "for", e.For)
		return
	}
	kw.reclaimed = kw.booking
}

// give makes kw idle again, for the next trial on its device; a kept
// worker with no booking, or whose booking the broker reclaimed, is
// closed instead. The latter includes a booking reclaimed while the
// worker served a trial whose request never continued it (see reclaim):
// kept idle, it would hold a booking the broker waits on for ever.
func (w *keptWorkers) give(kw *keptWorker) {
	w.mu.Lock()
	kw.stderr = nil
	if kw.booking != nil && kw.booking == kw.reclaimed {
		kw.retire = true
	}
	kw.reclaimed = nil
	if kw.booking != nil && !kw.retire {
		w.idle = append(w.idle, kw)
		w.mu.Unlock()
		return
	}
	w.forget(kw)
	w.mu.Unlock()
	w.close(kw)
}

// forget takes kw off the list of workers; w.mu is held.
func (w *keptWorkers) forget(kw *keptWorker) {
	if i := slices.Index(w.all, kw); i >= 0 {
		w.all = slices.Delete(w.all, i, i+1)
	}
}

// close ends kw's process, then gives back its booking: the device's
// memory is free once the process has gone.
func (w *keptWorkers) close(kw *keptWorker) {
	_ = kw.k.Close()
	if kw.booking != nil {
		kw.booking.Release()
	}
}

// closeAll ends every kept worker; call it once no trial runs.
func (w *keptWorkers) closeAll() {
	w.closing.Wait()
	w.mu.Lock()
	all := w.all
	w.all, w.idle = nil, nil
	w.mu.Unlock()
	for _, kw := range all {
		w.close(kw)
	}
}

// shapeOf is what decides a trial's step signature (the model, its input,
// the batch, the optimizer and clipping) and its device's settings: two
// trials of one shape on one kept worker share its pooled graphs. It only
// steers the choice of an idle worker; the worker itself pools by the
// real signature. It is taken of a trial's spec as the sweep file makes
// it, before placement sets the device's threads: those follow from the
// trial's own cpu_threads, the same way for every trial of a sweep.
func shapeOf(spec job.Spec) string {
	raw, _ := json.Marshal(struct {
		Dataset, Activation, Loss, Optimizer string
		Context, BatchSize, CPUThreads       int
		Input, Hidden                        []int
		Layers                               job.Layers
		Clip                                 bool
	}{spec.Dataset, spec.Activation, spec.Loss, spec.Optimizer, spec.Context, spec.BatchSize, spec.CPUThreads,
		spec.Input, spec.Hidden, spec.Layers, spec.ClipNorm > 0})
	return string(raw)
}

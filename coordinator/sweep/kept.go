package sweep

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/worker"
)

// keptWorkers are a sweep's worker processes kept for later trials
// (Config.ReuseWorkers): each runs one trial at a time, and between
// trials waits idle for the next on a slot of its device.
type keptWorkers struct {
	mu   sync.Mutex
	idle []*keptWorker
	all  []*keptWorker
}

// keptWorker is one kept process, its slot's device, the shape of its
// last trial and where the running trial's log lines go.
type keptWorker struct {
	k      *worker.Kept
	device string // the slot's, e.g. cpu or cuda:1
	shape  string
	stderr io.Writer
}

// take is the kept worker for a trial of spec on slot sl, whose attempt
// the launcher readied as h: an idle one of the slot's device, the one
// whose last trial had the trial's shape first, else a new one made with
// h's settings. nil when h is not a local worker process.
func (w *keptWorkers) take(sl launch.Slot, spec job.Spec, h *launch.Handle) *keptWorker {
	p, ok := h.Transport.(*worker.Process)
	if !ok || sl.Remote() {
		return nil
	}
	shape := shapeOf(spec)
	w.mu.Lock()
	defer w.mu.Unlock()
	pick := -1
	for i, kw := range w.idle {
		if kw.device == sl.String() && (pick < 0 || kw.shape == shape) {
			pick = i
		}
	}
	var kw *keptWorker
	if pick >= 0 {
		kw = w.idle[pick]
		w.idle = append(w.idle[:pick], w.idle[pick+1:]...)
	} else {
		proc := *p
		proc.Stderr = nil // each trial's own log, through For
		kw = &keptWorker{k: &worker.Kept{Process: proc}, device: sl.String()}
		w.all = append(w.all, kw)
	}
	kw.shape, kw.stderr = shape, p.Stderr
	return kw
}

// give makes kw idle again, for the next trial on its device.
func (w *keptWorkers) give(kw *keptWorker) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw.stderr = nil
	w.idle = append(w.idle, kw)
}

// closeAll ends every kept worker; call it once no trial runs.
func (w *keptWorkers) closeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, kw := range w.all {
		_ = kw.k.Close()
	}
	w.all, w.idle = nil, nil
}

// shapeOf is what decides a trial's step signature (the model, its input,
// the batch, the optimizer and clipping) and its device's settings: two
// trials of one shape on one kept worker share its pooled graphs. It only
// steers the choice of an idle worker; the worker itself pools by the
// real signature.
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

// startOrder is the order trials start in: the file's, or with
// Config.ReuseWorkers the file's grouped by shape (each shape where its
// first trial is, its trials in the file's order), so a kept worker's
// next trial is of the shape it has pooled. The order changes no result:
// a trial's are the same whichever ran before it.
func (s *Run) startOrder() []int {
	trials := s.cfg.Sweep.Trials
	order := make([]int, 0, len(trials))
	if !s.cfg.ReuseWorkers {
		for i := range trials {
			order = append(order, i)
		}
		return order
	}
	var shapes []string
	byShape := map[string][]int{}
	for i, t := range trials {
		sh := shapeOf(t.Spec)
		if _, ok := byShape[sh]; !ok {
			shapes = append(shapes, sh)
		}
		byShape[sh] = append(byShape[sh], i)
	}
	for _, sh := range shapes {
		order = append(order, byShape[sh]...)
	}
	return order
}

package trainer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tolaria-ml/tolaria/device"
)

// Event kinds of parking.
const (
	EventPark   = "park"   // the run moved its model off the device and freed its memory
	EventUnpark = "unpark" // the run set up on the device again and carries on
)

// Parker lets a coordinator park a run: between two steps the run copies
// its parameters and optimizer state to pinned host memory, drops its
// graph executables and the pool's workspace, frees all its device
// memory, and waits; told to unpark, it allocates again, uploads, and
// captures again after its warm-up steps. The run ends with exactly the
// parameters it would have had without parking.
type Parker interface {
	// ParkRequested reports, without blocking, whether to park now.
	ParkRequested() bool
	// Parked is called once the run holds no device memory, with the bytes
	// it released; it returns when the run may set up again, or with the
	// error of ctx ending (the run then sets up again to checkpoint and
	// stop).
	Parked(ctx context.Context, released int64) error
	// Unparked is called once the run is set up again.
	Unparked()
}

// WithParker returns the plan with a parker: not configuration, so the
// plan stays valid.
func (p *Plan) WithParker(pk Parker) *Plan {
	q := *p
	q.cfg.Parker = pk
	return &q
}

// parked is what a parked run keeps in pinned host memory.
type parked struct {
	params     device.HostBuffer
	state      []device.HostBuffer
	running    device.HostBuffer // a net's running state; zero when it has none
	trainStats []float32         // the training accumulators, mid-epoch
}

// park parks the run before step seq and sets it up again when the
// parker says so (see Parker). done is the steps trained so far in this
// invocation: warm-up starts again from it. Stopped while parked (ctx
// ends), it checkpoints from pinned host memory and leaves the run torn
// down with r.stopped set.
func (r *run) park(ctx context.Context, seq, startSeq, done int) error {
	train, _, err := r.readStats()
	if err != nil {
		return err
	}
	if err := r.compute.Synchronize(); err != nil {
		return err
	}
	before, _, err := device.UsedMemory(r.dev)
	if err != nil {
		return err
	}
	kept, err := r.toHost(train)
	if err != nil {
		return err
	}
	defer kept.free(r.dev)
	r.teardown()
	if err := r.pool.Drop(r.dev); err != nil {
		return fmt.Errorf("trainer: parking: dropping the pool's workspace: %w", err)
	}
	if t, ok := r.dev.(device.Trimmer); ok {
		// Freed is not yet given back: the backend's cache would keep it
		// from the other workers on the device.
		if err := t.Trim(); err != nil {
			return fmt.Errorf("trainer: parking: giving the freed memory back: %w", err)
		}
	}
	after, _, err := device.UsedMemory(r.dev)
	if err != nil {
		return err
	}
	released := before - after
	r.obs.Observe(Event{Time: time.Now(), Kind: EventPark, Fields: map[string]any{"step": seq, "released_bytes": released,
		"pinned_bytes": kept.bytes()}})
	r.log.Info("parked: the model is in pinned host memory and the device memory freed", "step", seq, "released_bytes", released)
	waitErr := r.cfg.Parker.Parked(ctx, released)
	if waitErr != nil && ctx.Err() != nil {
		// Stopped while parked: the run has no budget for the device any
		// more, so it checkpoints from the pinned copy instead of setting
		// up again.
		return r.stopParked(seq, startSeq, kept)
	}
	r.unparking = true
	defer func() { r.unparking = false }()
	ck := &Checkpoint{params: kept.params.Data(), running: kept.running.Data()}
	for _, s := range kept.state {
		ck.state = append(ck.state, s.Data())
	}
	if err := r.setup(ctx, seq, ck); err != nil {
		return fmt.Errorf("trainer: unparking: %w", err)
	}
	if err := r.compute.Synchronize(); err != nil {
		return err
	}
	trainStats, _ := r.step.Accumulators()
	if err := r.dev.Upload(trainStats.Slice(0, device.StatsLen), kept.trainStats); err != nil {
		return err
	}
	r.warmFrom = done
	r.obs.Observe(Event{Time: time.Now(), Kind: EventUnpark, Fields: map[string]any{"step": seq}})
	r.cfg.Parker.Unparked()
	if waitErr != nil && ctx.Err() == nil {
		return waitErr
	}
	return nil
}

// stopParked ends a run stopped while parked before step seq, as
// interrupt does, from the pinned copy: the checkpoint (mid-epoch, with
// the training accumulators) and the summary's final parameters come from
// host memory, and nothing is allocated on the device.
func (r *run) stopParked(seq, startSeq int, kept *parked) error {
	r.sum.Interrupted = true
	params := slices.Clone(kept.params.Data())
	state := make([][]float32, len(kept.state))
	for i, s := range kept.state {
		state[i] = slices.Clone(s.Data())
	}
	running := slices.Clone(kept.running.Data())
	r.stopped = params
	r.log.Info("stopped while parked: checkpointing from pinned host memory", "step", seq)
	if seq == startSeq {
		return nil
	}
	if seq%r.trainSrc.steps == 0 {
		return r.saveCheckpoint(seq, nil, params, state, running)
	}
	train := make([]float64, device.StatsLen)
	for i, v := range kept.trainStats {
		train[i] = float64(v)
	}
	if !finite(train[device.StatLossSum]) {
		return fmt.Errorf("training %w by step %d (epoch %d), found when the run was stopped; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
			ErrNonFinite, seq, seq/r.trainSrc.steps+1)
	}
	if n := train[device.StatCount]; n > 0 {
		r.sum.TrainLoss, r.sum.TrainAccuracy = train[device.StatLossSum]/n, train[device.StatCorrect]/n
	}
	return r.saveCheckpoint(seq, train, params, state, running)
}

// toHost copies the parameters, the optimizer state, a net's running
// state and the training accumulators (train) to pinned host memory.
func (r *run) toHost(train [device.StatsLen]float64) (*parked, error) {
	k := &parked{trainStats: make([]float32, device.StatsLen)}
	for i, v := range train {
		k.trainStats[i] = float32(v) // read from float32 accumulators: exact
	}
	var err error
	copyOut := func(b device.Buffer) (device.HostBuffer, error) {
		h, err := r.dev.AllocHost(b.Len())
		if err != nil {
			return h, err
		}
		return h, r.compute.CopyDtoH(h, b)
	}
	if k.params, err = copyOut(r.model.Params); err != nil {
		k.free(r.dev)
		return nil, err
	}
	for _, b := range r.model.State {
		h, err := copyOut(b)
		if !h.IsZero() {
			k.state = append(k.state, h)
		}
		if err != nil {
			k.free(r.dev)
			return nil, err
		}
	}
	if !r.model.Running.IsZero() {
		if k.running, err = copyOut(r.model.Running); err != nil {
			k.free(r.dev)
			return nil, err
		}
	}
	if err := r.compute.Synchronize(); err != nil {
		k.free(r.dev)
		return nil, err
	}
	return k, nil
}

func (k *parked) bytes() int64 {
	n := int64(k.params.Len() + k.running.Len())
	for _, s := range k.state {
		n += int64(s.Len())
	}
	return 4 * n
}

func (k *parked) free(dev device.Device) {
	var errs []error
	if !k.params.IsZero() {
		errs = append(errs, dev.FreeHost(k.params))
	}
	for _, s := range k.state {
		errs = append(errs, dev.FreeHost(s))
	}
	if !k.running.IsZero() {
		errs = append(errs, dev.FreeHost(k.running))
	}
	_ = errors.Join(errs...)
	k.params, k.state, k.running = device.HostBuffer{}, nil, device.HostBuffer{}
}

// teardown releases everything setup made (close) and forgets it, so that
// setup can run again and the run's final close finds nothing twice. The
// stagers' copies so far are kept in the count.
func (r *run) teardown() {
	r.close()
	r.stageCopiesBefore = r.stageCopies()
	r.train, r.eval, r.compute, r.side, r.timer, r.lease, r.model, r.marker = nil, nil, nil, nil, nil, nil, nil, nil
	r.host, r.snap, r.engine, r.pending = device.HostBuffer{}, device.Buffer{}, nil, nil
}

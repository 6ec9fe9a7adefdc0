package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// evalSlot offsets the pool slots of the evaluation graphs from the
// training graphs' (one slot per staging input buffer each).
const evalSlot = 100

// maxCaptureFailures bounds capture retries: after this many failures
// the run stays eager (still counting each step's fallback).
const maxCaptureFailures = 3

// stageTrain and stageEval name where a fallback happened in its event.
const (
	stageTrain = "train"
	stageEval  = "eval"
)

const prefetchReason = "graph capture needs a quiet device: host-to-device prefetch outside the staging guard would race the global-mode capture"

type run struct {
	trainPrint string // data.Fingerprint of the training set, once a checkpoint needs it
	cfg        Config
	dev        device.Device
	pool       *graphs.Pool
	log        *slog.Logger
	obs        Observer

	model             *nn.Model
	lease             *graphs.Lease
	engine            *graphs.Engine
	step              nn.Stepper // nn.Step for an MLP, nn.NetStep for any other net
	layout            nn.Layout
	compute           device.Stream
	side              device.Stream
	guard             *staging.Guard
	train             *staging.Stager
	eval              *staging.Stager
	trainSrc, evalSrc *source
	timer             *eventTimer
	marker            device.Event
	host              device.HostBuffer // 2*StatsLen: train and eval statistics

	samples           int     // valid training samples stepped in this run
	loopSeconds       float64 // wall time of the training loop in this run
	lastStats         [device.StatsLen]float64
	pending           *statsRead    // log-interval read in flight
	reportedSeq       int           // the last step whose interval was reported
	carried           float64       // samples in the training accumulators from before a resume
	stageCopiesBefore uint64        // batch copies before a resume
	snap              device.Buffer // the accumulators as of a read, copied on the compute stream
	sum               Summary
	unparking         bool         // setup restores a parked run (see park)
	warmFrom          int          // steps of this invocation before the current warm-up (an unpark starts one)
	stopped           []float32    // the final parameters of a run stopped while parked (see stopParked)
	ragged            raggedGraphs // the short batches' graphs under ragged policy graph
}

// Run trains according to cfg on dev: NewPlan, then Plan.Run.
func Run(ctx context.Context, dev device.Device, shared *Shared, cfg Config) (Summary, error) {
	p, err := NewPlan(cfg)
	if err != nil {
		return Summary{}, err
	}
	return p.Run(ctx, dev, shared)
}

// ErrNoShared refuses a run without the process's shared state.
var ErrNoShared = errors.New("trainer: Run needs the process's Shared state (NewShared, made once in main)")

// Run trains the plan on dev, taking it as it is: nothing is validated or
// loaded again. shared is the process's state: its guard keeps staging
// out of every capture, a device trains one run at a time, and graphs
// come from its pool when the configuration's GraphPoolReuse is set, else
// from a private pool closed at the end. Cancelling ctx stops the run
// after the step in flight and writes a checkpoint; the summary then has
// Interrupted set.
func (p *Plan) Run(ctx context.Context, dev device.Device, shared *Shared) (Summary, error) {
	if shared == nil {
		return Summary{}, ErrNoShared
	}
	cfg := p.cfg
	release, err := shared.claim(dev)
	if err != nil {
		return Summary{}, err
	}
	defer release()
	r := &run{cfg: cfg, dev: dev, log: cfg.Logger, obs: cfg.Observer}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.obs == nil {
		r.obs = NopObserver{}
	}
	r.pool, r.guard = shared.Pool(), shared.Guard()
	if !cfg.GraphPoolReuse {
		r.pool = graphs.NewPool()
		defer r.pool.Close()
	}
	startSeq := p.ResumeStep()
	var ck Checkpoint
	if p.ck != nil {
		ck = *p.ck
	}
	defer r.close()
	if err := r.billed(ctx, startSeq, &ck); err != nil {
		return Summary{}, err
	}
	err = r.loop(ctx, startSeq)
	if ferr := r.finish(); err == nil {
		err = ferr
	}
	return r.sum, err
}

// fits refuses, before anything is allocated, a run whose bill (model,
// optimizer state, workspace and input buffers) cannot fit in the
// device's memory.
func (r *run) fits() error {
	c := &r.cfg
	bill := BillFor(*c, r.dev)
	need := bill.DeviceBytes()
	m := r.dev.MemoryStats()
	if m.DeviceLimit > 0 && m.DeviceInUse+need > m.DeviceLimit {
		return fmt.Errorf("%w: the model %s at batch %d needs about %.1f GiB of device memory (%s), and device %s has %.1f GiB free; use a smaller model (--hidden, --layers) or batch (--batch-size)",
			device.ErrOutOfMemory, c.ModelName(), c.BatchSize, float64(need)/(1<<30), bill, r.dev.Name(), float64(m.DeviceLimit-m.DeviceInUse)/(1<<30))
	}
	return nil
}

// billed runs set-up and reports the run's bill next to the device memory
// and pinned host memory set-up actually took.
func (r *run) billed(ctx context.Context, startSeq int, ck *Checkpoint) error {
	before, source, berr := device.UsedMemory(r.dev)
	pinned := r.dev.MemoryStats().HostPinned
	if err := r.setup(ctx, startSeq, ck); err != nil {
		return err
	}
	after, _, aerr := device.UsedMemory(r.dev)
	if err := errors.Join(berr, aerr); err != nil {
		r.log.Warn("the device's memory could not be read; the bill is not checked", "err", err)
		return nil
	}
	m := MemoryBill{Estimate: BillFor(r.cfg, r.dev), ActualDevice: after - before,
		ActualPinned: r.dev.MemoryStats().HostPinned - pinned, Source: source}
	r.obs.Observe(m)
	r.obs.Observe(Event{Time: time.Now(), Kind: EventMemoryBill, Fields: m.Event()})
	return nil
}

func (r *run) setup(ctx context.Context, startSeq int, ck *Checkpoint) error {
	c := &r.cfg
	if err := r.fits(); err != nil {
		return err
	}
	if err := r.newModel(ck, startSeq); err != nil {
		return err
	}
	r.layout = nn.NewLayout(c.Spec, c.BatchSize)
	if err := r.newStep(); err != nil {
		return err
	}
	var err error
	if r.compute, err = r.dev.NewStream(); err != nil {
		return err
	}
	if r.side, err = r.dev.NewStream(); err != nil {
		return err
	}
	if r.marker, err = r.dev.NewEvent(); err != nil {
		return err
	}
	if r.host, err = r.dev.AllocHost(2 * device.StatsLen); err != nil {
		return err
	}
	if r.snap, err = r.dev.Alloc(2 * device.StatsLen); err != nil {
		return err
	}
	// A ring longer than the steps the host runs ahead of the device
	// (about one more than the pinned slots: five with the bench's four,
	// traced on the emulated driver), so that collecting the pair about to
	// be reused does not wait on the device.
	if r.timer, err = newEventTimer(r.dev, max(8, c.Slots+4), func(s float64) { r.obs.Observe(Replayed{Seconds: s}) }); err != nil {
		return err
	}
	if err := r.startStaging(ctx, startSeq); err != nil {
		return err
	}
	if err := r.newEngine(); err != nil {
		return err
	}
	trainStats, evalStats := r.step.Accumulators()
	if err := errors.Join(r.compute.Fill(trainStats, 0), r.compute.Fill(evalStats, 0)); err != nil {
		return err
	}
	r.advance(StageSetup)
	if c.Resume && !r.unparking {
		return r.carryOn(ck, startSeq)
	}
	return nil
}

// newModel allocates the model, an MLP's or a net's, and restores it from
// ck when the run resumes or unparks.
func (r *run) newModel(ck *Checkpoint, startSeq int) error {
	c := &r.cfg
	var err error
	if arch, ok := c.netArch(); ok {
		r.model, err = nn.NewNetModel(r.dev, arch, c.Optimizer, c.Seed)
	} else {
		r.model, err = nn.NewModel(r.dev, c.Spec, c.Optimizer, c.Seed)
	}
	if err != nil {
		return err
	}
	if !r.unparking && !c.Resume {
		return nil
	}
	err = r.model.Restore(ck.params, ck.state)
	if err == nil {
		err = r.model.RestoreRunning(ck.running)
	}
	if r.unparking {
		return err
	}
	if err != nil {
		return unreadError{fmt.Errorf("%w: %v", ErrCheckpoint, err)}
	}
	r.sum.ResumedFromStep = startSeq
	r.obs.Observe(Event{Time: time.Now(), Kind: EventResume, Fields: map[string]any{"step": startSeq}})
	return nil
}

// newStep leases the step's workspace from the graph pool and binds the
// step: the MLP's, or a net's.
func (r *run) newStep() error {
	c := &r.cfg
	var err error
	if arch, ok := c.netArch(); ok {
		sizes, err := nn.NetWorkspaceSizes(arch, c.BatchSize)
		if err != nil {
			return err
		}
		if r.lease, err = r.pool.Acquire(r.dev, c.stepSignature(), sizes); err != nil {
			return err
		}
		r.step, err = nn.NewNetStep(r.model, r.lease.Workspace(), c.BatchSize)
		return err
	}
	if r.lease, err = r.pool.Acquire(r.dev, c.stepSignature(), nn.WorkspaceSizes(c.Spec, c.BatchSize)); err != nil {
		return err
	}
	ws, err := nn.NewWorkspace(c.Spec, r.lease.Workspace())
	if err != nil {
		return err
	}
	r.step = &nn.Step{M: r.model, W: ws, Batch: c.BatchSize}
	return nil
}

// stepSignature is the pool signature of the run's step: a net's, or an
// MLP's.
func (c *Config) stepSignature() string {
	if arch, ok := c.netArch(); ok {
		return nn.NetSignature(arch, c.Optimizer, c.BatchSize)
	}
	return nn.Signature(c.Spec, c.Optimizer, c.BatchSize)
}

// advance reports that the run's work moved (Config.Advance).
func (r *run) advance(stage string) {
	if r.cfg.Advance != nil {
		r.cfg.Advance(stage)
	}
}

// carryOn continues the counters and, mid-epoch, the training
// accumulators of the run the checkpoint stopped.
func (r *run) carryOn(ck *Checkpoint, startSeq int) error {
	if t := ck.Totals; t != nil {
		r.sum.Steps, r.sum.GraphReplays, r.sum.EagerSteps = t.Steps, t.GraphReplays, t.EagerSteps
		r.sum.Captures, r.sum.CapturePooled = t.Captures, t.CapturePooled
		r.sum.CaptureSeconds, r.sum.CaptureColdSeconds = t.CaptureSeconds, t.CaptureColdSeconds
		r.sum.EvalReplays, r.sum.EvalEagerBatches = t.EvalReplays, t.EvalEagerBatches
		r.sum.EpochSeconds = slices.Clone(t.EpochSeconds)
		r.sum.Fallbacks = maps.Clone(t.Fallbacks)
		r.stageCopiesBefore = t.StageCopies
		if e := t.LastEpoch; e != nil {
			r.sum.TrainLoss, r.sum.TrainAccuracy, r.sum.TestAccuracy, r.sum.TestLoss = e.TrainLoss, e.TrainAccuracy, e.TestAccuracy, e.TestLoss
		}
	}
	if len(ck.TrainStats) != device.StatsLen || startSeq%r.trainSrc.steps == 0 {
		return nil
	}
	v := make([]float32, device.StatsLen)
	for i, x := range ck.TrainStats {
		v[i] = float32(x)
		r.lastStats[i] = float64(v[i])
	}
	r.carried = r.lastStats[device.StatCount]
	if err := r.compute.Synchronize(); err != nil {
		return err
	}
	trainStats, _ := r.step.Accumulators()
	return r.dev.Upload(trainStats.Slice(0, device.StatsLen), v)
}

// totals are the run's counters so far, for a checkpoint.
func (r *run) totals() *Totals {
	return &Totals{
		Steps: r.sum.Steps, GraphReplays: r.sum.GraphReplays, EagerSteps: r.sum.EagerSteps,
		Fallbacks: maps.Clone(r.sum.Fallbacks), Captures: r.sum.Captures, CapturePooled: r.sum.CapturePooled,
		CaptureSeconds: r.sum.CaptureSeconds, CaptureColdSeconds: r.sum.CaptureColdSeconds,
		EvalReplays: r.sum.EvalReplays, EvalEagerBatches: r.sum.EvalEagerBatches,
		EpochSeconds: slices.Clone(r.sum.EpochSeconds), StageCopies: r.stageCopies(),
		LastEpoch: r.lastEpoch(),
	}
}

// lastEpoch are the last finished epoch's figures; nil before one has.
func (r *run) lastEpoch() *EpochFigures {
	if len(r.sum.EpochSeconds) == 0 {
		return nil
	}
	return &EpochFigures{TrainLoss: r.sum.TrainLoss, TrainAccuracy: r.sum.TrainAccuracy, TestAccuracy: r.sum.TestAccuracy, TestLoss: r.sum.TestLoss}
}

// stageCopies is the number of batch copies of the whole run.
func (r *run) stageCopies() uint64 {
	n := r.stageCopiesBefore
	for _, st := range []*staging.Stager{r.train, r.eval} {
		if st != nil {
			n += st.Copies()
		}
	}
	return n
}

func (r *run) startStaging(ctx context.Context, startSeq int) error {
	c := &r.cfg
	var err error
	opt := c.Optimizer
	r.trainSrc, err = newSource(c.Train, r.layout, c.Spec, &opt, c.Seed, true, c.Ragged, c.Rank, c.World, c.Epochs)
	if err != nil {
		return err
	}
	if c.ObserveBatches {
		r.trainSrc.onBatch = func(seq int, indices []int) { r.obs.Observe(TrainBatch{Seq: seq, Indices: indices}) }
	}
	r.evalSrc, err = newSource(c.Test, r.layout, c.Spec, nil, c.Seed, false, data.RaggedPad, 0, 1, c.Epochs)
	if err != nil {
		return err
	}
	// Both stagers honour the process's guard (r.guard), as every other
	// trainer's in this process do: a global-mode capture is broken by an
	// unsafe call from any of them.
	base := staging.Config{BatchLen: r.layout.Len, Slots: c.Slots, Buffers: 2, Loaders: c.Loaders,
		PrefetchToDevice: c.PrefetchToDevice, Guard: r.guard, Logger: r.log, OnCopy: func(s float64) { r.obs.Observe(StageCopied{Seconds: s}) }}
	tc := base
	tc.StartSeq = startSeq
	tc.Logger = r.log.With("stager", "train")
	if r.train, err = staging.New(r.dev, tc, r.trainSrc); err != nil {
		return err
	}
	ec := base
	ec.Logger = r.log.With("stager", "eval")
	ec.StartSeq = (startSeq / r.trainSrc.steps) * r.evalSrc.steps
	if r.eval, err = staging.New(r.dev, ec, r.evalSrc); err != nil {
		return err
	}
	// The stagers outlive a cancelled ctx until the loop has drained.
	r.train.Start(context.WithoutCancel(ctx))
	r.eval.Start(context.WithoutCancel(ctx))
	return nil
}

// StepsPerEpoch is the number of training steps per epoch for cfg, for
// setting the schedule's TotalSteps before Run. It counts the batches
// without planning an epoch.
func StepsPerEpoch(cfg Config) (int, error) {
	if cfg.Train == nil {
		return 0, fmt.Errorf("no training set")
	}
	n, err := data.Batches(cfg.Train.Len(), cfg.Rank, cfg.World, cfg.BatchSize, cfg.Ragged)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, field.Errorf("schedule.batch_size", "dataset %s has too few examples (%d) for one batch of %d in shard %d of %d with ragged policy %s",
			cfg.Train.Shape().Name, cfg.Train.Len(), cfg.BatchSize, cfg.Rank, cfg.World, cfg.Ragged)
	}
	return n, nil
}

func (r *run) fallback(reason string, fields map[string]any) {
	if r.sum.Fallbacks == nil {
		r.sum.Fallbacks = make(map[string]int)
	}
	r.sum.Fallbacks[reason]++
	r.obs.Observe(Fallback{Reason: reason})
	if r.sum.Fallbacks[reason] == 1 || fields != nil {
		if fields == nil {
			fields = map[string]any{}
		}
		fields["reason"] = reason
		r.obs.Observe(Event{Time: time.Now(), Kind: EventFallback, Fields: fields})
		r.log.Warn("step runs eagerly", "reason", reason)
	}
}

func (r *run) loop(ctx context.Context, startSeq int) error {
	c := &r.cfg
	steps := r.trainSrc.steps
	total := c.Epochs * steps
	if ta, ok := r.dev.(device.ThreadAffine); ok && ta.PrefersLockedThread() {
		// The whole hot path then runs on one thread with the device
		// context current: no per-call rebinding, no goroutine hop.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	r.reportedSeq = startSeq - 1
	loopStart := time.Now()
	defer func() { r.loopSeconds = since(loopStart) }()
	epochStart, intervalStart := time.Now(), time.Now()
	intervalSamples, done := 0, 0
	r.obs.Observe(Epoch{Epoch: startSeq/steps + 1})
	for seq := startSeq; seq < total; seq++ {
		if ctx.Err() != nil || (c.MaxSteps > 0 && done >= c.MaxSteps) {
			return r.interrupt(seq, startSeq)
		}
		if seq%steps == 0 && seq != startSeq {
			r.obs.Observe(Epoch{Epoch: seq/steps + 1})
			epochStart = time.Now()
		}
		if c.CheckpointEvery > 0 && seq != startSeq && seq%c.CheckpointEvery == 0 && seq%steps != 0 {
			if err := r.checkpointMidEpoch(seq); err != nil {
				return err
			}
		}
		if c.Parker != nil && c.Parker.ParkRequested() {
			if err := r.park(ctx, seq, startSeq, done); err != nil {
				return err
			}
			if r.stopped != nil {
				return nil
			}
			if ctx.Err() != nil {
				return r.interrupt(seq, startSeq)
			}
		}
		if err := r.maybeCapture(seq, done-r.warmFrom); err != nil {
			return err
		}
		t0 := time.Now()
		b, err := r.train.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return r.interrupt(seq, startSeq)
			}
			return fmt.Errorf("trainer: staging step %d: %w", seq, err)
		}
		if err := r.runTrainStep(b); err != nil {
			return err
		}
		done++
		r.sum.Steps++
		r.obs.Observe(Stepped{Seconds: since(t0), Samples: b.Valid})
		r.advance(StageTrainStep)
		intervalSamples += b.Valid
		r.samples += b.Valid
		if (seq+1)%c.LogEvery == 0 {
			issued, err := r.logInterval(seq, intervalSamples, intervalStart)
			if err != nil {
				return err
			}
			if issued {
				intervalSamples, intervalStart = 0, time.Now()
			}
		} else if err := r.pollStats(); err != nil {
			return err
		}
		if (seq+1)%steps == 0 {
			if err := r.endEpoch(seq, epochStart, intervalSamples, intervalStart); err != nil {
				return err
			}
			intervalSamples, intervalStart = 0, time.Now()
		}
	}
	return nil
}

// checkpointMidEpoch saves the state before step seq, inside an epoch,
// with the epoch's training accumulators so far, as a stop there would;
// the run goes on.
func (r *run) checkpointMidEpoch(seq int) error {
	train, _, err := r.readStats()
	if err != nil {
		return err
	}
	if !finite(train[device.StatLossSum]) {
		return fmt.Errorf("training %w by step %d (epoch %d), found at a checkpoint; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
			ErrNonFinite, seq, seq/r.trainSrc.steps+1)
	}
	return r.checkpoint(seq, train[:])
}

// interrupt ends the loop before step seq: it reports the partial epoch's
// training metrics and checkpoints, unless no step ran since the start
// (then the run directory keeps what it had).
func (r *run) interrupt(seq, startSeq int) error {
	r.sum.Interrupted = true
	if seq == startSeq {
		return nil
	}
	if seq%r.trainSrc.steps != 0 {
		train, _, err := r.readStats()
		if err != nil {
			return err
		}
		if !finite(train[device.StatLossSum]) {
			return fmt.Errorf("training %w by step %d (epoch %d), found when the run was stopped; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
				ErrNonFinite, seq, seq/r.trainSrc.steps+1)
		}
		if n := train[device.StatCount]; n > 0 {
			r.sum.TrainLoss, r.sum.TrainAccuracy = train[device.StatLossSum]/n, train[device.StatCorrect]/n
		}
		return r.checkpoint(seq, train[:])
	}
	return r.checkpoint(seq, nil)
}

// runTrainStep issues one training step: wait for its copy, replay (or run
// eagerly, counting why), and record step-done for the stager.
func (r *run) runTrainStep(b staging.Staged) error {
	if err := r.compute.Wait(b.CopyDone); err != nil {
		return err
	}
	in := r.layout.Views(r.train.Input(b.K))
	if err := r.trainOn(b, in); err != nil {
		return err
	}
	if err := r.compute.Record(r.train.StepDone(b.K)); err != nil {
		return err
	}
	r.train.Release(b)
	return nil
}

func (r *run) trainOn(b staging.Staged, in nn.Batch) error {
	c := &r.cfg
	if b.Ragged && c.Ragged == data.RaggedGraph && c.EnableGraphs {
		return r.trainRagged(b, in)
	}
	if b.Ragged && (c.Ragged == data.RaggedEager || c.Ragged == data.RaggedGraph) {
		if c.EnableGraphs {
			r.fallback(graphs.ReasonRaggedBatch, map[string]any{"stage": stageTrain, "rows": b.Valid, "batch": c.BatchSize})
			r.obs.Observe(Event{Time: time.Now(), Kind: EventShapeChange, Fields: map[string]any{"rows": b.Valid, "batch": c.BatchSize}})
		}
		r.sum.EagerSteps++
		return r.step.WithBatch(b.Valid).Train(r.compute, nn.Batch{X: in.X.Slice(0, b.Valid*c.Spec.Inputs),
			Y: in.Y.Slice(0, b.Valid*c.Spec.LabelLen()), Mask: in.Mask.Slice(0, b.Valid), Hyper: in.Hyper})
	}
	timed := r.engine.Replays(b.K)
	var i int
	if timed {
		var err error
		if i, err = r.timer.begin(r.compute); err != nil {
			return err
		}
	}
	res, err := r.engine.Run(r.compute, b.K)
	r.ran(res, stageTrain)
	if err != nil || !res.Replayed {
		r.sum.EagerSteps++
		return err
	}
	r.sum.GraphReplays++
	return r.timer.end(r.compute, i)
}

// ran counts the fallback of a step or evaluation batch the engine ran
// eagerly although graphs are on; a failed replay is logged and its
// event names the stage and the error.
func (r *run) ran(res graphs.Result, stage string) {
	switch {
	case res.ReplayErr != nil:
		if stage == stageEval {
			r.log.Error("evaluation replay failed; evaluating eagerly and capturing again", "err", res.ReplayErr)
		} else {
			r.log.Error("replay failed; running the step eagerly and capturing again", "err", res.ReplayErr)
		}
		r.fallback(res.Reason, map[string]any{"stage": stage, "error": res.ReplayErr.Error()})
	case res.Reason != "":
		r.fallback(res.Reason, nil)
	}
}

// newEngine makes the step engine: per staging input buffer k, the
// training step on it in slot k and the evaluation step on the
// evaluation stager's buffer k in slot evalSlot+k.
func (r *run) newEngine() error {
	var slots []graphs.Slot
	for k := range r.train.Buffers() {
		tin, ein := r.layout.Views(r.train.Input(k)), r.layout.Views(r.eval.Input(k))
		slots = append(slots,
			graphs.Slot{ID: k, Step: func(s device.Stream) error { return r.step.Train(s, tin) }},
			graphs.Slot{ID: evalSlot + k, Step: func(s device.Stream) error { return r.step.Eval(s, ein) }})
	}
	// A new engine has a new lease: no short batch is captured in it yet.
	r.ragged = raggedGraphs{}
	var err error
	r.engine, err = graphs.NewEngine(graphs.EngineConfig{Lease: r.lease, Guard: graphs.GuardFunc(r.guardCapture),
		Slots: slots, MaxCaptureFailures: maxCaptureFailures})
	return err
}

// maybeCapture captures the training and evaluation steps once warm-up is
// over (done steps in this run), and after a failure again at the start of
// an epoch (seq is the global step).
func (r *run) maybeCapture(seq, done int) error {
	c := &r.cfg
	if !c.EnableGraphs || done < c.WarmupBatches || !r.engine.Due(seq%r.trainSrc.steps == 0) {
		return nil
	}
	r.advance(StageCapture)
	results, err := r.engine.Capture(r.compute)
	r.advance(StageCapture)
	if failed := (*graphs.CaptureError)(nil); errors.As(err, &failed) {
		r.log.Error("graph capture failed; steps run eagerly until the next attempt", "err", err, "failures", r.engine.CaptureFailures())
		r.fallback(graphs.ReasonCaptureFailed, map[string]any{"stage": "capture", "error": err.Error()})
		r.obs.Observe(GraphEnabled{On: false})
		return nil
	}
	if err != nil {
		return err
	}
	r.sum.GraphEnabled = true
	for _, res := range results {
		r.captured(res)
	}
	r.obs.Observe(GraphEnabled{On: true})
	r.obs.Observe(PoolReserved{Bytes: r.pool.Stats().ReservedBytes})
	r.log.Info("captured training and evaluation graphs", "graphs", len(results),
		"seconds", math.Round(r.sum.CaptureSeconds*1e9)/1e9, "pooled", r.sum.CapturePooled) // to the nanosecond: a sum of floats prints its noise
	return nil
}

// captured counts one capture in the summary and reports it.
func (r *run) captured(res graphs.CaptureResult) {
	if res.Leftover != nil {
		r.log.Warn("the captured graph could not be destroyed after instantiation; it may stay allocated", "err", res.Leftover)
	}
	r.sum.Captures++
	r.sum.CaptureSeconds += res.Seconds
	if res.Pooled {
		r.sum.CapturePooled++
		r.obs.Observe(ExecUpdated{})
	} else {
		r.sum.CaptureColdSeconds += res.Seconds
	}
	r.obs.Observe(Captured{Seconds: res.Seconds, Pooled: res.Pooled})
	r.obs.Observe(Event{Time: time.Now(), Kind: EventCapture, Fields: map[string]any{
		"seconds": res.Seconds, "pooled": res.Pooled, "nodes": res.Nodes}})
}

// guardCapture runs capture under the process's staging guard, with both
// stagers' prefetch to device switched off around it: a prefetch outside
// the guard would race the global-mode capture.
func (r *run) guardCapture(capture func() error) error {
	prefetchWasOn := r.train.PrefetchToDevice() || r.eval.PrefetchToDevice()
	r.train.DisablePrefetch(prefetchReason)
	r.eval.DisablePrefetch(prefetchReason)
	if prefetchWasOn {
		// Off around the capture only: the stagers honour the guard then.
		r.sum.PrefetchDisabled = true
		r.obs.Observe(PrefetchDisabled{Disabled: true})
		r.obs.Observe(Event{Time: time.Now(), Kind: EventPrefetchOff, Fields: map[string]any{"reason": prefetchReason}})
		defer func() {
			r.train.EnablePrefetch()
			r.eval.EnablePrefetch()
			r.obs.Observe(PrefetchDisabled{Disabled: false})
		}()
	}
	return r.guard.Capture(capture)
}

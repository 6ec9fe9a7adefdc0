package dqn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/staging"
	"github.com/tolaria-ml/tolaria/trainer"
)

// ErrNotFinite: the learner's loss or parameters became NaN or infinite.
var ErrNotFinite = errors.New("not finite")

// nonFinite counts the NaN and infinite values of v.
func nonFinite(v []float32) int {
	n := 0
	for _, x := range v {
		if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
			n++
		}
	}
	return n
}

// Shared is what the learners and actors of one process share: the graph
// pool and the capture guard (one per process, see staging.Guard).
type Shared struct {
	Pool  *graphs.Pool
	Guard *staging.Guard
}

// NewShared returns an empty pool and a guard.
func NewShared() *Shared { return &Shared{Pool: graphs.NewPool(), Guard: new(staging.Guard)} }

// LearnerOptions are the learner's runtime choices beyond Config.
type LearnerOptions struct {
	// Graphs replays the training step captured by Capture; off, every
	// step runs eagerly.
	Graphs bool
	Logger *slog.Logger
	// Observer, when set, is told the graph activity of the training
	// step (GraphLearner) as a training run reports its own: captures,
	// replays with their device time, fallbacks and their events. It is
	// called from the goroutine that runs the learner.
	Observer trainer.Observer
}

// Learner trains one agent's online network on minibatches sampled from
// its replay buffer and publishes the weights into its shared memory.
// Staging loaders sample the buffer (never faster than TrainEvery
// environment steps per training step past LearningStarts) while the
// compute stream replays the captured step.
type Learner struct {
	cfg     Config
	opts    LearnerOptions
	dev     device.Device
	mem     *shm.Memory
	log     *slog.Logger
	shared  *Shared
	layout  Layout
	model   *nn.Model
	target  device.Buffer
	step    *QStep
	lease   *graphs.Lease
	engine  *graphs.Engine
	stager  *staging.Stager
	compute device.Stream
	host    device.HostBuffer // the parameters on their way to shared memory
	stats   device.HostBuffer
	done    device.Event

	report *graphReport
	timer  *replayTimer // from the first capture on

	src       *replaySource
	steps     atomic.Int64
	loss      atomic.Uint64 // float64 bits of the last interval's mean loss
	publishes atomic.Int64
}

// NewLearner makes agent's learner on dev over its shared memory: the
// online network initialised from the agent's seed, the target a copy of
// it, the step's workspace from the pool and the staging pipeline.
func NewLearner(dev device.Device, shared *Shared, mem *shm.Memory, cfg Config, agent int, opts LearnerOptions) (*Learner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	spec, err := cfg.Spec()
	if err != nil {
		return nil, err
	}
	if mem.Layout() != cfg.Layout(spec) {
		return nil, fmt.Errorf("dqn: learner: %w: memory %s is laid out as %+v, the configuration needs %+v",
			shm.ErrMismatch, mem.Path(), mem.Layout(), cfg.Layout(spec))
	}
	l := &Learner{cfg: cfg, opts: opts, dev: dev, mem: mem, log: opts.Logger, shared: shared, layout: NewLayout(spec, cfg.BatchSize),
		report: newGraphReport(opts.Observer, shared.Pool, GraphLearner, true)}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if err := l.build(spec, cfg.AgentSeed(agent)); err != nil {
		return nil, errors.Join(err, l.Close())
	}
	return l, nil
}

func (l *Learner) build(spec nn.Spec, seed uint64) error {
	cfg, dev := l.cfg, l.dev
	var err error
	if l.model, err = nn.NewModel(dev, spec, cfg.Optimizer, seed); err != nil {
		return err
	}
	if l.target, err = dev.Alloc(spec.ParamCount()); err != nil {
		return err
	}
	if l.lease, err = l.shared.Pool.Acquire(dev, Signature(spec, cfg.Optimizer, cfg.BatchSize), StepSizes(spec, cfg.BatchSize)); err != nil {
		return err
	}
	if l.step, err = NewQStep(dev, l.model, l.target, cfg.BatchSize, float32(cfg.Gamma), float32(cfg.HuberDelta), l.lease.Workspace()); err != nil {
		return err
	}
	if l.compute, err = dev.NewStream(); err != nil {
		return err
	}
	if l.done, err = dev.NewEvent(); err != nil {
		return err
	}
	if l.host, err = dev.AllocHost(spec.ParamCount()); err != nil {
		return err
	}
	if l.stats, err = dev.AllocHost(device.StatsLen); err != nil {
		return err
	}
	l.src = &replaySource{mem: l.mem, layout: l.layout, cfg: cfg, seed: seed}
	l.stager, err = staging.New(dev, staging.Config{BatchLen: l.layout.Len, Slots: learnerSlots, Buffers: learnerBuffers, Loaders: 1,
		Guard: l.shared.Guard, Logger: l.log}, l.src)
	if err != nil {
		return err
	}
	var slots []graphs.Slot
	for k := range l.stager.Buffers() {
		in := l.layout.Views(l.stager.Input(k))
		slots = append(slots, graphs.Slot{ID: k, Step: func(s device.Stream) error { return l.step.Train(s, in) }})
	}
	l.engine, err = graphs.NewEngine(graphs.EngineConfig{Lease: l.lease, Slots: slots, MaxCaptureFailures: 3,
		Guard: graphs.GuardFunc(func(c func() error) error { return l.stager.GuardCapture("learner capture", c) })})
	if err != nil {
		return err
	}
	if err := dev.Upload(l.step.Stats(), make([]float32, device.StatsLen)); err != nil {
		return err
	}
	return errors.Join(l.step.SyncTarget(l.compute), l.compute.Synchronize())
}

// Steps is the number of training steps taken.
func (l *Learner) Steps() int { return int(l.steps.Load()) }

// Loss is the mean Huber loss over the last publish interval.
func (l *Learner) Loss() float64 { return math.Float64frombits(l.loss.Load()) }

// Publishes is the number of weight publishes; safe from any goroutine.
func (l *Learner) Publishes() int64 { return l.publishes.Load() }

// Waiting reports whether the learner waits for the actor's transitions
// rather than trains; safe from any goroutine.
func (l *Learner) Waiting() bool { return l.src.waiting.Load() }

// Fallbacks is the number of steps that ran eagerly although graphs were
// on; LearnerOptions.Observer hears each with its reason.
func (l *Learner) Fallbacks() int {
	if l.report == nil { // closed
		return 0
	}
	return l.report.eager
}

// Capture captures the training step, when graphs are on. Every buffer
// the step uses exists from NewLearner on, so no warm-up is needed. A
// failed capture is logged and reported, and the steps run eagerly
// (Fallbacks counts them). Call it before Run, while no other device work
// of the process is in flight: a capture is global.
func (l *Learner) Capture() error {
	if !l.opts.Graphs || !l.engine.Due(false) {
		return nil
	}
	results, err := l.engine.Capture(l.compute)
	var failed *graphs.CaptureError
	switch {
	case errors.As(err, &failed):
		l.log.Error("learner capture failed; steps run eagerly", "err", err)
		l.report.captureFailed(err)
		return nil
	case err != nil:
		return err
	}
	l.report.captured(results)
	if l.timer == nil {
		l.timer, err = newReplayTimer(l.dev, l.report.obs, 4)
	}
	return err
}

// Run publishes the initial weights, then trains until the agent's stop
// flag is set (the replay source then ends) or ctx is done, publishing
// every PublishInterval steps (in lockstep, every LockstepTrain steps)
// and at the end.
func (l *Learner) Run(ctx context.Context) error {
	ctx, stop, err := l.start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	for {
		ended, err := l.next(ctx)
		if err != nil {
			return err
		}
		if ended {
			return l.publish()
		}
	}
}

// start publishes the initial weights and starts staging minibatches;
// stop, called once training is over, lets a loader waiting for
// transitions that will not come give up, and cancels the staging.
func (l *Learner) start(ctx context.Context) (_ context.Context, stop func(), _ error) {
	if err := l.publish(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	l.stager.Start(ctx)
	return ctx, func() {
		l.src.quit.Store(true)
		cancel()
	}, nil
}

// next takes one training step on the next staged minibatch, waiting for
// it; ended reports that the replay source has ended (the stop flag).
func (l *Learner) next(ctx context.Context) (ended bool, _ error) {
	b, err := l.stager.Next(ctx)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("dqn: learner step %d: %w", l.Steps()+1, err)
	}
	return false, l.train(b)
}

func (l *Learner) train(b staging.Staged) error {
	n := l.Steps()
	if err := l.compute.Wait(b.CopyDone); err != nil {
		return err
	}
	step := func() (graphs.Result, error) { return l.engine.Run(l.compute, b.K) }
	var res graphs.Result
	var err error
	if l.timer != nil {
		res, err = l.timer.run(l.compute, l.engine.Replays(b.K), step)
	} else {
		res, err = step()
	}
	l.report.ran(res)
	if err != nil {
		return fmt.Errorf("dqn: learner step %d: %w", n+1, err)
	}
	if err := l.compute.Record(l.stager.StepDone(b.K)); err != nil {
		return err
	}
	l.stager.Release(b)
	n++
	l.steps.Store(int64(n))
	if n%l.cfg.TargetUpdate == 0 {
		sync := l.step.SyncTarget
		if l.cfg.TargetTau > 0 {
			sync = func(s device.Stream) error { return l.step.SoftUpdateTarget(s, float32(l.cfg.TargetTau)) }
		}
		if err := sync(l.compute); err != nil {
			return err
		}
	}
	every := l.cfg.PublishInterval
	if l.cfg.Lockstep {
		every = l.cfg.LockstepTrain // the end of a round
	}
	if n%every == 0 {
		return l.publish()
	}
	return nil
}

// publish copies the parameters and the loss statistics to pinned host
// memory, waits for them, clears the statistics and publishes the
// parameters with the step count.
func (l *Learner) publish() error {
	s := l.compute
	err := errors.Join(s.CopyDtoH(l.host, l.model.Params), s.CopyDtoH(l.stats, l.step.Stats()),
		s.Fill(l.step.Stats(), 0), s.Record(l.done))
	if err == nil {
		err = l.done.Synchronize()
	}
	if err != nil {
		return fmt.Errorf("dqn: learner publish: %w", err)
	}
	st := l.stats.Data()
	n := l.Steps()
	if st[device.StatCount] > 0 {
		loss := float64(st[device.StatLossSum]) / float64(st[device.StatCount])
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("dqn: learner step %d: %w: the loss is %g; nothing was published and the last checkpoint is kept", n, ErrNotFinite, loss)
		}
		l.loss.Store(math.Float64bits(loss))
	}
	// Weights that went non-finite would spread to the actor and, at the
	// end, into the checkpoint: the learner stops at the first publish
	// that finds them.
	if bad := nonFinite(l.host.Data()); bad > 0 {
		return fmt.Errorf("dqn: learner step %d: %w: %d of %d parameters are NaN or infinite; nothing was published and the last checkpoint is kept",
			n, ErrNotFinite, bad, l.host.Len())
	}
	if _, err := l.mem.Publish(l.host.Data(), uint64(n)); err != nil {
		return err
	}
	l.mem.SetLearnerSteps(uint64(n))
	l.publishes.Add(1)
	return nil
}

// Close stops staging and frees what the learner allocated.
func (l *Learner) Close() error {
	var errs []error
	if l.stager != nil {
		errs = append(errs, l.stager.Stop())
	}
	if l.compute != nil {
		errs = append(errs, l.compute.Synchronize())
	}
	if l.timer != nil {
		errs = append(errs, l.timer.flush(), l.timer.destroy())
	}
	if l.compute != nil {
		errs = append(errs, l.compute.Destroy())
	}
	if l.done != nil {
		errs = append(errs, l.done.Destroy())
	}
	for _, h := range []device.HostBuffer{l.host, l.stats} {
		if !h.IsZero() {
			errs = append(errs, l.dev.FreeHost(h))
		}
	}
	if l.lease != nil {
		errs = append(errs, l.lease.Release())
	}
	if !l.target.IsZero() {
		errs = append(errs, l.dev.Free(l.target))
	}
	if l.model != nil {
		errs = append(errs, l.model.Free())
	}
	*l = Learner{}
	return errors.Join(errs...)
}

// replaySource samples the staging pipeline's minibatches from the replay
// buffer. Batch seq (0-based) waits until LearningStarts + seq*TrainEvery
// transitions have been appended, which holds the learner to its replay
// ratio however fast it runs; it ends (io.EOF) when the stop flag is set.
type replaySource struct {
	mem    *shm.Memory
	layout Layout
	cfg    Config
	seed   uint64
	// base is the steps a resumed learner had taken: batch seq is the
	// learner's step base+seq.
	base    int
	waiting atomic.Bool
	quit    atomic.Bool // the learner's Run has ended
}

func (r *replaySource) Fill(batch int, dst []float32) (staging.Meta, error) {
	seq := r.base + batch
	// A buffer started again empty (shm.StartAt) is refilled with
	// learning_starts transitions before the learner samples it.
	need := max(uint64(r.cfg.LearningStarts+seq*r.cfg.TrainEvery), r.mem.First()+uint64(r.cfg.LearningStarts))
	pause := func() { time.Sleep(200 * time.Microsecond) }
	if r.cfg.Lockstep {
		need = r.cfg.lockstepNeed(seq, r.mem.First())
		var b backoff // the actor's whole round may pass
		pause = b.wait
	}
	for r.mem.Appended() < need {
		if r.mem.Stopped() || r.quit.Load() {
			r.waiting.Store(false)
			return staging.Meta{}, io.EOF
		}
		r.waiting.Store(true)
		pause()
	}
	r.waiting.Store(false)
	if r.mem.Stopped() {
		return staging.Meta{}, io.EOF
	}
	b := shm.NewBatch(r.mem.Layout(), r.layout.Batch)
	if err := r.mem.Sample(rand.New(rand.NewPCG(r.seed, uint64(seq))), b); err != nil {
		return staging.Meta{}, err
	}
	if err := r.layout.Fill(dst, b.Obs, b.NextObs, b.Actions, b.Rewards, b.Terminated); err != nil {
		return staging.Meta{}, err
	}
	r.cfg.Optimizer.Hyper(seq+1, dst[r.layout.Hyper:r.layout.Hyper+device.HyperLen])
	return staging.Meta{Seq: batch, Step: seq, Valid: r.layout.Batch}, nil
}

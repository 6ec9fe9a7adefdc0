// Package jobserver serves tolaria's jobs over the worker protocol. Serve
// is the worker's side: it opens the device a request names and runs the
// job (job.Plan.Run) or the benchmark (bench.Run) on it, forwarding the
// trainer's measurements and progress and classifying a failure into the
// protocol's error kinds. Run and Bench are the coordinator's side of the
// same two requests, so both ends of each payload (the job, the summary,
// the benchmark's configuration and report) are encoded and decoded here.
//
// It is a package of its own, and named for serving jobs, because it sits
// between two that must stay apart: worker, the protocol and its
// transports, which carries payloads it never decodes and so imports no
// job, trainer or bench; and coordinator, which starts and watches worker
// processes and which the worker binary must not link. tolaria-worker and
// the coordinator's in-process CPU path both serve through it.
package jobserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Opener opens the named device ("cpu" or "cuda") for a job.
type Opener func(name string, spec job.Spec) (device.Device, error)

// OpenCPU opens the CPU device for a job; any other name is refused.
func OpenCPU(name string, spec job.Spec) (device.Device, error) {
	if name != "cpu" {
		return nil, fmt.Errorf("%w: %q is not served in process; only cpu is", device.ErrNoDevice, name)
	}
	return cpu.Open(cpu.Config{
		SlowCopy: time.Duration(spec.SlowStageCopyMS * float64(time.Millisecond)),
		Threads:  spec.CPUThreads,
	})
}

// Config configures the worker side.
type Config struct {
	Build string // "cuda" or "cpu": how this worker was built
	Open  Opener
	// Shared is the process's state (graph pool, capture guard, devices in
	// use), made once in main: required.
	Shared *trainer.Shared
	Logger *slog.Logger
	// Plan, when set, is the job planned in this process for the spec that
	// the start message carries (see InProcess): Serve runs it as it is
	// rather than validating, loading and planning the spec again. A worker
	// process has none: a spec from another process is checked here.
	Plan *job.Plan
	// AfterStep, when set, is called after every training step with the
	// job and the steps of this invocation so far. Only tolaria-worker's
	// test-only fault switch (FaultEnv) sets it.
	AfterStep func(spec job.Spec, steps int)
	// Devices lists the GPUs for a TypeDevices request; nil in a worker
	// built without CUDA, which then answers that it has none.
	Devices func() ([]GPU, error)
	// AfterEvalBatch, when set, is called after every batch of an
	// evaluation shard with the request and the batches scored so far.
	// Only tolaria-worker's test-only fault switch sets it.
	AfterEvalBatch func(ej EvalJob, batches int)

	// contextBytes is, for a request that asks for a budget, what the
	// device held once opened (see contextBytes): the bill's Context.
	contextBytes int64
	// kept is, in a kept worker (ServeKept), the device it keeps for one
	// job after another; nil in a worker of one request.
	kept *keptDevice
}

// Serve answers one request read from in: a probe, a job, an evaluation
// shard (TypeEval), a reinforcement-learning role (TypeRL), a sampling job
// (TypeSample) or a benchmark.
// It writes the protocol to out and returns when the request is done and
// in is closed or cancelled.
func Serve(ctx context.Context, in io.Reader, out io.Writer, cfg Config) error {
	if cfg.Shared == nil {
		return errors.New("jobserver: Config.Shared is nil: make one trainer.Shared in main and pass it")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	conn, err := worker.Accept(in, out)
	if err != nil {
		return err
	}
	return serveConn(ctx, conn, cfg)
}

// serveConn answers the request conn read, on a device of its own, or for
// a job in a kept worker on the device kept (cfg.kept).
func serveConn(ctx context.Context, conn *worker.Conn, cfg Config) error {
	// Heartbeats flow from here to the end of the request, device
	// start-up and a long step included.
	defer conn.StartHeartbeat()()
	req := conn.Request()
	switch req.Type {
	case TypeDevices:
		return serveDevices(conn, cfg)
	case TypePlan:
		return servePlan(conn, cfg)
	case TypeEvalPlan:
		return serveEvalPlan(conn, cfg)
	}
	if req.Type != worker.TypeStart && req.Type != worker.TypeProbe && req.Type != worker.TypeBench && req.Type != TypeEval && req.Type != TypeRL && req.Type != TypeSample {
		return conn.Fail(usage("first message must be start, bench, eval, eval-plan, rl, sample, devices, plan or probe, got " + req.Type))
	}
	spec := job.Default()
	if req.Type == worker.TypeStart && len(req.Body) > 0 {
		var sent job.Spec
		if err := json.Unmarshal(req.Body, &sent); err != nil {
			return conn.Fail(usage(fmt.Sprintf("the job cannot be read: %v", err)))
		}
		spec = sent
	}
	var ej EvalJob
	if req.Type == TypeEval {
		if err := json.Unmarshal(req.Body, &ej); err != nil {
			return conn.Fail(usage(fmt.Sprintf("the evaluation cannot be read: %v", err)))
		}
		spec = ej.Spec
	}
	var sj SampleJob
	if req.Type == TypeSample {
		if err := json.Unmarshal(req.Body, &sj); err != nil {
			return conn.Fail(usage(fmt.Sprintf("the sampling job cannot be read: %v", err)))
		}
		spec = sj.Spec
	}
	var rj RLJob
	if req.Type == TypeRL {
		if err := json.Unmarshal(req.Body, &rj); err != nil {
			return conn.Fail(usage(fmt.Sprintf("the reinforcement-learning job cannot be read: %v", err)))
		}
		if err := rj.Validate(); err != nil {
			return conn.Fail(usage("reinforcement-learning job: " + err.Error()))
		}
		spec.CPUThreads = rj.Threads
		cfg.Logger.Info("serving "+rlDescribe(rj), "agent", rj.Agent, "role", rj.Role)
	}
	dev, keptJob, err := cfg.openFor(req, spec)
	if err != nil {
		return conn.Fail(&worker.Error{Kind: worker.KindNoDevice, Message: err.Error()})
	}
	// ended: the kept device was reset once the job ended, before its
	// answer (keptDevice.end).
	ended := false
	defer func() {
		if keptJob {
			if !ended {
				// Kept for the next job, if the job left it as it found it.
				cfg.kept.after(cfg, dev)
			}
			return
		}
		// The pool may outlive this request (in process); it keeps
		// nothing of a closed device. The request's answer is sent; a
		// failure to release is only worth a warning.
		if err := errors.Join(cfg.Shared.Pool().Drop(dev), dev.Close()); err != nil {
			cfg.Logger.Warn("closing the device failed", "device", dev.Name(), "err", err)
		}
	}()
	// A job and an evaluation advance the work counter as they go (see
	// worker.Conn.Advance); a benchmark's phases are not counted, so its
	// worker is watched for silence only.
	hello := worker.Hello{Device: dev.Name(), Description: dev.Description(), Build: cfg.Build, PID: os.Getpid(),
		Advances: req.Type == worker.TypeStart || req.Type == TypeEval || req.Type == TypeRL || req.Type == TypeSample}
	if req.AskBudget && !keptJob {
		// Nothing is allocated yet: what the device holds of this process
		// is its context and modules, which the bill counts (a kept
		// job's is measured once the pool holds only its step, in runJob).
		if cfg.contextBytes, err = contextBytes(dev, cfg.Logger); err != nil {
			return conn.Fail(&worker.Error{Kind: worker.KindNoDevice, Message: err.Error()})
		}
	}
	if err := conn.Hello(hello); err != nil || req.Type == worker.TypeProbe {
		return err
	}
	if req.Type == worker.TypeBench {
		// The benchmark opens its own devices; give this one back first.
		_ = dev.Close()
		return serveBench(ctx, conn, spec, cfg)
	}

	runCtx, wait := conn.WatchCancel(ctx)
	switch req.Type {
	case TypeEval:
		var res EvalResult
		if res, err = serveEval(runCtx, conn, ej, dev, cfg); err == nil {
			err = conn.Result(res)
		}
	case TypeSample:
		var res SampleResult
		if res, err = serveSample(runCtx, sj, dev, conn.Advance); err == nil {
			err = conn.Result(res)
		}
	case TypeRL:
		var res RLResult
		if res, err = serveRL(runCtx, conn, rj, dev, cfg); err == nil {
			err = conn.Result(res)
		}
	default:
		var sum trainer.Summary
		sum, err = runJob(runCtx, conn, spec, dev, cfg)
		if keptJob {
			// Reset before the answer, so that the answer says what the
			// process holds while it waits for the next job.
			ended = true
			cfg.kept.end(cfg, dev, conn)
		}
		if err == nil {
			err = conn.Result(sum)
		}
	}
	if err != nil {
		if serr := conn.Fail(classify(err)); serr != nil {
			// Nothing reaches the coordinator: end the request, so the
			// coordinator sees the worker go instead of waiting.
			return fmt.Errorf("worker: reporting %v: %w", err, serr)
		}
	}
	wait()
	return nil
}

func usage(msg string) *worker.Error { return &worker.Error{Kind: worker.KindUsage, Message: msg} }

func runJob(ctx context.Context, conn *worker.Conn, spec job.Spec, dev device.Device, cfg Config) (trainer.Summary, error) {
	plan := cfg.Plan
	if plan == nil {
		var err error
		if plan, err = planJob(spec, conn.Advance); err != nil {
			return trainer.Summary{}, err
		}
	}
	if cfg.kept != nil {
		// A kept device's pool keeps only this job's step: other
		// signatures' workspace is no part of its bill.
		if err := cfg.Shared.Pool().Retain(dev, plan.Trainer.Signature()); err != nil {
			return trainer.Summary{}, fmt.Errorf("freeing the kept device's pooled workspace of other steps: %w", err)
		}
		var err error
		if cfg.contextBytes, err = cfg.kept.held(cfg, dev); err != nil {
			return trainer.Summary{}, err
		}
	}
	if conn.Request().AskBudget {
		// Nothing is on the device yet: the budget is granted first.
		bill := plan.Trainer.Bill(dev)
		bill.Context = cfg.contextBytes
		if err := askBudget(ctx, conn, bill, dev); err != nil {
			return trainer.Summary{}, err
		}
	}
	progress := func(p trainer.Progress) {
		if body, err := json.Marshal(p); err == nil {
			_ = conn.Progress(body)
		}
	}
	var obs trainer.Observer = remoteObserver{conn}
	if cfg.AfterStep != nil {
		obs = &stepCounter{Observer: obs, after: func(n int) { cfg.AfterStep(plan.Spec, n) }}
	}
	opts := job.Options{Logger: cfg.Logger, Observer: obs, Progress: progress, Advance: conn.Advance}
	if conn.Request().AskBudget {
		// A worker that keeps a budget may be told to park it.
		opts.Parker = connParker{conn}
	}
	return plan.Run(ctx, dev, cfg.Shared, opts)
}

// planJob validates a spec received from another process, loads its data
// and plans it: once, in this process. The load's progress goes to
// advance.
func planJob(spec job.Spec, advance func(stage string)) (*job.Plan, error) {
	if err := spec.Validate(); err != nil {
		return nil, usage(err.Error())
	}
	train, test, err := spec.LoadDataAdvancing(advance)
	if err != nil {
		return nil, err
	}
	return spec.Plan(train, test)
}

// remoteObserver is the worker side of trainer.Observer: every
// measurement becomes an observe message. One that cannot be encoded (a
// NaN) is dropped, as a message that cannot be sent is.
type remoteObserver struct{ conn *worker.Conn }

func (o remoteObserver) Observe(m trainer.Measurement) {
	name, body, err := trainer.EncodeMeasurement(m)
	if err != nil {
		return
	}
	_ = o.conn.Observe(name, body)
}

// classify maps an error to the kind the coordinator acts on.
func classify(err error) *worker.Error {
	var we *worker.Error
	kind := worker.KindFailure
	switch {
	case errors.As(err, &we):
		return we
	case errors.Is(err, trainer.ErrCheckpoint):
		return &worker.Error{Kind: worker.KindCheckpoint, Message: err.Error(), Unread: errors.Is(err, trainer.ErrCheckpointUnread)}
	case errors.Is(err, trainer.ErrNonFinite):
		kind = worker.KindNonFinite
	case errors.Is(err, data.ErrMissing), errors.Is(err, data.ErrCorrupt), errors.Is(err, data.ErrInvalid):
		kind = worker.KindUsage
	case errors.Is(err, device.ErrNoDevice):
		kind = worker.KindNoDevice
	}
	return &worker.Error{Kind: kind, Message: err.Error()}
}

// serveBench runs the benchmark on the requested device and answers with
// its report. Progress lines travel as log messages.
func serveBench(ctx context.Context, conn *worker.Conn, spec job.Spec, cfg Config) error {
	req := conn.Request()
	if len(req.Body) == 0 {
		return conn.Fail(usage("bench request without a configuration"))
	}
	var bc bench.Config
	if err := json.Unmarshal(req.Body, &bc); err != nil {
		return conn.Fail(usage(fmt.Sprintf("the benchmark's configuration cannot be read: %v", err)))
	}
	bc = bc.WithDefaults()
	if err := bc.Validate(); err != nil {
		return conn.Fail(usage(err.Error()))
	}
	bc.Progress = func(msg string) { _ = conn.Log(msg) }
	open := func() (device.Device, error) { return cfg.Open(req.Device, spec) }
	rep, err := bench.Run(ctx, cfg.Shared.Guard(), open, bc)
	if err == nil {
		err = conn.Result(rep)
	}
	if err != nil {
		return conn.Fail(classify(err))
	}
	return nil
}

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Opener opens the named device ("cpu" or "cuda") for a job.
type Opener func(name string, spec job.Spec) (device.Device, error)

// ServeConfig configures the worker side.
type ServeConfig struct {
	Build  string // "cuda" or "cpu": how this worker was built
	Open   Opener
	Pool   *graphs.Pool // the worker process's shared graph pool
	Logger *slog.Logger
	// Plan, when set, is the job planned in this process for the spec that
	// the start message carries (see RunInProcess): Serve runs it as it is
	// rather than validating, loading and planning the spec again. A worker
	// process has none: a spec from another process is checked here.
	Plan *job.Plan
}

// Serve answers one request read from in: a probe or a job. It writes the
// protocol to out and returns when the request is done and in is closed
// or cancelled.
func Serve(ctx context.Context, in io.Reader, out io.Writer, cfg ServeConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Pool == nil {
		cfg.Pool = graphs.NewPool()
		defer cfg.Pool.Close()
	}
	dec, enc := newDecoder(in), newEncoder(out)
	first, err := dec.next()
	if err != nil {
		return fmt.Errorf("worker: reading the request: %w", err)
	}
	if first.Type != TypeStart && first.Type != TypeProbe && first.Type != TypeBench {
		return enc.send(Message{Type: TypeError, Error: &Error{Kind: KindUsage, Message: "first message must be start, bench or probe, got " + first.Type}})
	}
	spec := job.Default()
	if first.Job != nil {
		spec = *first.Job
	}
	dev, err := cfg.Open(first.Device, spec)
	if err != nil {
		return enc.send(Message{Type: TypeError, Error: &Error{Kind: KindNoDevice, Message: err.Error()}})
	}
	defer func() {
		// The pool may outlive this request (in process); it keeps
		// nothing of a closed device.
		_ = cfg.Pool.Drop(dev)
		_ = dev.Close()
	}()
	hello := &Hello{Device: dev.Name(), Description: dev.Description(), Build: cfg.Build, PID: os.Getpid()}
	if err := enc.send(Message{Type: TypeHello, Hello: hello}); err != nil || first.Type == TypeProbe {
		return err
	}
	if first.Type == TypeBench {
		// The benchmark opens its own devices; give this one back first.
		_ = dev.Close()
		return serveBench(ctx, first, spec, cfg, enc)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	readerDone := make(chan struct{})
	go func() {
		// Any further message, or the end of input, asks the run to stop.
		defer close(readerDone)
		for {
			m, err := dec.next()
			if err != nil || m.Type == TypeCancel {
				cancel()
				if err != nil {
					return
				}
			}
		}
	}()
	sum, err := runJob(runCtx, spec, dev, cfg, enc)
	if err == nil {
		err = sendResult(enc, Message{Type: TypeResult, Summary: &sum})
	}
	if err != nil {
		if serr := enc.send(Message{Type: TypeError, Error: classify(err)}); serr != nil {
			// Nothing reaches the coordinator: end the request, so the
			// coordinator sees the worker go instead of waiting.
			return fmt.Errorf("worker: reporting %v: %w", err, serr)
		}
	}
	<-readerDone
	return nil
}

func runJob(ctx context.Context, spec job.Spec, dev device.Device, cfg ServeConfig, enc *encoder) (trainer.Summary, error) {
	plan := cfg.Plan
	if plan == nil {
		var err error
		if plan, err = planJob(spec); err != nil {
			return trainer.Summary{}, err
		}
	}
	progress := func(p trainer.Progress) { _ = enc.send(Message{Type: TypeProgress, Progress: &p}) }
	return plan.Run(ctx, dev, cfg.Pool, job.Options{Logger: cfg.Logger, Observer: remoteObserver{enc}, Progress: progress})
}

// planJob validates a spec received from another process, loads its data
// and plans it: once, in this process.
func planJob(spec job.Spec) (*job.Plan, error) {
	if err := spec.Validate(); err != nil {
		return nil, &Error{Kind: KindUsage, Message: err.Error()}
	}
	train, test, err := spec.LoadData()
	if err != nil {
		return nil, err
	}
	return spec.Plan(train, test)
}

// sendResult sends a result. One JSON cannot carry (a value that is not
// finite) becomes an error to send instead, so the coordinator always
// hears how the request ended; a failed write is returned as it is.
func sendResult(enc *encoder, m Message) error {
	err := enc.send(m)
	var uv *json.UnsupportedValueError
	if errors.As(err, &uv) {
		return &Error{Kind: KindNonFinite, Message: fmt.Sprintf("the %s cannot be sent: it holds %s, which is not finite", m.Type, uv.Str)}
	}
	return err
}

// classify maps an error to the kind the coordinator acts on.
func classify(err error) *Error {
	var we *Error
	kind := KindFailure
	switch {
	case errors.As(err, &we):
		return we
	case errors.Is(err, trainer.ErrCheckpoint):
		kind = KindCheckpoint
	case errors.Is(err, trainer.ErrNonFinite):
		kind = KindNonFinite
	case errors.Is(err, data.ErrMissing), errors.Is(err, data.ErrCorrupt), errors.Is(err, data.ErrInvalid):
		kind = KindUsage
	case errors.Is(err, device.ErrNoDevice):
		kind = KindNoDevice
	}
	return &Error{Kind: kind, Message: err.Error()}
}

// serveBench runs the benchmark on the requested device and answers with
// its report. Progress lines travel as log messages.
func serveBench(ctx context.Context, req Message, spec job.Spec, cfg ServeConfig, enc *encoder) error {
	if req.Bench == nil {
		return enc.send(Message{Type: TypeError, Error: &Error{Kind: KindUsage, Message: "bench request without a configuration"}})
	}
	bc := req.Bench.WithDefaults()
	if err := bc.Validate(); err != nil {
		return enc.send(Message{Type: TypeError, Error: &Error{Kind: KindUsage, Message: err.Error()}})
	}
	bc.Progress = func(msg string) { _ = enc.send(Message{Type: TypeLog, Text: msg}) }
	open := func() (device.Device, error) { return cfg.Open(req.Device, spec) }
	rep, err := bench.Run(ctx, open, bc)
	if err == nil {
		err = sendResult(enc, Message{Type: TypeResult, Report: rep})
	}
	if err != nil {
		return enc.send(Message{Type: TypeError, Error: classify(err)})
	}
	return nil
}

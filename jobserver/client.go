package jobserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Sink receives what a job reports while it runs.
type Sink struct {
	Observer trainer.Observer
	Progress func(trainer.Progress)
	Hello    func(worker.Hello)
	// Alive is called on every message from the worker (see
	// worker.Sink.Alive).
	Alive func()
	// Budget, when set, makes the worker ask for a device-memory budget
	// before it allocates and wait for the answer, which Budget gives
	// through the reply, at once or later; it must not block.
	Budget func(BudgetRequest, BudgetReply) error
	// Parked hears that the worker, told to park, has parked.
	Parked func(BudgetParked) error
	// Held hears, as the job ends on a kept worker (ServeKept), what the
	// worker's process still holds on its device beyond the graph pool's
	// workspace, as the worker measured it once the job's memory was
	// freed: what the next job's bill counts as its context (see
	// worker.Message.HeldBytes). An older worker measures nothing, and
	// Held is not called.
	Held func(bytes int64)
	// DeviceClosed hears, as the job ends on a kept worker, that the
	// worker closed its device (the job left it other than found): the
	// process holds nothing there, and Held is not called (see
	// worker.Message.DeviceClosed).
	DeviceClosed func()
}

// raw decodes what the worker sends into the sink's types.
func (s Sink) raw() worker.Sink {
	ws := worker.Sink{Hello: s.Hello, Alive: s.Alive, Held: s.Held, DeviceClosed: s.DeviceClosed}
	if s.Observer != nil {
		ws.Observe = func(name string, body json.RawMessage) error {
			m, err := trainer.DecodeMeasurement(name, body)
			if err != nil {
				return err
			}
			s.Observer.Observe(m)
			return nil
		}
	}
	if s.Budget != nil {
		ws.Budget = func(body json.RawMessage, reply worker.Reply) error {
			var req BudgetRequest
			if err := json.Unmarshal(body, &req); err != nil {
				return err
			}
			return s.Budget(req, BudgetReply{reply})
		}
	}
	if s.Parked != nil {
		ws.Parked = func(body json.RawMessage) error {
			var p BudgetParked
			if err := json.Unmarshal(body, &p); err != nil {
				return err
			}
			return s.Parked(p)
		}
	}
	if s.Progress != nil {
		ws.Progress = func(body json.RawMessage) error {
			var p trainer.Progress
			if err := json.Unmarshal(body, &p); err != nil {
				return err
			}
			s.Progress(p)
			return nil
		}
	}
	return ws
}

// InProcess is the transport to Serve in this process, configured by cfg:
// the CPU device's path.
func InProcess(cfg Config) worker.InProcess {
	return func(ctx context.Context, in io.Reader, out io.Writer) error { return Serve(ctx, in, out, cfg) }
}

// Run runs the job on the named device through t and returns its
// summary. Cancelling ctx asks the worker to stop after the step in
// flight and checkpoint; the summary then has Interrupted set.
func Run(ctx context.Context, t worker.Transport, deviceName string, spec job.Spec, sink Sink) (worker.Hello, trainer.Summary, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return worker.Hello{}, trainer.Summary{}, fmt.Errorf("worker: encoding the job: %w", err)
	}
	h, res, err := t.Call(ctx, worker.Request{Type: worker.TypeStart, Device: deviceName, Body: body, AskBudget: sink.Budget != nil}, sink.raw())
	if err != nil {
		return h, trainer.Summary{}, err
	}
	var sum trainer.Summary
	if err := json.Unmarshal(res, &sum); err != nil {
		return h, trainer.Summary{}, fmt.Errorf("worker: reading the run's summary: %w", err)
	}
	return h, sum, nil
}

// Bench runs the benchmark on the named device through t and returns its
// report. cfg.Progress, when set, receives the worker's progress lines.
func Bench(ctx context.Context, t worker.Transport, deviceName string, cfg bench.Config) (worker.Hello, *bench.Report, error) {
	body, err := json.Marshal(cfg)
	if err != nil {
		return worker.Hello{}, nil, fmt.Errorf("worker: encoding the benchmark's configuration: %w", err)
	}
	h, res, err := t.Call(ctx, worker.Request{Type: worker.TypeBench, Device: deviceName, Body: body}, worker.Sink{Log: cfg.Progress})
	if err != nil {
		return h, nil, err
	}
	var rep bench.Report
	if err := json.Unmarshal(res, &rep); err != nil {
		return h, nil, fmt.Errorf("worker: reading the benchmark's report: %w", err)
	}
	return h, &rep, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// executor runs a job on one device through the worker protocol: in
// this process for the CPU device, or in a tolaria-worker process.
type executor struct {
	device  string          // "cpu" or "cuda"
	process *worker.Process // nil: in process
	log     *slog.Logger

	// The data Check loaded, for an in-process run of the same spec.
	train, test *data.Dataset
	dataOf      string
}

// dataKey names what Spec.LoadData reads and how.
func dataKey(s job.Spec) string {
	return fmt.Sprintf("%s|%s|%d|%d", s.Dataset, s.DataDir, s.SyntheticSize, s.Seed)
}

// data returns the checked data for a spec that reads the same, else
// loads it.
func (e *executor) data(s job.Spec) (train, test *data.Dataset, err error) {
	if e.train != nil && dataKey(s) == e.dataOf {
		return e.train, e.test, nil
	}
	return s.LoadData()
}

// processPool is the coordinator's shared graph pool (in-process runs).
var processPool = graphs.NewPool()

// errSetup marks an environment problem (missing worker, no GPU): exit 1
// with one clear sentence.
var errSetup = errors.New("setup")

// chooseExecutor resolves --device. Only a worker process ever touches a GPU.
func chooseExecutor(ctx context.Context, spec job.Spec, set settings, log *slog.Logger) (*executor, error) {
	if spec.Device == "cpu" && !set.isolate {
		return &executor{device: "cpu", log: log}, nil
	}
	path, err := worker.Find(set.worker)
	if err != nil {
		err = fmt.Errorf("%w: %w", errSetup, err)
		if spec.Device == "auto" && !set.isolate {
			log.Info("device auto: using cpu", "reason", "no CUDA worker found")
			return &executor{device: "cpu", log: log}, nil
		}
		if spec.Device != "cuda" {
			// --isolate on the CPU needs any tolaria-worker, not a CUDA one.
			return nil, fmt.Errorf("%w: --isolate runs the job in a tolaria-worker process, and none was found next to tolaria, at --worker or at $TOLARIA_WORKER: build one with `make build` (bin/tolaria-worker), or drop --isolate", errSetup)
		}
		return nil, err
	}
	// The hello timeout bounds the worker's start-up only (the probe's, and
	// the job's before it runs): a worker that does not answer is killed
	// with its process group and reported in one sentence.
	proc := &worker.Process{Path: path, Stderr: os.Stderr, HelloTimeout: set.workerStart}
	if spec.Device == "cpu" {
		return &executor{device: "cpu", process: proc, log: log}, nil
	}
	quiet := *proc
	quiet.Stderr = nil
	hello, err := quiet.Probe(ctx, "cuda") // bounded by HelloTimeout
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted while the worker %s was starting", path)
	}
	if err != nil {
		reason := worker.Unavailable(path, err)
		if spec.Device == "auto" {
			log.Info("device auto: using cpu", "reason", reason)
			if set.isolate {
				return &executor{device: "cpu", process: proc, log: log}, nil
			}
			return &executor{device: "cpu", log: log}, nil
		}
		return nil, fmt.Errorf("%w: %s", errSetup, reason)
	}
	log.Info("device: using the CUDA worker", "worker", path, "gpu", hello.Device, "model", hello.Description, "pid", hello.PID)
	return &executor{device: "cuda", process: proc, log: log}, nil
}

// Check validates data files, and the checkpoint when resuming, in the
// coordinator (pure Go; no device) before the run directory is written.
func (e *executor) Check(spec job.Spec) error {
	train, test, err := spec.LoadData()
	if err != nil {
		return usagef("%v", err)
	}
	if e.process == nil {
		// An in-process run trains on what was just checked.
		e.train, e.test, e.dataOf = train, test, dataKey(spec)
	}
	// The whole run's configuration, against the data: a batch larger than
	// the training set, or graphs that would never be captured, are refused
	// here rather than after the run directory is written.
	cfg, err := spec.Config(train, test, job.Options{})
	if err != nil {
		return usagef("%v", err)
	}
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	if !spec.Resume {
		return nil
	}
	if err := trainer.CheckResume(cfg); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// Run trains and returns the worker's summary.
func (e *executor) Run(ctx context.Context, spec job.Spec, sink worker.Sink) (trainer.Summary, error) {
	if e.process == nil {
		cfg := worker.ServeConfig{Build: "cpu", Open: worker.OpenCPU, Pool: processPool, Logger: e.log, Data: e.data}
		_, sum, err := worker.RunInProcess(ctx, "cpu", spec, cfg, sink)
		return sum, err
	}
	_, sum, err := e.process.Run(ctx, e.device, spec, sink)
	return sum, err
}

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// executor runs a job on one device.
type executor interface {
	// Device is the resolved device name ("cpu" or "cuda").
	Device() string
	// Check validates what can be validated before the run directory is
	// written: data files, and the checkpoint when resuming.
	Check(spec job.Spec) error
	// Run trains.
	Run(ctx context.Context, spec job.Spec, opts job.Options) (trainer.Summary, error)
}

// chooseExecutor resolves --device.
func chooseExecutor(ctx context.Context, spec job.Spec, set settings, log *slog.Logger) (executor, error) {
	switch spec.Device {
	case "cpu":
		return &cpuExecutor{}, nil
	case "auto":
		log.Info("device auto: using the CPU device (no CUDA worker was found)")
		return &cpuExecutor{}, nil
	}
	return nil, usagef("device: cuda needs the tolaria-worker binary built with -tags cuda; none is available in this build")
}

// cpuExecutor trains on the CPU reference device in this process.
type cpuExecutor struct {
	train, test *data.Dataset
}

func (e *cpuExecutor) Device() string { return "cpu" }

func (e *cpuExecutor) Check(spec job.Spec) error {
	var err error
	if e.train, e.test, err = spec.LoadData(); err != nil {
		return usagef("%v", err)
	}
	if !spec.Resume {
		return nil
	}
	cfg, err := spec.Config(e.train, e.test, job.Options{})
	if err != nil {
		return usagef("%v", err)
	}
	if err := trainer.CheckResume(cfg); err != nil {
		return usagef("%v", err)
	}
	return nil
}

func (e *cpuExecutor) Run(ctx context.Context, spec job.Spec, opts job.Options) (trainer.Summary, error) {
	dev, err := cpu.Open(cpu.Config{SlowCopy: time.Duration(spec.SlowStageCopyMS * float64(time.Millisecond))})
	if err != nil {
		return trainer.Summary{}, err
	}
	defer dev.Close()
	cfg, err := spec.Config(e.train, e.test, opts)
	if err != nil {
		return trainer.Summary{}, err
	}
	return trainer.Run(ctx, dev, processPool, cfg)
}

// processPool is the coordinator process's shared graph pool.
var processPool = graphs.NewPool()

// newObserver builds the run's observer: the events log, and the metrics
// served at --metrics-addr when it is set.
func newObserver(ctx context.Context, set settings, events io.Writer, spec job.Spec, log *slog.Logger) (trainer.Observer, func(), error) {
	evlog := telemetry.NewEventLog(events)
	if set.metricsAddr == "" {
		return evlog.Observer(), func() {}, nil
	}
	m := telemetry.NewMetrics(version())
	srv, err := telemetry.Serve(ctx, set.metricsAddr, m.Registry())
	if err != nil {
		return nil, nil, usagef("metrics-addr: %v", err)
	}
	log.Info("serving metrics", "url", srv.URL())
	closeFn := func() {
		if err := srv.Close(); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("metrics server", "err", err)
		}
	}
	return telemetry.Tee(evlog.Observer(), m.Observer(spec.Device, "0")), closeFn, nil
}

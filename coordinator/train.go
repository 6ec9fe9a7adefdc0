package coordinator

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// A training run lives in package train; these names keep the
// coordinator's callers working.

type (
	Request       = train.Request
	Budgeter      = train.Budgeter
	Run           = train.Run
	WorkerFailure = train.WorkerFailure
	Placement     = train.Placement
	Executor      = train.Executor
	Metrics       = train.Metrics
)

// Prepare checks a run and claims its directory (see train.Prepare).
func Prepare(ctx context.Context, req Request) (*Run, error) { return train.Prepare(ctx, req) }

// Choose picks where a job runs (see train.Choose).
func Choose(ctx context.Context, p Placement, shared *trainer.Shared, log *slog.Logger) (*Executor, error) {
	return train.Choose(ctx, p, shared, log)
}

// CUDAWorker starts the worker at path and opens a GPU (see
// train.CUDAWorker).
func CUDAWorker(ctx context.Context, path string, start time.Duration, stderr io.Writer) (*worker.Process, worker.Hello, error) {
	return train.CUDAWorker(ctx, path, start, stderr)
}

// LinksCUDA says whether this binary links gorgonia.org/cu (see
// train.LinksCUDA).
func LinksCUDA() bool { return train.LinksCUDA() }

// ServeMetrics serves a run's metrics (see train.ServeMetrics).
func ServeMetrics(ctx context.Context, addr, version string, log *slog.Logger) (*Metrics, error) {
	return train.ServeMetrics(ctx, addr, version, log)
}

// ServeFamilies serves an activity's metrics with families of its own
// (see train.ServeFamilies).
func ServeFamilies(ctx context.Context, addr string, log *slog.Logger, families func() (*telemetry.Metrics, error)) (*Metrics, error) {
	return train.ServeFamilies(ctx, addr, log, families)
}

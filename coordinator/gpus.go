package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/worker"
)

// GPU is one GPU a worker's driver reports (see jobserver.GPU).
type GPU = jobserver.GPU

// GPUsRequest asks a tolaria-worker for the machine's GPUs: the
// coordinator itself never initialises CUDA.
type GPUsRequest struct {
	Worker           string        // the tolaria-worker binary ("": worker.Find)
	WorkerStart      time.Duration // 0: worker.DefaultHelloTimeout
	HeartbeatTimeout time.Duration // 0: worker.DefaultHeartbeatTimeout
	Env              []string      // added to the worker's environment (CUDA_VISIBLE_DEVICES, ...)
	WorkerLog        io.Writer     // the worker's log; nil discards it
}

// GPUs starts a worker and returns the GPUs its driver reports, in
// ordinal order (empty when there is none). A worker that cannot be found,
// was built without CUDA or whose driver fails is an ErrSetup saying why
// and what to do.
func GPUs(ctx context.Context, req GPUsRequest) ([]GPU, error) {
	path, err := worker.Find(req.Worker)
	if err != nil {
		return nil, setupErr(err)
	}
	proc := &worker.Process{Path: path, Stderr: req.WorkerLog, HelloTimeout: req.WorkerStart,
		HeartbeatTimeout: req.HeartbeatTimeout, Env: req.Env}
	_, gpus, err := jobserver.Devices(ctx, proc)
	var we *worker.Error
	var na *worker.NoAnswerError
	switch {
	case err == nil:
		return gpus, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("interrupted while the worker %s listed the GPUs: %w", path, ctx.Err())
	case errors.As(err, &we) && we.Kind == worker.KindNoDevice, errors.As(err, &na), errors.Is(err, worker.ErrWorkerExited):
		return nil, setupErr(fmt.Errorf("the worker %s cannot list GPUs: %w", path, err))
	}
	return nil, fmt.Errorf("listing the GPUs in the worker %s: %w", path, err)
}

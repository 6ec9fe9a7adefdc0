package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrNotFound reports that no tolaria-worker binary was found.
var ErrNotFound = errors.New("no tolaria-worker")

// buildAdvice says how to build a worker. Sweeps, sharded evaluations
// and RL run their CPU work in workers too, so the advice names the
// build of both kinds, not only the CUDA one.
const buildAdvice = "build it with `make build` (bin/tolaria-worker, CPU only) or `make worker-cuda` (CPU and CUDA)"

// Find locates the tolaria-worker binary: explicit (from --worker or
// TOLARIA_WORKER) when given, else next to the running executable.
func Find(explicit string) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("%w: %s, given by --worker or TOLARIA_WORKER, %s; %s, and give its path", ErrNotFound, explicit, Missing(err), buildAdvice)
		}
		return explicit, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	path := filepath.Join(filepath.Dir(self), "tolaria-worker")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%w next to %s; %s, or give its path with --worker PATH or TOLARIA_WORKER", ErrNotFound, self, buildAdvice)
	}
	return path, nil
}

// Missing says why a worker path that os.Stat refused (err) cannot be
// used: it does not exist, or the reason it cannot be looked at.
func Missing(err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "does not exist"
	}
	return fmt.Sprintf("cannot be used (%v)", err)
}

// Unavailable says in one sentence why a worker that was asked for a GPU
// cannot give one, and what to do.
func Unavailable(path string, err error) string {
	var we *Error
	var na *NoAnswerError
	switch {
	case errors.As(err, &we):
		return fmt.Sprintf("the worker %s cannot use a GPU: %s; use --device cpu", path, we.Message)
	case errors.As(err, &na):
		output := ""
		if na.Output != "" {
			output = " (its last output: " + na.Output + ")"
		}
		return fmt.Sprintf("the worker %s started but did not answer within %s%s; check that it is a tolaria-worker (`%s info`) and that the GPU driver responds (`nvidia-smi`), or use --device cpu",
			path, na.After, output, path)
	case errors.Is(err, ErrWorkerExited):
		return fmt.Sprintf("the worker %s exited at start-up, as a CUDA worker does when there is no NVIDIA GPU or driver (%v); use --device cpu, run on a machine with a GPU, or check that it is a tolaria-worker (`%s info`)", path, err, path)
	}
	return fmt.Sprintf("the worker %s could not be started: %v; use --device cpu", path, err)
}

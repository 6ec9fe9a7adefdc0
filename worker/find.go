package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNotFound reports that no tolaria-worker binary was found.
var ErrNotFound = errors.New("no tolaria-worker")

// Find locates the tolaria-worker binary: explicit (from --worker or
// TOLARIA_WORKER) when given, else next to the running executable.
func Find(explicit string) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("%w: the worker %s given by --worker or TOLARIA_WORKER does not exist; build it with `make worker-cuda`", ErrNotFound, explicit)
		}
		return explicit, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	path := filepath.Join(filepath.Dir(self), "tolaria-worker")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%w: no tolaria-worker next to %s; build it with `make worker-cuda` (or pass --worker PATH), or use --device cpu", ErrNotFound, self)
	}
	return path, nil
}

// Unavailable says in one sentence why a worker that was asked for a GPU
// cannot give one, and what to do.
func Unavailable(path string, err error) string {
	var we *Error
	switch {
	case errors.As(err, &we):
		return fmt.Sprintf("the worker %s cannot use a GPU: %s; use --device cpu", path, we.Message)
	case errors.Is(err, ErrWorkerExited):
		return fmt.Sprintf("the CUDA worker exited at start-up, as it does when there is no NVIDIA GPU or driver (%v); use --device cpu, or run on a machine with a GPU", err)
	}
	return fmt.Sprintf("the worker %s could not be started: %v; use --device cpu", path, err)
}

//go:build cuda

package dqn

import (
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cuda"
)

// lockstepDevice is the device the lockstep process test runs on: CUDA
// device 0 in this build (a GPU, or the emulated driver that
// LD_LIBRARY_PATH selects, as scripts/cuda-emulated.sh runs it).
func lockstepDevice(t *testing.T) (device.Device, string) {
	t.Helper()
	dev, err := cuda.Open(cuda.Config{})
	must(t, err)
	return dev, "cuda"
}

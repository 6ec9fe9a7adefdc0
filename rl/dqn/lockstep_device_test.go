//go:build !cuda

package dqn

import (
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
)

// lockstepDevice is the device the lockstep process test runs on: the
// CPU, one thread, in this build; CUDA in a cuda build.
func lockstepDevice(t *testing.T) (device.Device, string) {
	t.Helper()
	dev, err := cpu.Open(cpu.Config{Threads: 1})
	must(t, err)
	return dev, "cpu"
}

//go:build cuda

package cuda

import (
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/devicetest"
)

// TestConformance runs the device contract's suite against the GPU.
func TestConformance(t *testing.T) {
	devicetest.Run(t, func(t *testing.T) device.Device { return openTest(t) }, devicetest.Options{
		OpenLimited: func(t *testing.T, limit int64) device.Device {
			return openConfig(t, Config{MemoryLimit: limit})
		},
	})
}

// TestImageConformance runs the image kernels' suite (device.ImageKernels)
// against the GPU.
func TestImageConformance(t *testing.T) {
	devicetest.RunImage(t, func(t *testing.T) device.Device { return openTest(t) })
}

// TestSequenceConformance runs the sequence kernels' suite
// (device.SequenceKernels) against the GPU.
func TestSequenceConformance(t *testing.T) {
	devicetest.RunSequence(t, func(t *testing.T) device.Device { return openTest(t) })
}

package cpu_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/device/devicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openWith(t testing.TB, cfg cpu.Config) device.Device {
	t.Helper()
	d, err := cpu.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func open(t *testing.T) device.Device { return openWith(t, cpu.Config{}) }

func openLimited(t *testing.T, limit int64) device.Device {
	return openWith(t, cpu.Config{MemoryLimit: limit})
}

func TestConformance(t *testing.T) {
	devicetest.Run(t, open, devicetest.Options{OpenLimited: openLimited})
}

// TestImageConformance runs the image kernels' suite (device.ImageKernels).
func TestImageConformance(t *testing.T) {
	devicetest.RunImage(t, open)
}

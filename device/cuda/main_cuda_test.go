//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
	"gorgonia.org/cu"

	"github.com/tolaria-ml/tolaria/device"
)

// TestMain fails, with "no CUDA device" and a non-zero status, when the
// driver reports no device: these are the GPU tests, and a run of this
// binary that tested nothing must not count as a pass (the GPU bundle's
// run.sh reports its status; TestGPUTestsFailWithoutADevice checks this
// against a driver with no device). On a machine without a GPU or driver
// the process usually never gets here: gorgonia.org/cu calls cuInit in its
// package init and exits with status 1 when it fails. Build this binary
// anywhere (go test -c -tags cuda) and run it on a GPU machine.
func TestMain(m *testing.M) {
	if n, err := cu.NumDevices(); err != nil || n == 0 {
		fmt.Fprintf(os.Stderr, "device/cuda: no CUDA device (count %d, err %v): the GPU tests cannot run; run this binary on a machine with an NVIDIA GPU and driver\n", n, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// openTest opens GPU 0 and closes it when the test ends.
func openTest(t *testing.T) *Device {
	t.Helper()
	return openConfig(t, Config{})
}

// openConfig opens the GPU cfg selects and closes it when the test ends.
func openConfig(t *testing.T, cfg Config) *Device {
	t.Helper()
	d, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil && !errors.Is(err, device.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func mustStream(t *testing.T, d device.Device) device.Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatalf("NewStream: %v", err)
	}
	return s
}

// mustUpload allocates a device buffer holding data.
func mustUpload(t *testing.T, d device.Device, data []float32) device.Buffer {
	t.Helper()
	b, err := d.Alloc(len(data))
	if err != nil {
		t.Fatalf("Alloc(%d): %v", len(data), err)
	}
	if err := d.Upload(b, data); err != nil {
		t.Fatalf("Upload: %v", err)
	}
	return b
}

func mustDownload(t *testing.T, d device.Device, b device.Buffer) []float32 {
	t.Helper()
	out := make([]float32, b.Len())
	if err := d.Download(out, b); err != nil {
		t.Fatalf("Download: %v", err)
	}
	return out
}

func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

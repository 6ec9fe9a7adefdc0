package jobserver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/worker"
)

// TestServeDevices: a worker answers TypeDevices with its GPUs without
// opening a device, and a worker without CUDA, or whose driver fails,
// answers no_device saying why.
func TestServeDevices(t *testing.T) {
	want := []GPU{
		{Ordinal: 0, Name: "A", PCIBusID: "00000000:3b:00.0", ComputeCapability: "9.0", TotalBytes: 80 << 30, FreeBytes: 79 << 30, Usable: true},
		{Ordinal: 1, Name: "B", PCIBusID: "00000000:5e:00.0", ComputeCapability: "7.0", TotalBytes: 16 << 30, FreeBytes: 15 << 30,
			Reason: "compute capability 7.0"},
	}
	opened := false
	cfg := Config{Build: "cuda", Shared: newShared(t), Devices: func() ([]GPU, error) { return want, nil }}
	cfg.Open = func(name string, spec job.Spec) (device.Device, error) { opened = true; return OpenCPU(name, spec) }
	hello, got, err := Devices(context.Background(), InProcess(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] || hello.Device != "cuda" || hello.Build != "cuda" || opened {
		t.Fatalf("hello %+v, GPUs %+v (a device opened: %v); want the two GPUs and no device opened", hello, got, opened)
	}
	// No GPU at all is an empty list, not a failure.
	cfg.Devices = func() ([]GPU, error) { return nil, nil }
	if _, body, err := InProcess(cfg).Call(context.Background(), worker.Request{Type: TypeDevices}, worker.Sink{}); err != nil || string(body) != `{"gpus":[]}` {
		t.Fatalf("no GPU: %s, %v", body, err)
	}
	for _, c := range []struct {
		devices func() ([]GPU, error)
		say     string
	}{
		{nil, "built without CUDA"},
		{func() ([]GPU, error) { return nil, errors.New("counting the devices: CUDA_ERROR_NO_DEVICE") }, "CUDA_ERROR_NO_DEVICE"},
	} {
		cfg.Devices = c.devices
		_, _, err := InProcess(cfg).Call(context.Background(), worker.Request{Type: TypeDevices}, worker.Sink{})
		var we *worker.Error
		if !errors.As(err, &we) || we.Kind != worker.KindNoDevice || !strings.Contains(we.Message, c.say) {
			t.Errorf("%v; want a no_device error saying %q", err, c.say)
		}
	}
}

package coordinator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestParseGPUs: a list of indices is read in its order; anything else,
// or an index named twice, is a refusal of the devices key.
func TestParseGPUs(t *testing.T) {
	if got, err := ParseGPUs("2, 0,1"); err != nil || !slices.Equal(got, []int{2, 0, 1}) {
		t.Errorf("ParseGPUs(2, 0,1) = %v, %v", got, err)
	}
	for in, want := range map[string]string{"0,x": `"x" is not a GPU index`, "-1": `"-1" is not a GPU index`, "": `"" is not a GPU index`, "1,1": "GPU 1 is named twice"} {
		_, err := ParseGPUs(in)
		if !errors.Is(err, refusal.ErrConfig) || !field.Is(err, "devices") || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseGPUs(%q): %v; want a refusal of devices saying %q", in, err, want)
		}
	}
}

// TestChooseDevicesWithoutAWorker: the CPU needs no worker; GPUs named
// with device cpu are refused before one is asked; a worker that cannot
// be found is asked about a list of GPUs, and the failure names devices.
func TestChooseDevicesWithoutAWorker(t *testing.T) {
	ctx, log := context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil))
	none := GPUsRequest{Worker: filepath.Join(t.TempDir(), "no-worker")}
	if dev, gpus, err := ChooseDevices(ctx, DevicesRequest{Device: "cpu", Devices: "auto", Workers: none, Logger: log}); dev != "cpu" || gpus != nil || err != nil {
		t.Errorf("cpu: %q %v %v", dev, gpus, err)
	}
	if dev, _, err := ChooseDevices(ctx, DevicesRequest{Device: "auto", Devices: "auto", Workers: none, Logger: log}); dev != "cpu" || err != nil {
		t.Errorf("auto without a worker: %q %v; want the CPU", dev, err)
	}
	_, _, err := ChooseDevices(ctx, DevicesRequest{Device: "cpu", Devices: "0", Workers: none, Logger: log})
	if !errors.Is(err, refusal.ErrConfig) || err.Error() != "devices: names GPUs; it cannot go with device cpu" {
		t.Errorf("devices 0 on the CPU: %v", err)
	}
	_, _, err = ChooseDevices(ctx, DevicesRequest{Device: "cuda", Devices: "0", Workers: none, Logger: log})
	if !field.Is(err, "devices") || !strings.Contains(err.Error(), "no-worker") {
		t.Errorf("devices 0 with no worker: %v", err)
	}
	if _, _, err := ChooseDevices(ctx, DevicesRequest{Device: "cuda", Devices: "auto", Workers: none, Logger: log}); err == nil {
		t.Error("cuda with no worker to find a GPU: no error")
	}
}

package trainer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestOneTrainerPerDevice: a second trainer on a device that is training
// is refused with a clear error (its staging would break the first one's
// global-mode captures); once the first is done, the next trainer on the
// same device runs, and the shared pool serves all its captures.
func TestOneTrainerPerDevice(t *testing.T) {
	dev := openCPU(t)
	pool := graphs.NewPool()
	defer pool.Close()
	first, second := smallConfig(t), smallConfig(t)
	first.GraphPoolReuse, second.GraphPoolReuse = true, true
	var busyErr error
	tried := false
	first.Progress = func(trainer.Progress) {
		if !tried {
			tried = true
			_, busyErr = trainer.Run(context.Background(), dev, pool, second)
		}
	}
	a, err := trainer.Run(context.Background(), dev, pool, first)
	if err != nil {
		t.Fatal(err)
	}
	if !tried {
		t.Fatal("the first run reported no progress")
	}
	if !errors.Is(busyErr, trainer.ErrDeviceBusy) || !strings.Contains(busyErr.Error(), "--isolate") {
		t.Fatalf("a second trainer on a busy device: %v, want ErrDeviceBusy saying what to do", busyErr)
	}
	if a.Captures == 0 || a.CapturePooled == a.Captures {
		t.Fatalf("first run: %d captures, %d pooled; want its first capture cold", a.Captures, a.CapturePooled)
	}
	b, err := trainer.Run(context.Background(), dev, pool, second)
	if err != nil {
		t.Fatalf("a trainer after the first one finished: %v", err)
	}
	if b.Captures == 0 || b.CapturePooled != b.Captures {
		t.Fatalf("second run: %d captures, %d pooled; want every capture served by the pool", b.Captures, b.CapturePooled)
	}
	if b.ParamsSHA256 != a.ParamsSHA256 {
		t.Fatal("the same configuration trained after another ended with other parameters")
	}
}

// TestModelTooLargeForTheDevice: a run that cannot fit is refused before
// anything is allocated, with ErrOutOfMemory and what to change.
func TestModelTooLargeForTheDevice(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{MemoryLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cfg := smallConfig(t)
	cfg.Spec.Hidden = []int{1024, 1024} // about 1M parameters, 4 MiB each copy
	_, err = trainer.Run(context.Background(), dev, graphs.NewPool(), cfg)
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "--hidden") {
		t.Fatalf("a model larger than the device: %v, want ErrOutOfMemory naming --hidden", err)
	}
	if n := dev.MemoryStats().Allocs; n != 0 {
		t.Fatalf("%d device allocations before the refusal, want none", n)
	}
}

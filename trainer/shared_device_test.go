package trainer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestOneTrainerPerDevice: a second trainer on a device that is training
// is refused with a clear error (its staging would break the first one's
// global-mode captures); once the first is done, the next trainer on the
// same device runs, and the shared pool serves all its captures.
func TestOneTrainerPerDevice(t *testing.T) {
	dev := openCPU(t)
	shared := newShared(t)
	first, second := smallConfig(t), smallConfig(t)
	first.GraphPoolReuse, second.GraphPoolReuse = true, true
	var busyErr error
	tried := false
	first.Progress = func(trainer.Progress) {
		if !tried {
			tried = true
			_, busyErr = trainer.Run(context.Background(), dev, shared, second)
		}
	}
	a, err := trainer.Run(context.Background(), dev, shared, first)
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
	b, err := trainer.Run(context.Background(), dev, shared, second)
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
	_, err = trainer.Run(context.Background(), dev, newShared(t), cfg)
	if !errors.Is(err, device.ErrOutOfMemory) || !strings.Contains(err.Error(), "--hidden") {
		t.Fatalf("a model larger than the device: %v, want ErrOutOfMemory naming --hidden", err)
	}
	if n := dev.MemoryStats().Allocs; n != 0 {
		t.Fatalf("%d device allocations before the refusal, want none", n)
	}
}

// TestTrainersShareTheProcessGuard: every trainer of a process captures
// under the one guard its Shared holds, whatever its device, so no
// stager of the process can issue a copy during any of their captures.
func TestTrainersShareTheProcessGuard(t *testing.T) {
	shared, other := newShared(t), newShared(t)
	cfg := smallConfig(t)
	for i, dev := range []device.Device{openCPU(t), openCPU(t)} {
		sum, err := trainer.Run(context.Background(), dev, shared, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !sum.GraphEnabled || shared.Guard().Captures() != uint64(i+1) {
			t.Fatalf("after run %d: graphs %v, %d captures under the process's guard; want one per run",
				i+1, sum.GraphEnabled, shared.Guard().Captures())
		}
	}
	if n := other.Guard().Captures(); n != 0 {
		t.Fatalf("another process's guard was held %d times", n)
	}
}

func TestRunNeedsTheSharedState(t *testing.T) {
	if _, err := trainer.Run(context.Background(), openCPU(t), nil, smallConfig(t)); !errors.Is(err, trainer.ErrNoShared) {
		t.Fatalf("a run without the process's state: %v, want ErrNoShared", err)
	}
}

// TestAPooledRunEqualsALoneRun: a run that follows another of its step
// signature in one process (another learning rate and seed: a sweep's
// next trial in a kept worker) leases the pooled workspace under
// Plan.Signature, captures every graph as a pooled update, and ends with
// the parameters it has alone in a fresh process, bit for bit; a run of
// another batch size has another signature.
func TestAPooledRunEqualsALoneRun(t *testing.T) {
	first, next := smallConfig(t), smallConfig(t)
	first.GraphPoolReuse, next.GraphPoolReuse = true, true
	next.Optimizer.LR, next.Seed = 3e-3, 11
	dev, shared := openCPU(t), newShared(t)
	plan, err := trainer.NewPlan(next)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.Run(context.Background(), dev, shared, first); err != nil {
		t.Fatal(err)
	}
	if !shared.Pool().Holds(dev, plan.Signature()) {
		t.Fatalf("after the first run the pool holds nothing under the next run's signature %q", plan.Signature())
	}
	pooled, err := plan.Run(context.Background(), dev, shared)
	if err != nil {
		t.Fatal(err)
	}
	alone := run(t, next)
	if pooled.Captures == 0 || pooled.CapturePooled != pooled.Captures || alone.CapturePooled != 0 {
		t.Fatalf("pooled run: %d of %d captures pooled; lone run: %d pooled; want all and none",
			pooled.CapturePooled, pooled.Captures, alone.CapturePooled)
	}
	if pooled.ParamsSHA256 != alone.ParamsSHA256 || pooled.TestLoss != alone.TestLoss {
		t.Fatalf("the run after another ended with parameters %s (test loss %v), alone with %s (%v)",
			pooled.ParamsSHA256, pooled.TestLoss, alone.ParamsSHA256, alone.TestLoss)
	}
	wider := next
	wider.BatchSize = 32
	other, err := trainer.NewPlan(wider)
	if err != nil {
		t.Fatal(err)
	}
	if other.Signature() == plan.Signature() {
		t.Fatalf("batch sizes 16 and 32 share the signature %q", plan.Signature())
	}
}

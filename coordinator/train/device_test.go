package train

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
)

// script writes an executable shell script standing in for a worker.
func script(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// dying is a worker that exits at start-up, as a CUDA build does without
// a GPU.
func dying(t *testing.T) string {
	return script(t, "dying-worker", "echo 'cuInit failed: no CUDA-capable device is detected' >&2\nexit 1\n")
}

func TestChooseTheDevice(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		name      string
		place     Placement
		device    string
		inProcess bool
	}{
		{"cpu", Placement{Device: "cpu"}, "cpu", true},
		{"cpu, isolated", Placement{Device: "cpu", Isolate: true, Worker: dying(t)}, "cpu", false},
		{"auto without a worker", Placement{Device: "auto", Worker: missing}, "cpu", true},
		{"auto with a worker that has no GPU", Placement{Device: "auto", Worker: dying(t)}, "cpu", true},
		{"auto, isolated, with a worker that has no GPU", Placement{Device: "auto", Isolate: true, Worker: dying(t)}, "cpu", false},
	} {
		e, err := Choose(context.Background(), c.place, nil, nil)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if e.Device != c.device || (e.Process == nil) != c.inProcess {
			t.Errorf("%s: device %s, in process %v; want %s, %v", c.name, e.Device, e.Process == nil, c.device, c.inProcess)
		}
	}
}

func TestChooseRefusals(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, c := range []struct {
		name  string
		place Placement
		want  string
	}{
		{"cuda without a worker", Placement{Device: "cuda", Worker: missing}, "does not exist"},
		{"cuda with a worker that has no GPU", Placement{Device: "cuda", Worker: dying(t)}, "no NVIDIA GPU or driver"},
		{"cpu, isolated, a worker that is not there", Placement{Device: "cpu", Isolate: true, Worker: missing}, missing + ", given by worker or $TOLARIA_WORKER, does not exist"},
		{"auto, isolated, a worker that is not there", Placement{Device: "auto", Isolate: true, Worker: missing}, missing + ", given by worker or $TOLARIA_WORKER, does not exist"},
		{"cpu, isolated, no worker next to tolaria", Placement{Device: "cpu", Isolate: true}, "none was found next to tolaria"},
	} {
		_, err := Choose(context.Background(), c.place, nil, nil)
		if !errors.Is(err, refusal.ErrSetup) || errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an refusal.ErrSetup saying %q", c.name, err, c.want)
		}
	}
	_, err := Choose(context.Background(), Placement{Device: "cpu", Isolate: true, Worker: missing}, nil, nil)
	if !field.Is(err, "isolate") {
		t.Errorf("isolating without a worker does not name isolate: %v", err)
	}
	_, err = Choose(context.Background(), Placement{Device: "cuda", Worker: dying(t)}, nil, nil)
	if !errors.Is(err, worker.ErrWorkerExited) || !strings.Contains(err.Error(), "cuInit failed") {
		t.Errorf("the worker's exit is not reachable, or its output is lost: %v", err)
	}
}

func TestCancelledWhileTheWorkerStarts(t *testing.T) {
	hanging := script(t, "hanging-worker", "exec sleep 60\n")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := Choose(ctx, Placement{Device: "auto", Worker: hanging, WorkerStart: time.Minute}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "interrupted") || errors.Is(err, refusal.ErrSetup) {
		t.Fatalf("cancelled during the probe: %v; want an interruption, not a fallback to the CPU", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the cancelled probe took %s", d)
	}
}

func TestCUDAWorker(t *testing.T) {
	_, _, err := CUDAWorker(context.Background(), dying(t), time.Second, nil)
	if !errors.Is(err, refusal.ErrSetup) || !strings.Contains(err.Error(), "exited at start-up") {
		t.Fatalf("a worker without a GPU: %v", err)
	}
	_, _, err = CUDAWorker(context.Background(), filepath.Join(t.TempDir(), "missing"), time.Second, nil)
	if !errors.Is(err, refusal.ErrSetup) || !errors.Is(err, worker.ErrNotFound) {
		t.Fatalf("no worker: %v", err)
	}
}

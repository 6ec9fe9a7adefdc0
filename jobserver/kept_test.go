package jobserver

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/worker"
)

// TestKeptWorkerPoolsLaterJobsBitwise: a kept worker (ServeKept, this
// test binary) serves a sweep's jobs one after another in one process on
// one device: a job after one of the same step signature (another
// learning rate and seed) has every capture pooled, one of another model
// is cold again (and frees the first model's workspace, so the next job of
// the first shape is cold too), one whose device is opened otherwise (its
// threads) gets a device of its own, cold, and each ends with the
// parameters it has alone in a worker of its own, bit for bit.
func TestKeptWorkerPoolsLaterJobsBitwise(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(serveAsWorkerEnv, "1")
	first, same, other := smallSpec(), smallSpec(), smallSpec()
	same.LR, same.Seed = first.LR*3, first.Seed+4
	other.Hidden = []int{24}
	threads := same
	threads.CPUThreads = 1
	jobs := []struct {
		name   string
		spec   job.Spec
		pooled bool
	}{{"first", first, false}, {"same shape", same, true}, {"other model", other, false}, {"same shape again", same, false},
		{"same shape again", same, true}, {"same shape on a device of other threads", threads, false}}
	k := &worker.Kept{Process: worker.Process{Path: exe, HelloTimeout: time.Minute}}
	defer k.Close()
	pid := 0
	for i, j := range jobs {
		j.spec.RunDir = t.TempDir()
		h, kept, err := Run(context.Background(), k, "cpu", j.spec, Sink{})
		if err != nil {
			t.Fatalf("%s in the kept worker: %v", j.name, err)
		}
		if i == 0 {
			pid = h.PID
		}
		if h.PID != pid || k.Starts() != 1 {
			t.Fatalf("%s: served by pid %d after %d starts; want the first job's process %d", j.name, h.PID, k.Starts(), pid)
		}
		if want := map[bool]int{true: kept.Captures, false: 0}[j.pooled]; kept.Captures == 0 || kept.CapturePooled != want {
			t.Fatalf("%s: %d of %d captures pooled, want %d", j.name, kept.CapturePooled, kept.Captures, want)
		}
		j.spec.RunDir = t.TempDir()
		_, alone, err := Run(context.Background(), &worker.Process{Path: exe, HelloTimeout: time.Minute}, "cpu", j.spec, Sink{})
		if err != nil {
			t.Fatalf("%s alone: %v", j.name, err)
		}
		if kept.ParamsSHA256 != alone.ParamsSHA256 || kept.TestLoss != alone.TestLoss {
			t.Fatalf("%s: parameters %s (test loss %v) in the kept worker, %s (%v) alone",
				j.name, kept.ParamsSHA256, kept.TestLoss, alone.ParamsSHA256, alone.TestLoss)
		}
	}
}

// TestKeptDeviceIsCheckedBetweenJobs: a kept device that holds nothing
// but the pool's workspace after a job is kept for the next; one left
// holding memory the pool does not (a leak), or with a pool entry still
// leased, is closed, so the next job opens a fresh one; a job of other
// device settings gets a device of its own.
func TestKeptDeviceIsCheckedBetweenJobs(t *testing.T) {
	cfg := Config{Build: "cpu", Open: OpenCPU, Shared: newShared(t), kept: &keptDevice{}}
	cfg.Logger = slog.New(slog.DiscardHandler)
	defer cfg.kept.close(cfg)
	start := worker.Request{Type: worker.TypeStart, Device: "cpu"}
	spec := smallSpec()
	dev, kept, err := cfg.openFor(start, spec)
	if err != nil || !kept {
		t.Fatalf("first job: kept %v, %v", kept, err)
	}
	lease, err := cfg.Shared.Pool().Acquire(dev, "step", []int{64})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(); err != nil {
		t.Fatal(err)
	}
	cfg.kept.after(cfg, dev)
	if again, _, _ := cfg.openFor(start, spec); again != dev {
		t.Fatal("a device holding only the pool's workspace was not kept")
	}

	leaked, err := dev.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	_ = leaked
	cfg.kept.after(cfg, dev)
	fresh, _, err := cfg.openFor(start, spec)
	if err != nil || fresh == dev {
		t.Fatalf("after a job that left memory behind: the same device %v, %v; want a fresh one", fresh == dev, err)
	}
	if cfg.Shared.Pool().Holds(dev, "step") {
		t.Fatal("the closed device's pool entries were kept")
	}

	held, err := cfg.Shared.Pool().Acquire(fresh, "step", []int{64})
	if err != nil {
		t.Fatal(err)
	}
	cfg.kept.after(cfg, fresh)
	if next, _, _ := cfg.openFor(start, spec); next == fresh {
		t.Fatal("a device with a pool entry still leased was kept")
	}
	_ = held.Release()

	other := spec
	other.CPUThreads = 1
	current := cfg.kept.dev
	if dev, kept, err := cfg.openFor(start, other); err != nil || !kept || dev == current {
		t.Fatalf("a job of other threads: kept %v, same device %v, %v; want a kept device of its own", kept, dev == current, err)
	}
}

// TestKeptWorkerSaysWhatItHolds: each job's answer from a kept worker
// carries what the process holds on its device once the job's memory is
// freed, beyond the pool's workspace (on the CPU device nothing: 0, said,
// not left out), and a worker of one request says nothing, so the
// coordinator books its bill's figures instead.
func TestKeptWorkerSaysWhatItHolds(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(serveAsWorkerEnv, "1")
	k := &worker.Kept{Process: worker.Process{Path: exe, HelloTimeout: time.Minute}}
	defer k.Close()
	for i := range 2 {
		spec := smallSpec()
		spec.RunDir = t.TempDir()
		var held []int64
		if _, _, err := Run(context.Background(), k, "cpu", spec, Sink{Held: func(n int64) { held = append(held, n) }}); err != nil {
			t.Fatalf("job %d in the kept worker: %v", i+1, err)
		}
		if len(held) != 1 || held[0] != 0 {
			t.Fatalf("job %d in the kept worker: held %v; want [0]", i+1, held)
		}
	}
	spec := smallSpec()
	spec.RunDir = t.TempDir()
	var held []int64
	if _, _, err := Run(context.Background(), &worker.Process{Path: exe, HelloTimeout: time.Minute}, "cpu", spec,
		Sink{Held: func(n int64) { held = append(held, n) }}); err != nil || len(held) != 0 {
		t.Fatalf("a worker of one request: held %v (%v); want nothing said", held, err)
	}
}

// TestKeptWorkerThatClosedItsDeviceSaysSo: a job's end that finds the
// kept device other than it was opened (here a buffer the job leaked)
// closes the device, and the job's answer says so instead of a figure of
// what the process holds: the coordinator books nothing for a worker
// that holds neither context nor pool. A device kept says what it holds.
func TestKeptWorkerThatClosedItsDeviceSaysSo(t *testing.T) {
	for _, leak := range []bool{false, true} {
		cfg := Config{Build: "cpu", Open: OpenCPU, Shared: newShared(t), kept: &keptDevice{}}
		cfg.Logger = slog.New(slog.DiscardHandler)
		start := worker.Request{Type: worker.TypeStart, Device: "cpu", Body: []byte(`{}`)}
		dev, kept, err := cfg.openFor(start, smallSpec())
		if err != nil || !kept {
			t.Fatalf("leak %v: opening the kept device: kept %v, %v", leak, kept, err)
		}
		if leak {
			if _, err := dev.Alloc(16); err != nil {
				t.Fatal(err)
			}
		}
		serve := worker.InProcess(func(ctx context.Context, in io.Reader, out io.Writer) error {
			conn, err := worker.Accept(in, out)
			if err != nil {
				return err
			}
			if err := conn.Hello(worker.Hello{Device: "cpu"}); err != nil {
				return err
			}
			cfg.kept.end(cfg, dev, conn)
			return conn.Result(map[string]int{"steps": 1})
		})
		var held []int64
		closed := 0
		sink := Sink{Held: func(n int64) { held = append(held, n) }, DeviceClosed: func() { closed++ }}
		if _, _, err := serve.Call(context.Background(), start, sink.raw()); err != nil {
			t.Fatalf("leak %v: %v", leak, err)
		}
		switch {
		case leak && (cfg.kept.dev != nil || closed != 1 || len(held) != 0):
			t.Fatalf("a job that leaked: device kept %v, DeviceClosed called %d times, held %v; want the device closed, said once, no figure",
				cfg.kept.dev != nil, closed, held)
		case !leak && (cfg.kept.dev == nil || closed != 0 || len(held) != 1 || held[0] != 0):
			t.Fatalf("a job that left the device clean: device kept %v, DeviceClosed called %d times, held %v; want it kept, held [0]",
				cfg.kept.dev != nil, closed, held)
		}
		cfg.kept.close(cfg)
	}
}

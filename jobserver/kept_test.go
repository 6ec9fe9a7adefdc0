package jobserver

import (
	"context"
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

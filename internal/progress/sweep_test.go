package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestSweepLines: piped, a sweep prints one line per event (a start, an
// epoch's end, a trial's end) and nothing for the progress in between.
func TestSweepLines(t *testing.T) {
	var b bytes.Buffer
	v := NewSweep(Streams{Stdout: io.Discard, Stderr: &b}, []sweep.Trial{{Name: "a"}, {Name: "b"}})
	v.Start()
	ok := sweep.TrialResult{Name: "a", State: sweep.TrialSucceeded, Seconds: 1.5,
		Summary: &trainer.Summary{TestAccuracy: 0.9, TestLoss: 0.3, ParamsSHA256: "abc"}}
	failed := sweep.TrialResult{Name: "b", State: sweep.TrialFailed, Reason: "worker exited\nwith 7"}
	for _, u := range []sweep.TrialUpdate{
		{Trial: "a", Index: 0, State: sweep.TrialRunning, Device: "cpu", Attempt: 1},
		{Trial: "a", Index: 0, State: sweep.TrialRunning, Device: "cpu", Attempt: 1, Progress: &trainer.Progress{Epoch: 1, Epochs: 2, Step: 3, StepsPerEpoch: 8}},
		{Trial: "a", Index: 0, State: sweep.TrialRunning, Device: "cpu", Attempt: 1, Progress: &trainer.Progress{Epoch: 1, Epochs: 2, Loss: 0.5, TestAccuracy: 0.8, SamplesPerSecond: 100, EpochDone: true}},
		{Trial: "a", Index: 0, State: sweep.TrialSucceeded, Device: "cpu", Result: &ok},
		{Trial: "b", Index: 1, State: sweep.TrialFailed, Device: "cpu", Result: &failed},
	} {
		v.Update(u)
	}
	v.Close()
	want := []string{
		"trial a: started on cpu (attempt 1)",
		"trial a: epoch 1/2: loss 0.5000, test accuracy 0.8000, 100 samples/s",
		"trial a: succeeded in 1.5s: test accuracy 0.9000, test loss 0.3000, params sha256 abc",
		"trial b: failed: worker exited with 7",
	}
	if got := strings.Split(strings.TrimSpace(b.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestETA(t *testing.T) {
	p := trainer.Progress{Epoch: 2, Epochs: 4, Step: 4, StepsPerEpoch: 8}
	if f := done(p); f != 12.0/32 {
		t.Errorf("done %g, want 12/32", f)
	}
	p.EpochDone, p.Step = true, 0
	if f := done(p); f != 0.5 {
		t.Errorf("after epoch 2 of 4: done %g", f)
	}
	if etaText(startedAgo(30), 0) != "" {
		t.Error("an ETA before any step")
	}
	if got := etaText(startedAgo(30), 0.25); got != "1m30s" {
		t.Errorf("a quarter done in 30s: ETA %s, want 1m30s", got)
	}
}

func startedAgo(seconds int) time.Time { return time.Now().Add(-time.Duration(seconds) * time.Second) }

// TestSweepShowsWaitingTrials: a trial waiting for a device-memory budget
// says so, piped (a line when it starts waiting and when it is granted)
// and in the live table's state column, until the grant.
func TestSweepShowsWaitingTrials(t *testing.T) {
	var b bytes.Buffer
	v := NewSweep(Streams{Stdout: io.Discard, Stderr: &b}, []sweep.Trial{{Name: "big"}})
	running := sweep.TrialUpdate{Trial: "big", Index: 0, State: sweep.TrialRunning, Device: "cpu", Attempt: 1}
	wait, grant := running, running
	wait.Budget = &sweep.BudgetUpdate{Waiting: true, Bytes: 3 << 20}
	grant.Budget = &sweep.BudgetUpdate{Bytes: 3 << 20, Waited: 1500 * time.Millisecond}
	v.Update(running)
	v.Update(wait)
	if row := v.rowText(v.rows[0]); !strings.Contains(row, "waiting") {
		t.Errorf("a waiting trial's row %q does not say waiting", row)
	}
	v.Update(grant)
	if row := v.rowText(v.rows[0]); strings.Contains(row, "waiting") || !strings.Contains(row, "running") {
		t.Errorf("a granted trial's row %q, want running", row)
	}
	parked := running
	parked.Budget = &sweep.BudgetUpdate{Parked: true, For: "high", Bytes: 3 << 20}
	v.Update(parked)
	if row := v.rowText(v.rows[0]); !strings.Contains(row, "parked") {
		t.Errorf("a parked trial's row %q does not say parked", row)
	}
	v.Update(grant)
	if row := v.rowText(v.rows[0]); !strings.Contains(row, "running") {
		t.Errorf("an unparked trial's row %q, want running", row)
	}
	want := []string{
		"trial big: started on cpu (attempt 1)",
		"trial big: waiting for 3.0 MiB of device memory on cpu",
		"trial big: granted 3.0 MiB of device memory on cpu after waiting 1.5s",
		"trial big: parked to make room for trial high, 3.0 MiB of device memory released on cpu",
		"trial big: granted 3.0 MiB of device memory on cpu after waiting 1.5s",
	}
	if got := strings.Split(strings.TrimSpace(b.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

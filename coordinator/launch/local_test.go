package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
)

// TestLocalProbesOnlyFreshWorkers: with Config.Probe, the local launcher
// starts a CUDA slot's worker once to open its GPU before an attempt, but
// not before one that a kept worker, which has the GPU open, serves
// (Worker.Kept), nor on the CPU. The worker here records each start and
// opens no GPU, so a probe fails the attempt.
func TestLocalProbesOnlyFreshWorkers(t *testing.T) {
	dir := t.TempDir()
	starts := filepath.Join(dir, "starts")
	exe := filepath.Join(dir, "worker")
	script := "#!/bin/sh\necho \"$CUDA_VISIBLE_DEVICES\" >> '" + starts + "'\nexit 3\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := Local().Make(context.Background(), Config{Worker: exe, Device: "cuda", GPUs: []int{1}, Probe: true, WorkerStart: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cuda := Slot{Device: "cuda", GPU: 1}
	started := func() string {
		raw, _ := os.ReadFile(starts)
		return strings.Join(strings.Fields(string(raw)), ",")
	}
	for _, c := range []struct {
		name   string
		slot   Slot
		kept   bool
		probed bool
	}{
		{"fresh worker on a GPU", cuda, false, true},
		{"kept worker on a GPU", cuda, true, false},
		{"fresh worker on the CPU", Slot{Device: "cpu", GPU: -1}, false, false},
	} {
		before := started()
		w := Worker{Index: 0, Log: filepath.Join(dir, "worker.log"), Kept: c.kept}
		h, err := l.Start(context.Background(), w, c.slot, 1)
		probed := started() != before
		if probed != c.probed {
			t.Errorf("%s: probed %v (starts %q), want %v", c.name, probed, started(), c.probed)
		}
		if c.probed {
			if !errors.Is(err, refusal.ErrSetup) || h != nil {
				t.Errorf("%s: a worker that opens no GPU: %v, want a setup failure", c.name, err)
			}
			continue
		}
		if err != nil || h == nil || h.Transport == nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_ = h.Close()
	}
	if got := started(); got != "1" {
		t.Errorf("worker starts %q, want the one probe, with the slot's GPU", got)
	}
}

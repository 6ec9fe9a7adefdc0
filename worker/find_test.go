package worker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindSaysHowToBuildEitherWorker: a missing worker is reported with
// both builds, since CPU sweeps, evaluations and RL need one too, and
// without advice to use --device cpu, which does not help them.
func TestFindSaysHowToBuildEitherWorker(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "tolaria-worker")
	_, err := Find(missing)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find(%s) = %v, want ErrNotFound", missing, err)
	}
	for _, want := range []string{missing, "make build", "make worker-cuda"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "--device cpu") {
		t.Errorf("%q advises --device cpu, which still needs a worker for a sweep", err)
	}
	if err := os.WriteFile(missing, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(missing); err != nil || got != missing {
		t.Errorf("Find(%s) = %q, %v once it exists", missing, got, err)
	}
}

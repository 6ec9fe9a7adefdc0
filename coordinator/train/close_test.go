package train

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCloseReleasesTheRunsFiles: after Close, the process holds no file of
// the run (the events log and the run directory's lock are closed), so a
// process that runs many jobs does not run out of descriptors.
func TestCloseReleasesTheRunsFiles(t *testing.T) {
	openFiles := func() int {
		t.Helper()
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("cannot count open files here: %v", err)
		}
		return len(fds)
	}
	req := request(t, smallSpec(filepath.Join(t.TempDir(), "run")))
	openFiles() // the first count may open the runtime's poller
	before := openFiles()
	r, err := Prepare(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if during := openFiles(); during <= before {
		t.Fatalf("%d open files while the run is prepared, %d before; want more", during, before)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if after := openFiles(); after != before {
		t.Fatalf("%d open files after Close, %d before Prepare", after, before)
	}
}

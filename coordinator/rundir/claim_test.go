package rundir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestClaimFailureOfTheStorageIsNoConfigurationError: a claim that fails
// because the disk is full (or read-only, or failing, or the process is
// out of files) is a setup error, not a refusal of the configuration:
// it names run_dir, what failed and what to do. A directory this user
// may not write, or a path through a file, stays a refusal of run_dir.
func TestClaimFailureOfTheStorageIsNoConfigurationError(t *testing.T) {
	d := &Dir{path: "runs/a"}
	write := func(errno syscall.Errno) error {
		return &fs.PathError{Op: "write", Path: "runs/a/" + LockFile, Err: errno}
	}
	for _, c := range []struct {
		err  error
		todo string
	}{
		{write(syscall.ENOSPC), "free space on its filesystem"},
		{write(syscall.EDQUOT), "within your quota"},
		{write(syscall.EROFS), "read-write"},
		{write(syscall.EIO), "check the disk"},
		{write(syscall.EMFILE), "ulimit -n"},
	} {
		err := d.claimFailed(c.err)
		if !errors.Is(err, refusal.ErrSetup) || errors.Is(err, refusal.ErrConfig) || !field.Is(err, "run_dir") || !errors.Is(err, c.err.(*fs.PathError).Err) {
			t.Errorf("%v: got %v; want a setup error about run_dir, not a configuration refusal", c.err, err)
			continue
		}
		want := "run_dir: claiming runs/a failed: " + c.err.Error() + "; "
		if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.Contains(msg, c.todo) || !strings.HasSuffix(msg, "or give another run_dir, and run the same command again") {
			t.Errorf("%v: %q\nwant it to begin %q and say %q", c.err, msg, want, c.todo)
		}
	}
	for _, c := range []struct {
		err  error
		says string
	}{
		{write(syscall.EACCES), "this user may not write there; make it writable or give another run_dir"},
		{&fs.PathError{Op: "mkdir", Path: "runs/a", Err: syscall.ENOTDIR}, "not a directory"},
	} {
		err := d.claimFailed(c.err)
		if !errors.Is(err, refusal.ErrConfig) || errors.Is(err, refusal.ErrSetup) || !field.Is(err, "run_dir") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: got %v; want a configuration refusal of run_dir saying %q", c.err, err, c.says)
		}
	}
}

// TestRunDirOfARunStoppedBeforeItsFirstStepIsTakenAgain: a run stopped
// before its first step leaves its lock file, configuration, events and
// summary but no checkpoint; the same command (a fresh run in the same
// directory) plans and claims it again, as the stop's message promises.
func TestRunDirOfARunStoppedBeforeItsFirstStepIsTakenAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	first, err := Plan(dir, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Claim(); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{ConfigFile: "seed: 1\n", EventsFile: "{}\n", SummaryFile: `{"interrupted": true}` + "\n", DataFile: "{}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Plan(dir, false, now)
	if err != nil {
		t.Fatalf("the same command again: %v", err)
	}
	if err := again.Claim(); err != nil {
		t.Fatalf("the same command again: %v", err)
	}
	again.Release()
}

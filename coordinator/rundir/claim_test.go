package rundir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
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
	first := claimNew(t, dir)
	for name, body := range map[string]string{ConfigFile: "seed: 1\n", EventsFile: "{}\n", SummaryFile: `{"interrupted": true}` + "\n", DataFile: "{}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	releaseAndClaimAgain(t, first, dir)
}

// withNoFileLeft runs fn with this process's limit of open files at the
// lowest descriptor free now, so the next file fn opens fails with
// EMFILE, as in a process out of descriptors.
func withNoFileLeft(t *testing.T, fn func()) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	fds, err := os.Open("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	names, err := fds.Readdirnames(-1)
	own := int(fds.Fd()) // listed, but free again once closed
	fds.Close()
	if err != nil {
		t.Fatal(err)
	}
	open := map[int]bool{}
	for _, name := range names {
		if n, _ := strconv.Atoi(name); n != own {
			open[n] = true
		}
	}
	free := 0
	for open[free] {
		free++
	}
	low := lim
	low.Cur = uint64(free)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}()
	fn()
}

// TestClaimOutOfFilesIsASetupError: a claim and a hold whose lock file
// cannot be opened because the process has no descriptor left fail as a
// setup error of run_dir saying to raise the limit (exit 1), through the
// same path a full disk takes.
func TestClaimOutOfFilesIsASetupError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, trainer.CheckpointFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Plan(dir, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var claimErr, holdErr error
	withNoFileLeft(t, func() {
		claimErr = d.Claim()
		_, holdErr = Hold(dir, "tolaria eval", "wait")
	})
	for name, err := range map[string]error{"Claim": claimErr, "Hold": holdErr} {
		if !errors.Is(err, refusal.ErrSetup) || errors.Is(err, refusal.ErrConfig) || !errors.Is(err, syscall.EMFILE) || !strings.Contains(err.Error(), "ulimit -n") {
			t.Errorf("%s out of descriptors: %v; want a setup error saying to raise ulimit -n", name, err)
		}
	}
}

package rundir

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// storageFailures are the errors of a claim that come from the machine's
// storage or limits, not from the run directory the user named: each
// with what to do about it.
var storageFailures = []struct {
	errno syscall.Errno
	todo  string
}{
	{syscall.ENOSPC, "free space on its filesystem"},
	{syscall.EDQUOT, "free space within your quota on its filesystem"},
	{syscall.EROFS, "mount its filesystem read-write"},
	{syscall.EIO, "check the disk (its kernel log, dmesg)"},
	{syscall.EMFILE, "raise this process's limit of open files (ulimit -n)"},
	{syscall.ENFILE, "close files elsewhere on the machine (its open files are at the system's limit)"},
}

// claimFailed reports err, met while creating or locking the run
// directory (see ClaimFailed).
func (d *Dir) claimFailed(err error) error { return ClaimFailed("run_dir", d.path, err) }

// ClaimFailed reports err, met while creating or locking the directory
// path that the setting key names (run_dir, sweep_dir). A failure of the
// machine's storage (full, over quota, read-only, an I/O error, out of
// file descriptors) is no fault of the configuration: it is a setup error
// (exit 1 rather than 2) saying what failed and what to do. Anything else
// (a path through a file, a directory this user may not write) is a
// refusal of the directory the user gave, which another directory or its
// permissions mend.
func ClaimFailed(key field.Name, path string, err error) error {
	for _, f := range storageFailures {
		if errors.Is(err, f.errno) {
			return refusal.Setup(field.Errorf(key, "claiming %s failed: %w; %s, or give another %s, and run the same command again",
				path, err, f.todo, key))
		}
	}
	if errors.Is(err, fs.ErrPermission) {
		return refusal.Config(field.Errorf(key, "%w: this user may not write there; make it writable or give another %s",
			err, key))
	}
	return refusal.Config(field.Errorf(key, "%w", err))
}

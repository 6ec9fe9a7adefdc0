package sweep

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile is a sweep directory's lock file, open and locked (flock(2),
// exclusive) by this process: the lock goes with the process, however it
// ends.
type lockFile struct {
	path string
	f    *os.File
	// created: this claim created the file; a claim that fails removes
	// only a lock file it created.
	created bool
}

// Lock attempts: a sweep's checkFree holds a shared lock for a moment,
// so a claim refused is refused again a few times, briefly apart, before
// the directory counts as another's; a lock file removed since it was
// opened is opened again a few times.
const (
	lockTries   = 5
	lockWait    = 10 * time.Millisecond
	lockReopens = 3
)

// errLockMoved is a lock file locked after it was removed, or replaced,
// at its path lockReopens times over: another tolaria keeps replacing it.
var errLockMoved = errors.New("the lock file was removed or replaced each time it was locked")

// lockSweepFile opens (creating it when missing) and locks the lock file
// at path. ok is false when another tolaria holds it (the file then left
// as it is, unless this claim created it and no other holds it: see
// giveUp). A lock is taken on the open file, which another sweep may
// have removed (failing to start, it removes its lock file last) between
// this one's open and its lock: the file locked is then checked to be the
// one at path, and opened again when it is not.
func lockSweepFile(path string, flock func(*os.File) (bool, error)) (l *lockFile, ok bool, err error) {
	for reopen := 0; ; reopen++ {
		if l, err = openLockFile(path); err != nil {
			return nil, false, err
		}
		if ok, err = l.lock(flock); err != nil || !ok {
			if err != nil {
				l.abandon()
			} else {
				l.giveUp()
			}
			return nil, ok, err
		}
		if l.atPath() {
			return l, true, nil
		}
		// The file locked is no longer at path: whoever removed it let go
		// of the directory; the one there now, if any, decides.
		_ = l.f.Close()
		if reopen+1 == lockReopens {
			return nil, false, errLockMoved
		}
	}
}

// openLockFile opens the lock file at path, created when missing;
// exclusively, so the claim knows whether it made the file.
func openLockFile(path string) (*lockFile, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			return &lockFile{path: path, f: f, created: true}, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		f, err = os.OpenFile(path, os.O_RDWR, 0)
		if err == nil {
			return &lockFile{path: path, f: f}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		// Removed between the two opens: created again, by this claim or
		// another.
	}
}

// lock takes the file's exclusive lock through flock, lockTries times
// at most, lockWait apart: false when another still holds it.
func (l *lockFile) lock(flock func(*os.File) (bool, error)) (bool, error) {
	for try := 1; ; try++ {
		ok, err := flock(l.f)
		if err != nil || ok || try == lockTries {
			return ok, err
		}
		time.Sleep(lockWait)
	}
}

// flockExclusive takes f's exclusive lock without waiting: false when
// another holds a lock on the file.
func flockExclusive(f *os.File) (bool, error) {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// atPath reports whether the open file is the one at its path.
func (l *lockFile) atPath() bool {
	held, err := l.f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(l.path)
	return err == nil && os.SameFile(held, now)
}

// giveUp closes a lock file another holds. One this claim created is
// removed when no other holds it exclusively (a shared lock, a sweep's
// checkFree, refused this one's): left, a lone lock file would be all
// the directory held. One another has locked is theirs: it stays.
func (l *lockFile) giveUp() {
	if l.created && unix.Flock(int(l.f.Fd()), unix.LOCK_SH|unix.LOCK_NB) == nil && l.atPath() {
		// Held shared, the file can be locked by no other claim; one that
		// opened it already finds it gone once locked (atPath).
		_ = os.Remove(l.path)
	}
	_ = l.f.Close()
}

// abandon gives up a lock file, locked or not: removed when this claim
// created it, then closed, so the lock goes last.
func (l *lockFile) abandon() {
	if l.created {
		_ = os.Remove(l.path)
	}
	_ = l.f.Close()
}

// read is what the lock file holds, read through its open handle.
func (l *lockFile) read() ([]byte, error) {
	info, err := l.f.Stat()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.NewSectionReader(l.f, 0, info.Size()))
}

// write makes b the lock file's content, through its open handle: by
// its path, a write could land in another file put in its place.
func (l *lockFile) write(b []byte) error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt(b, 0)
	return err
}

// Path is where the lock file is.
func (l *lockFile) Path() string { return l.path }

// Close lets the lock go.
func (l *lockFile) Close() error { return l.f.Close() }

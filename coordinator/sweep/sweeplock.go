package sweep

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/gofrs/flock"
)

// lockFile is a sweep directory's lock file, locked (flock(2), exclusive,
// through gofrs/flock) by this process: the lock goes with the process,
// however it ends.
type lockFile struct {
	path string
	fl   *flock.Flock
	// made is the file this claim created at path, nil when one was
	// there already; looked at only while lockOnce holds that file open
	// (see there).
	made fs.FileInfo
	// created: the file locked is the one this claim created; a claim
	// that fails removes only a lock file it created.
	created bool
}

// Lock attempts: a sweep's checkFree holds a shared lock for a moment,
// so a claim refused is refused again a few times, briefly apart, before
// the directory counts as another's; a lock file removed since it was
// created or looked at is opened again a few times.
const (
	lockTries   = 5
	lockWait    = 10 * time.Millisecond
	lockReopens = 3
)

// lockFor is how long a refused lock is tried again: lockTries tries,
// lockWait apart (the last with half a wait to spare, so a timer late by
// less does not make it a sixth).
const lockFor = (lockTries-1)*lockWait + lockWait/2

// errLockMoved is a lock file removed before it was locked, or locked
// after it was removed or replaced at its path, lockReopens times over:
// another tolaria keeps replacing it.
var errLockMoved = errors.New("the lock file was removed or replaced each time it was locked")

// errLockReplaced is a lock file no longer the one this sweep holds: it
// was removed, or replaced, at its path since.
var errLockReplaced = errors.New("the lock file at its path is no longer the one this sweep holds; another tolaria removed or replaced it")

// lockSweepFile locks the lock file at path, created when missing, through
// lock (tryLock, or a test's stand-in). ok is false when another tolaria
// holds it (the file then left as it is, unless this claim created it
// and no other holds it: see giveUp). gofrs/flock opens the path as it
// locks, and the file may go between this claim's look and that open (it
// is looked at again), or, when another sweep fails to start and removes
// its lock file last, between that open and the lock: the file locked is
// then checked to be the one at path, and the path opened again when not.
func lockSweepFile(path string, lock func(*flock.Flock) (bool, error)) (*lockFile, bool, error) {
	for reopen := 1; ; reopen++ {
		l, ok, again, err := lockOnce(path, lock)
		if !again {
			return l, ok, err
		}
		if reopen == lockReopens {
			return nil, false, errLockMoved
		}
	}
}

// lockOnce is one of lockSweepFile's tries: again when the file went
// before it was locked, or after, and the path is to be looked at again.
func lockOnce(path string, lock func(*flock.Flock) (bool, error)) (l *lockFile, ok, again bool, err error) {
	l = &lockFile{path: path,
		// No O_CREATE: a file gone since createLockFile looked is not
		// made again unknown to the claim; the open fails, and the claim
		// looks again.
		fl: flock.New(path, flock.SetFlag(os.O_RDONLY), flock.SetPermissions(0o644))}
	made, err := createLockFile(path)
	if err != nil {
		return nil, false, false, err
	}
	if made != nil {
		// The file made is held open (not locked: gofrs/flock locks a
		// handle of its own, and a flock(2) lock belongs to the handle
		// it was taken on, so closing this one leaves it) until the
		// claim is settled. Closed, it could go and its inode be given
		// to a file put in its place, which os.SameFile would take for
		// it.
		defer made.Close()
		if l.made, err = made.Stat(); err != nil {
			_ = os.Remove(path)
			return nil, false, false, err
		}
	}
	ok, err = lock(l.fl)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Removed since it was looked at: created again, by this claim
		// or another.
		return nil, false, true, nil
	case err != nil:
		l.created = l.madeAtPath()
		l.abandon()
		return nil, false, false, err
	case !ok:
		l.giveUp()
		return nil, false, false, nil
	case l.atPath():
		l.created = l.isMade()
		return l, true, false, nil
	}
	// The file locked is no longer at path: whoever removed it let go of
	// the directory; the one there now, if any, decides.
	_ = l.fl.Close()
	return nil, false, true, nil
}

// createLockFile creates the lock file at path, exclusively, so the claim
// knows whether it made it: the file made, open, or nil when one was
// there.
func createLockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil, nil
	}
	return f, err
}

// tryLock takes l's exclusive lock without waiting for it, a refusal
// tried again lockWait apart for the time within gives: false when
// another still holds it then.
func tryLock(l *flock.Flock, within time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	ok, err := l.TryLockContext(ctx, lockWait)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return false, nil
	}
	return ok, err
}

// held is the file this claim's lock is on, nil when it holds none.
func (l *lockFile) held() fs.FileInfo {
	if !l.fl.Locked() && !l.fl.RLocked() {
		return nil
	}
	// Locked, the Flock's own handle is open: Stat describes it.
	info, err := l.fl.Stat()
	if err != nil {
		return nil
	}
	return info
}

// atPath reports whether the file locked (shared or exclusive) is the one
// at its path.
func (l *lockFile) atPath() bool {
	held := l.held()
	if held == nil {
		return false
	}
	now, err := os.Stat(l.path)
	return err == nil && os.SameFile(held, now)
}

// isMade reports whether the file locked is the one this claim created.
func (l *lockFile) isMade() bool {
	held := l.held()
	return held != nil && l.made != nil && os.SameFile(held, l.made)
}

// madeAtPath reports whether the file at the path is the one this claim
// created.
func (l *lockFile) madeAtPath() bool {
	if l.made == nil {
		return false
	}
	now, err := os.Stat(l.path)
	return err == nil && os.SameFile(now, l.made)
}

// giveUp lets go of a lock file another holds. One this claim created is
// removed when no other holds it exclusively (a shared lock, a sweep's
// checkFree, refused this one's): left, a lone lock file would be all
// the directory held. One another has locked is theirs: it stays.
func (l *lockFile) giveUp() {
	// The refused lock left no file open (gofrs/flock closes its handle
	// when it holds no lock): the shared lock opens the path again, and
	// the file it holds is checked to be the one this claim made.
	if l.made != nil {
		if ok, err := l.fl.TryRLock(); ok && err == nil && l.atPath() && l.isMade() {
			// Held shared, the file can be locked by no other claim; one
			// that opened it already finds it gone once locked (atPath).
			_ = os.Remove(l.path)
		}
	}
	_ = l.fl.Close()
}

// abandon gives up a lock file, locked or not: removed when it is the one
// this claim created, then let go, so the lock goes last.
func (l *lockFile) abandon() {
	if l.created {
		_ = os.Remove(l.path)
	}
	_ = l.fl.Close()
}

// openHeld opens the lock file by its path, for flag, and checks that the
// file opened is the one this claim holds locked: gofrs/flock lends out
// no handle to the file it locked, and by its path alone a read or a
// write could meet another file put in its place. A flock(2) lock belongs
// to the open file it was taken on, so closing this second one leaves it
// held.
func (l *lockFile) openHeld(flag int) (*os.File, error) {
	held := l.held()
	if held == nil {
		return nil, errLockReplaced
	}
	f, err := os.OpenFile(l.path, flag, 0)
	if err != nil {
		return nil, err
	}
	now, err := f.Stat()
	if err == nil && !os.SameFile(held, now) {
		err = errLockReplaced
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// read is what the lock file holds, read from the file locked.
func (l *lockFile) read() ([]byte, error) {
	f, err := l.openHeld(os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// write makes b the lock file's content, in the file locked (emptied only
// once it is known to be that one).
func (l *lockFile) write(b []byte) error {
	f, err := l.openHeld(os.O_WRONLY)
	if err != nil {
		return err
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(b, 0)
	}
	return errors.Join(err, f.Close())
}

// Path is where the lock file is.
func (l *lockFile) Path() string { return l.path }

// Close lets the lock go.
func (l *lockFile) Close() error { return l.fl.Close() }

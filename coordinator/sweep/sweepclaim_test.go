package sweep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gofrs/flock"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
)

// snapshot is every file under dir by its path in dir, with its bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		files[rel] = string(raw)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// sameFiles reports the differences between two snapshots.
func sameFiles(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s: %s changed or is gone", what, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: %s is new", what, name)
		}
	}
}

// TestASweepFinishedMeanwhileIsNotOverwritten: a sweep planned in a new
// or empty directory, in which another sweep runs to its end while the
// first one's worker checks its trials, is refused once it holds the
// directory's lock ("holds a sweep", as planning would have said), and
// every file of the other sweep, its lock file too, is as that sweep
// left it.
func TestASweepFinishedMeanwhileIsNotOverwritten(t *testing.T) {
	for _, existed := range []bool{false, true} {
		cfg := sweepConfig(t, testSweep)
		if existed {
			if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		var other map[string]string
		cfg.hooks.beforeClaim = func() {
			a := sweepConfig(t, oneTrialSweep)
			a.Dir = cfg.Dir
			runSweep(t, context.Background(), a)
			other = snapshot(t, cfg.Dir)
		}
		_, err := Prepare(context.Background(), cfg)
		if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), cfg.Dir+" holds a sweep") {
			t.Fatalf("existed %v: a sweep whose directory another sweep finished in meanwhile: %v", existed, err)
		}
		if other[sweepLock] == "" {
			t.Fatalf("the other sweep left no holder in its lock file: %v", other)
		}
		sameFiles(t, "the other sweep's directory", snapshot(t, cfg.Dir), other)
	}
}

// TestAFileAppearingBeforeTheClaimIsRefused: a directory that another
// makes, or fills, while a sweep's worker checks its trials is refused
// once the lock is held ("not empty", as planning would have said); the
// sweep leaves the directory as it found it, without its lock file, and
// does not remove it.
func TestAFileAppearingBeforeTheClaimIsRefused(t *testing.T) {
	for _, existed := range []bool{false, true} {
		cfg := sweepConfig(t, testSweep)
		if existed {
			if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cfg.hooks.beforeClaim = func() {
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfg.Dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Prepare(context.Background(), cfg)
		if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), cfg.Dir+" is not empty") {
			t.Fatalf("existed %v: a directory filled meanwhile: %v", existed, err)
		}
		sameFiles(t, "the directory filled meanwhile", snapshot(t, cfg.Dir), map[string]string{"notes.txt": "mine"})
	}
}

// TestADirectoryMadeMeanwhileIsNotRemoved: a directory another makes just
// as the sweep would make it is not taken for one the sweep made: a
// sweep that then fails to start removes only its own entries and leaves
// the directory, empty, where the other made it.
func TestADirectoryMadeMeanwhileIsNotRemoved(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.hooks.mkdir = func(path string) error {
		if err := os.Mkdir(path, 0o755); err != nil { // the other's
			t.Fatal(err)
		}
		return os.Mkdir(path, 0o755)
	}
	err := startOnAFullDisk(t, cfg)
	if !strings.Contains(err.Error(), "is empty again") {
		t.Fatalf("a failed start in a directory made meanwhile: %v", err)
	}
	if entries, err := os.ReadDir(cfg.Dir); err != nil || len(entries) > 0 {
		t.Errorf("the directory made meanwhile: %v, %v; want it there, empty", entries, err)
	}
}

// TestSweepsNamedInTheSameSecondTakeTheirOwnDirectories: two sweeps given
// no directory, named in the same second, both planning sweeps/<time>
// before either took it: the second to claim it takes sweeps/<time>-2,
// and each writes only in its own.
func TestSweepsNamedInTheSameSecondTakeTheirOwnDirectories(t *testing.T) {
	t.Chdir(t.TempDir())
	now := time.Date(2026, 11, 27, 21, 0, 0, 0, time.UTC)
	first := sweepConfig(t, oneTrialSweep)
	first.Dir, first.hooks.now = "", func() time.Time { return now }
	second := sweepConfig(t, testSweep)
	second.Dir, second.hooks.now = "", first.hooks.now
	var a *Run
	second.hooks.beforeClaim = func() {
		var err error
		if a, err = Prepare(context.Background(), first); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Prepare(context.Background(), second)
	if err != nil {
		t.Fatalf("the second sweep of the second: %v", err)
	}
	defer b.Close()
	defer a.Close()
	base := filepath.Join("sweeps", "20261127-210000")
	if a.Dir() != base || b.Dir() != base+"-2" {
		t.Fatalf("directories %s and %s, want %s and %s-2", a.Dir(), b.Dir(), base, base)
	}
	for _, c := range []struct {
		dir    string
		trials int
	}{{a.Dir(), 1}, {b.Dir(), 4}} {
		if res := readResults(t, c.dir); len(res.Trials) != c.trials {
			t.Errorf("%s: results.json has %d trials, want %d", c.dir, len(res.Trials), c.trials)
		}
	}
	res, err := b.Run(context.Background())
	if err != nil || res.Counts["succeeded"] != 4 || filepath.Dir(res.Trials[0].RunDir) != b.Dir() {
		t.Errorf("the sweep in %s: %v, %+v", b.Dir(), err, res.Counts)
	}
}

// TestUnclaimRemovesTheLockFileLast: a sweep that fails to start removes
// its entries with the directory's lock still held and its lock file
// there, the lock file last, so no second sweep can lock a new lock file
// and have its own files removed by the first.
func TestUnclaimRemovesTheLockFileLast(t *testing.T) {
	for _, existed := range []bool{false, true} {
		cfg := sweepConfig(t, testSweep)
		if existed {
			if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		lock := filepath.Join(cfg.Dir, sweepLock)
		var removed []string
		cfg.hooks.removed = func(path string) {
			removed = append(removed, filepath.Base(path))
			if path == lock {
				return
			}
			other := flock.New(lock, flock.SetFlag(os.O_RDONLY))
			defer other.Close()
			if ok, err := other.TryRLock(); ok || err != nil {
				t.Errorf("existed %v: removing %s, the lock file is gone or free (%v)", existed, path, err)
			}
		}
		startOnAFullDisk(t, cfg)
		if len(removed) < 3 || removed[len(removed)-1] != sweepLock || slices.Index(removed, sweepLock) != len(removed)-1 {
			t.Errorf("existed %v: removed %v; want the lock file last", existed, removed)
		}
	}
}

// TestALockFailureLeavesNothingBehind: a lock the system refuses (out of
// locks) leaves the directory as it was, the lock file gone and a
// directory made for the sweep removed, so the same command runs again.
func TestALockFailureLeavesNothingBehind(t *testing.T) {
	for _, existed := range []bool{false, true} {
		cfg := sweepConfig(t, testSweep)
		cfg.Dir = filepath.Join(filepath.Dir(cfg.Dir), "parent", "sweep")
		if existed {
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		failing := cfg
		failing.hooks.flock = func(*flock.Flock) (bool, error) { return false, syscall.ENOLCK }
		_, err := Prepare(context.Background(), failing)
		if !errors.Is(err, syscall.ENOLCK) || !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "locking "+filepath.Join(cfg.Dir, sweepLock)) {
			t.Fatalf("existed %v: a lock refused: %v", existed, err)
		}
		entries, statErr := os.ReadDir(cfg.Dir)
		switch {
		case existed && (statErr != nil || len(entries) > 0):
			t.Errorf("the directory there before holds %v (%v)", entries, statErr)
		case !existed && fileExists(filepath.Dir(cfg.Dir)):
			t.Errorf("the directory made for the sweep, and its parent, are still there: %v", entries)
		}
		s, err := Prepare(context.Background(), cfg)
		if err != nil {
			t.Fatalf("existed %v: the same sweep again: %v", existed, err)
		}
		s.Close()
	}
}

// TestAStorageFailureAtTheClaimIsASetupError: a full disk, a read-only
// filesystem or an I/O error met while making or locking the sweep
// directory is no fault of the configuration: a setup error (exit 1)
// saying what failed and what to do, and nothing is left behind.
func TestAStorageFailureAtTheClaimIsASetupError(t *testing.T) {
	for _, c := range []struct {
		name  string
		errno syscall.Errno
		todo  string
		fail  func(h *claimHooks, errno syscall.Errno)
	}{
		{"mkdir", syscall.ENOSPC, "free space on its filesystem", func(h *claimHooks, e syscall.Errno) {
			h.mkdir = func(path string) error { return &os.PathError{Op: "mkdir", Path: path, Err: e} }
		}},
		{"mkdir", syscall.EROFS, "mount its filesystem read-write", func(h *claimHooks, e syscall.Errno) {
			h.mkdir = func(path string) error { return &os.PathError{Op: "mkdir", Path: path, Err: e} }
		}},
		{"lock", syscall.EIO, "check the disk", func(h *claimHooks, e syscall.Errno) {
			h.flock = func(*flock.Flock) (bool, error) { return false, e }
		}},
	} {
		cfg := sweepConfig(t, testSweep)
		c.fail(&cfg.hooks, c.errno)
		_, err := Prepare(context.Background(), cfg)
		if !errors.Is(err, refusal.ErrSetup) || errors.Is(err, refusal.ErrConfig) || !errors.Is(err, c.errno) {
			t.Errorf("%s %v: %v; want a setup error", c.name, c.errno, err)
			continue
		}
		for _, want := range []string{"claiming " + cfg.Dir + " failed", c.todo, "run the same command again"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s %v: %v; want %q", c.name, c.errno, err, want)
			}
		}
		if fileExists(cfg.Dir) {
			t.Errorf("%s %v: %s is left behind", c.name, c.errno, cfg.Dir)
		}
	}
}

// TestAParentRemovedMeanwhileIsMadeAgain: a parent the sweep made that
// another failed sweep removes (empty) before the sweep's directory is
// made in it is made again, and counted made: a failed start removes it.
func TestAParentRemovedMeanwhileIsMadeAgain(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	parent := filepath.Join(filepath.Dir(cfg.Dir), "new")
	cfg.Dir = filepath.Join(parent, "sweep")
	removed := false
	cfg.hooks.mkdir = func(path string) error {
		if !removed {
			removed = true
			if err := os.Remove(parent); err != nil {
				t.Fatal(err)
			}
		}
		return os.Mkdir(path, 0o755)
	}
	err := startOnAFullDisk(t, cfg)
	if !strings.Contains(err.Error(), "made for it, is removed") {
		t.Fatalf("a failed start after its parent was made again: %v", err)
	}
	if fileExists(parent) {
		t.Errorf("%s, made for the sweep, is still there", parent)
	}
}

// holdShared takes the shared lock a sweep's checkFree takes, on the lock
// file at path, until release is called (or the test ends).
func holdShared(t *testing.T, path string) (release func()) {
	t.Helper()
	other := flock.New(path, flock.SetFlag(os.O_RDONLY))
	if ok, err := other.TryRLock(); !ok || err != nil {
		t.Fatalf("another sweep's checkFree: %v, %v", ok, err)
	}
	t.Cleanup(func() { other.Close() })
	return func() { other.Close() }
}

// TestACheckFreeDuringTheClaimIsWaitedOut: another sweep's checkFree,
// its shared lock taken on the lock file this claim created, just before
// the claim locks it, holds it for a moment: the claim tries again and
// takes the directory. The lock is let go a wait after it was taken, so
// the claim's first try is refused; the claim's tries go on for a minute
// here (tryLock, as the claim's own lock, with a longer time), so however
// late a loaded machine lets it go, the claim outlasts it.
func TestACheckFreeDuringTheClaimIsWaitedOut(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	calls := 0
	cfg.hooks.flock = func(l *flock.Flock) (bool, error) {
		calls++
		if calls > 1 {
			return tryLock(l, lockFor)
		}
		release := holdShared(t, l.Path())
		let := make(chan struct{})
		go func() {
			defer close(let)
			time.Sleep(lockWait)
			release()
		}()
		defer func() { <-let }()
		return tryLock(l, time.Minute)
	}
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a claim met by another sweep's checkFree: %v", err)
	}
	defer s.Close()
	if calls != 1 {
		t.Errorf("the lock file was locked %d times; want once, its refused lock tried again", calls)
	}
	if err := checkFree(cfg.Dir); !errors.Is(err, rundir.ErrBusy) {
		t.Errorf("the directory claimed reads as free: %v", err)
	}
}

// TestARefusedClaimLeavesNoLockFile: a claim refused throughout (another
// sweep's shared lock held past its tries) is refused as busy, and the
// lock file it created goes with the directory it made: nothing is left
// to refuse the next sweep as "not empty", and the same command runs
// again.
func TestARefusedClaimLeavesNoLockFile(t *testing.T) {
	for _, existed := range []bool{false, true} {
		cfg := sweepConfig(t, testSweep)
		if existed {
			if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		refused, held := cfg, false
		refused.hooks.flock = func(l *flock.Flock) (bool, error) {
			if !held {
				holdShared(t, l.Path()) // until the test ends
				held = true
			}
			return tryLock(l, lockFor)
		}
		_, err := Prepare(context.Background(), refused)
		if !errors.Is(err, rundir.ErrBusy) {
			t.Fatalf("existed %v: a claim refused throughout: %v", existed, err)
		}
		entries, statErr := os.ReadDir(cfg.Dir)
		switch {
		case existed && (statErr != nil || len(entries) > 0):
			t.Errorf("existed %v: the directory holds %v (%v); want it empty", existed, entries, statErr)
		case !existed && statErr == nil:
			t.Errorf("existed %v: the directory made for the sweep is still there, holding %v", existed, entries)
		}
		s, err := Prepare(context.Background(), cfg)
		if err != nil {
			t.Fatalf("existed %v: the same command again: %v", existed, err)
		}
		s.Close()
	}
}

// TestALoneEmptyLockFileIsNothing: a directory that holds only an empty
// lock file that no sweep holds (left by a claim that failed as another
// took the directory) is empty to a new sweep.
func TestALoneEmptyLockFileIsNothing(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, sweepLock), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a directory holding a lone empty lock file: %v", err)
	}
	s.Close()
}

// removeOnFirstLock has cfg's first lock, once taken, find its lock file
// removed from the path, then runs then (when given) with the path; it
// returns the count of locks taken.
func removeOnFirstLock(t *testing.T, cfg *Config, then func(path string)) *int {
	calls := new(int)
	cfg.hooks.flock = func(l *flock.Flock) (bool, error) {
		*calls++
		ok, err := tryLock(l, lockFor)
		if *calls == 1 && ok {
			if err := os.Remove(l.Path()); err != nil {
				t.Fatal(err)
			}
			if then != nil {
				then(l.Path())
			}
		}
		return ok, err
	}
	return calls
}

// TestALockFileRemovedAsItIsLockedIsOpenedAgain: a sweep that fails to
// start removes its lock file last, still held; a claim that opened the
// file before and locks it after holds a file no longer in the
// directory. (gofrs/flock opens and locks at once: the file is removed
// here just after the lock, before the claim looks at what it holds,
// which is what the claim then meets.) The claim sees it is not the one
// at the path and locks the lock file there: the directory reads as
// held, by this sweep.
func TestALockFileRemovedAsItIsLockedIsOpenedAgain(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	calls := removeOnFirstLock(t, &cfg, nil) // as the failing sweep's unclaim did, the lock taken since
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a claim whose lock file was removed as it was locked: %v", err)
	}
	defer s.Close()
	if *calls != 2 {
		t.Errorf("the lock was taken %d times; want 2 (the removed file's, then the new one's)", *calls)
	}
	err = checkFree(cfg.Dir)
	if want := fmt.Sprintf("pid %d, %s", os.Getpid(), sweepHolder); !errors.Is(err, rundir.ErrBusy) || !strings.Contains(err.Error(), want) {
		t.Errorf("the directory claimed: %v; want it held, by %q", err, want)
	}
}

// TestALockFileReplacedAsItIsLockedIsNotTaken: a third sweep that takes
// the directory (a new lock file, locked, its record in it) after the
// claim's file was removed refuses the claim as busy, naming the third;
// its lock file is as it left it.
func TestALockFileReplacedAsItIsLockedIsNotTaken(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const third = "pid 999999, tolaria sweep"
	removeOnFirstLock(t, &cfg, func(path string) {
		other := flock.New(path)
		if ok, err := other.TryLock(); !ok || err != nil {
			t.Fatalf("the third sweep's lock: %v, %v", ok, err)
		}
		t.Cleanup(func() { other.Close() })
		if err := os.WriteFile(path, []byte(third), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	_, err := Prepare(context.Background(), cfg)
	if !errors.Is(err, rundir.ErrBusy) || !strings.Contains(err.Error(), third) {
		t.Fatalf("a claim whose lock file another sweep replaced and holds: %v; want busy, naming %q", err, third)
	}
	sameFiles(t, "the third sweep's directory", snapshot(t, cfg.Dir), map[string]string{sweepLock: third})
}

// TestAFailedStartInADirectoryTakenMeanwhileSaysSo: a sweep that fails
// to start in a directory it made, which another sweep takes as its lock
// file goes, leaves the directory to that one and says so, not that the
// directory is empty again.
func TestAFailedStartInADirectoryTakenMeanwhileSaysSo(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	lock := filepath.Join(cfg.Dir, sweepLock)
	cfg.hooks.removed = func(path string) {
		if path == lock { // the other sweep's claim
			if err := os.WriteFile(lock, []byte("pid 999999, tolaria sweep"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := startOnAFullDisk(t, cfg)
	if strings.Contains(err.Error(), "empty again") || !strings.Contains(err.Error(), "the directory, made for it, is left: another tolaria has taken it since") {
		t.Fatalf("a failed start in a directory taken meanwhile: %v", err)
	}
	sameFiles(t, "the directory taken meanwhile", snapshot(t, cfg.Dir), map[string]string{sweepLock: "pid 999999, tolaria sweep"})
}

// TestALockFileRemovedBeforeItIsLockedIsMadeAgain: a lock file removed
// after the claim looked (created it, or found it) and before it is
// opened to be locked (another sweep, failing to start, removed its lock
// file last) is not made again by the lock's open, unknown to the claim:
// the claim looks again, creates it, and holds it; the directory reads as
// held, by this sweep.
func TestALockFileRemovedBeforeItIsLockedIsMadeAgain(t *testing.T) {
	for _, existed := range []bool{false, true} {
		cfg := sweepConfig(t, testSweep)
		if existed {
			if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfg.Dir, sweepLock), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		calls := 0
		cfg.hooks.flock = func(l *flock.Flock) (bool, error) {
			calls++
			if calls == 1 {
				if err := os.Remove(l.Path()); err != nil {
					t.Fatal(err)
				}
			}
			return tryLock(l, lockFor)
		}
		s, err := Prepare(context.Background(), cfg)
		if err != nil {
			t.Fatalf("existed %v: a claim whose lock file was removed before it was locked: %v", existed, err)
		}
		if calls != 2 {
			t.Errorf("existed %v: the lock file was locked %d times; want 2 (the removed one's path, then the file made again)", existed, calls)
		}
		err = checkFree(cfg.Dir)
		if want := fmt.Sprintf("pid %d, %s", os.Getpid(), sweepHolder); !errors.Is(err, rundir.ErrBusy) || !strings.Contains(err.Error(), want) {
			t.Errorf("existed %v: the directory claimed: %v; want it held, by %q", existed, err, want)
		}
		s.Close()
	}
}

// TestTheHolderIsWrittenOnlyInTheFileLocked: the lock file's record is
// read and written by its path, in the file there only while it is the
// one the claim holds: a file another put in its place is left as it is.
func TestTheHolderIsWrittenOnlyInTheFileLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), sweepLock)
	l, ok, err := lockSweepFile(path, claimHooks{}.lock)
	if !ok || err != nil {
		t.Fatalf("locking %s: %v, %v", path, ok, err)
	}
	defer l.Close()
	if err := l.write([]byte("mine")); err != nil {
		t.Fatal(err)
	}
	if got, err := l.read(); string(got) != "mine" || err != nil {
		t.Fatalf("the record read back: %q, %v", got, err)
	}
	const other = "pid 999999, tolaria sweep"
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.write([]byte("mine again")); !errors.Is(err, errLockReplaced) {
		t.Errorf("writing once the lock file was replaced: %v; want %v", err, errLockReplaced)
	}
	if got, err := l.read(); got != nil || !errors.Is(err, errLockReplaced) {
		t.Errorf("reading once the lock file was replaced: %q, %v; want %v", got, err, errLockReplaced)
	}
	if raw, err := os.ReadFile(path); string(raw) != other || err != nil {
		t.Errorf("the file put in the lock file's place holds %q (%v); want %q", raw, err, other)
	}
}

// TestARefusedClaimRemovesOnlyTheLockFileItMade: a claim refused removes
// a lock file it created only when no other holds it exclusively, and
// only the file it created: one that another claim, finding it there,
// locked first, or one that replaced it (held shared by a sweep's
// checkFree), stays as the other left it, and the claim is refused as
// busy, naming the other.
func TestARefusedClaimRemovesOnlyTheLockFileItMade(t *testing.T) {
	const other = "pid 999999, tolaria sweep"
	for _, c := range []struct {
		name string
		// meanwhile is what the other does with the file this claim
		// made, before this claim locks it.
		meanwhile func(path string)
	}{
		{"locked by another", func(path string) {
			l := flock.New(path, flock.SetFlag(os.O_RDONLY))
			if ok, err := l.TryLock(); !ok || err != nil {
				t.Fatalf("the other sweep's lock: %v, %v", ok, err)
			}
			t.Cleanup(func() { l.Close() })
			if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by another's", func(path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(other), 0o644); err != nil {
				t.Fatal(err)
			}
			holdShared(t, path) // until the test ends
		}},
	} {
		cfg := sweepConfig(t, testSweep)
		if err := os.Mkdir(cfg.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		calls := 0
		cfg.hooks.flock = func(l *flock.Flock) (bool, error) {
			if calls++; calls == 1 {
				c.meanwhile(l.Path())
			}
			return tryLock(l, lockFor)
		}
		_, err := Prepare(context.Background(), cfg)
		if !errors.Is(err, rundir.ErrBusy) || !strings.Contains(err.Error(), other) {
			t.Errorf("%s: a claim whose lock file was %s: %v; want busy, naming %q", c.name, c.name, err, other)
		}
		sameFiles(t, c.name, snapshot(t, cfg.Dir), map[string]string{sweepLock: other})
	}
}

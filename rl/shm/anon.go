package shm

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CreateShared makes a new, zeroed agent memory that has no name in any
// file system (a memfd) and maps it. Another process opens it through
// Path, /proc/<pid>/fd/<n>, while this one holds it open. The memory is
// freed when the last process that maps or holds it ends, however it
// ends: a SIGKILL leaves nothing behind in /dev/shm to clean up.
func CreateShared(name string, l Layout) (*Memory, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return createShared(name, l, l.describe())
}

// CreateSharedFrom makes an anonymous agent memory, as CreateShared does,
// holding the contents of a saved buffer s (see LoadSaved), with its stop
// flag clear.
func CreateSharedFrom(name string, s *Saved) (*Memory, error) {
	m, err := createShared(name, s.Layout(), s.image)
	if err != nil {
		return nil, err
	}
	m.ClearStop()
	return m, nil
}

// createShared writes init at the start of a new memfd of l's size and
// maps it, checked as Open checks a file.
func createShared(name string, l Layout, init []byte) (*Memory, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("shm: create anonymous memory %s (%d bytes): %w", name, l.Size(), err)
	}
	f := os.NewFile(uintptr(fd), name)
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	err = f.Truncate(l.Size())
	if err == nil {
		_, err = f.WriteAt(init, 0)
	}
	var m *Memory
	if err == nil {
		m, err = mapFile(f, path, l)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("shm: create anonymous memory %s (%d bytes): %w", name, l.Size(), err), f.Close())
	}
	m.file = f
	return m, nil
}

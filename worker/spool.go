package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// A spool is the protocol carried by files in a directory that the
// coordinator and the worker share (a run directory on a filesystem every
// node mounts), for a worker that a scheduler starts on another machine,
// where no pipe reaches. Each side appends its JSON lines to one file and
// follows the other's; the coordinator ends the conversation by creating
// SpoolClosed, as closing a worker's standard input does.
const (
	SpoolIn     = "to-worker.jsonl"   // coordinator → worker
	SpoolOut    = "from-worker.jsonl" // worker → coordinator
	SpoolClosed = "to-worker.closed"  // the coordinator has let go: the worker's input ends
)

// DefaultSpoolPoll is how often a side that has read everything looks for
// more.
const DefaultSpoolPoll = 100 * time.Millisecond

// errSpoolStopped ends a follower's read that its reader gave up on.
var errSpoolStopped = errors.New("worker: stopped following the spool")

// follower reads a file that another process appends to, as a pipe reads:
// at the end of what has been written it waits for more. It reopens the
// file at each wait, so a network filesystem's close-to-open consistency
// shows it what the other node wrote. It returns io.EOF once the closed
// file exists and everything before it has been read, and errSpoolStopped
// once stop is closed.
type follower struct {
	path   string
	closed string // "" never ends
	poll   time.Duration
	stop   <-chan struct{}
	f      *os.File
	off    int64
	// giveUp, once set (unix nanoseconds), ends the stream then even
	// without the closed marker: letGo after Answered.
	giveUp atomic.Int64
	letGo  time.Duration
}

// SpoolLetGo is how long a worker that has answered waits for the
// coordinator to let it go (SpoolClosed) before it ends by itself: a
// coordinator that died must not leave its tasks holding their nodes.
const SpoolLetGo = time.Minute

// Answered tells the worker's end of the spool that the answer is sent:
// its input ends within SpoolLetGo even if the coordinator never lets go.
func (r *follower) Answered() { r.giveUp.CompareAndSwap(0, time.Now().Add(r.letGo).UnixNano()) }

func (r *follower) Read(p []byte) (int, error) {
	for {
		if g := r.giveUp.Load(); g != 0 && time.Now().UnixNano() >= g {
			return 0, io.EOF
		}
		if r.f == nil {
			f, err := os.Open(r.path)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return 0, err
			}
			if err == nil {
				if _, err := f.Seek(r.off, io.SeekStart); err != nil {
					f.Close()
					return 0, err
				}
				r.f = f
			}
		}
		if r.f != nil {
			n, err := r.f.Read(p)
			r.off += int64(n)
			if n > 0 {
				return n, nil
			}
			if err != nil && err != io.EOF {
				return 0, err
			}
		}
		// At the end: the closed marker, written after the last line, ends
		// the stream once a read after seeing it finds nothing more.
		if r.closed != "" && r.f != nil {
			if _, err := os.Stat(r.closed); err == nil {
				n, err := r.f.Read(p)
				r.off += int64(n)
				if n > 0 {
					return n, nil
				}
				if err != nil && err != io.EOF {
					return 0, err
				}
				return 0, io.EOF
			}
		}
		if r.f != nil {
			r.f.Close()
			r.f = nil
		}
		select {
		case <-r.stop:
			return 0, errSpoolStopped
		case <-time.After(r.poll):
		}
	}
}

func (r *follower) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// OpenSpool is the worker's end of the spool in dir: what the coordinator
// sends, ending when it lets go, and where the answers go. The
// coordinator creates the spool before it starts the worker; a spool that
// is missing is an error that names it.
func OpenSpool(dir string) (in io.ReadCloser, out io.WriteCloser, err error) {
	if _, err := os.Stat(filepath.Join(dir, SpoolIn)); err != nil {
		return nil, nil, fmt.Errorf("worker: no request in the spool %s (%w): the coordinator writes %s there before it starts the worker; is the directory shared with it?",
			dir, err, SpoolIn)
	}
	o, err := os.OpenFile(filepath.Join(dir, SpoolOut), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("worker: answering through the spool: %w", err)
	}
	return &follower{path: filepath.Join(dir, SpoolIn), closed: filepath.Join(dir, SpoolClosed), poll: DefaultSpoolPoll, letGo: SpoolLetGo}, o, nil
}

// newSpool empties dir's spool for a new conversation and returns the
// coordinator's end of its input, created (with an empty output) before
// the worker starts.
func newSpool(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, name := range []string{SpoolClosed, SpoolIn, SpoolOut} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	out, err := os.OpenFile(filepath.Join(dir, SpoolOut), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	out.Close()
	return os.OpenFile(filepath.Join(dir, SpoolIn), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o644)
}

// closeSpool lets the worker go: its input ends after what was sent.
func closeSpool(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, SpoolClosed), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// Package shm is an agent's shared memory: one memory-mapped file (a memfd
// in a run, see CreateShared) that the agent's learner and actor processes
// both map.
// It holds the learner's published weights, the replay buffer the actor
// fills and the learner samples, and the agent's control words (a stop
// flag, an epoch and the learner's step count).
//
// Nothing in it takes a lock. The weights are a double buffer with a
// sequence number per slot (a seqlock): the learner writes the slot that
// is not published, and a reader that finds a slot's sequence changed
// during its copy retries, so it never returns a torn copy. Each replay
// record carries a stamp saying which transition it holds and whether its
// write is complete, checked before and after a copy in the same way.
// Every word of shared memory is read and written with sync/atomic, so the
// protocol is free of data races in Go's memory model and works between
// processes (hardware atomics on the same physical pages).
//
// Each region has one writer: one process publishes weights (the learner)
// and one appends transitions (the actor). Readers may be many.
package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"

	"github.com/tolaria-ml/tolaria/internal/field"
	"golang.org/x/sys/unix"
)

// Dir is the tmpfs where named agent memory files (Create) belong, so
// their pages are never written to disk. A run uses anonymous memory
// (CreateShared), which leaves nothing here.
const Dir = "/dev/shm"

// Errors a caller can act on.
var (
	// ErrCorrupt: the file is not agent memory, or its header is damaged.
	ErrCorrupt = errors.New("not intact agent memory")
	// ErrMismatch: the file's layout is not the one the caller expects
	// (another model or environment, or another run's settings).
	ErrMismatch = errors.New("agent memory layout mismatch")
	// ErrNoWeights: nothing has been published yet.
	ErrNoWeights = errors.New("no weights published yet")
	// ErrNotEnough: the replay buffer holds fewer transitions than asked for.
	ErrNotEnough = errors.New("too few transitions in the replay buffer")
	// ErrContended: a read kept finding the data rewritten under it.
	ErrContended = errors.New("shared memory rewritten during every read attempt")
	// ErrClosed: the memory was closed.
	ErrClosed = errors.New("agent memory is closed")
)

// Layout sizes an agent's memory.
type Layout struct {
	Params   int // float32 values in a published weight vector
	ObsSize  int // float32 values in an observation
	Capacity int // transitions the replay buffer holds
}

// Validate reports a layout that cannot be mapped.
func (l Layout) Validate() error {
	switch {
	case l.Params <= 0 || l.Params > 1<<30:
		return fmt.Errorf("shm: weights must have 1..2^30 values, got %d", l.Params)
	case l.ObsSize <= 0 || l.ObsSize > 1<<20:
		return fmt.Errorf("shm: observations must have 1..2^20 values, got %d", l.ObsSize)
	case l.Capacity <= 0 || l.Capacity > 1<<28:
		return field.Errorf("buffer_capacity", "must be 1..2^28 transitions, got %d", l.Capacity)
	case l.size() > 1<<40:
		return field.Errorf("buffer_capacity", "agent memory would take %d bytes; lower buffer_capacity", l.size())
	}
	return nil
}

// The file starts with a header page. Its first bytes describe the layout
// and are written once, at creation, with a CRC; the control words follow,
// each on its own cache line so that the actor's and the learner's writes
// do not contend.
const (
	magic       = "TLRLMEM\x00"
	format      = 1
	headerSize  = 4096
	describeLen = 72 // bytes covered by the CRC
	offCRC      = describeLen
	offStop     = 128
	offEpoch    = 192
	offSteps    = 256
	offVersion  = 320 // the version of the published weights
	offHead     = 384 // transitions ever appended
	offFirst    = 448 // the number of the first transition this memory held
	line        = 64

	slotHeader = line // seq, version, step
	recHeader  = 24   // stamp, action, reward, flags
)

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func (l Layout) slotSize() int   { return slotHeader + roundUp(4*l.Params, line) }
func (l Layout) recordSize() int { return roundUp(recHeader+8*l.ObsSize, 8) }
func (l Layout) weightsOff() int { return headerSize }
func (l Layout) replayOff() int  { return headerSize + 2*l.slotSize() }
func (l Layout) size() int       { return l.replayOff() + l.Capacity*l.recordSize() }

// Size is the file's length in bytes.
func (l Layout) Size() int64 { return int64(l.size()) }

func (l Layout) describe() []byte {
	b := make([]byte, describeLen+4)
	copy(b, magic)
	le := binary.LittleEndian
	le.PutUint32(b[8:], format)
	le.PutUint32(b[12:], uint32(l.ObsSize))
	le.PutUint64(b[16:], uint64(l.Params))
	le.PutUint64(b[24:], uint64(l.Capacity))
	le.PutUint64(b[32:], uint64(l.recordSize()))
	le.PutUint64(b[40:], uint64(l.weightsOff()))
	le.PutUint64(b[48:], uint64(l.slotSize()))
	le.PutUint64(b[56:], uint64(l.replayOff()))
	le.PutUint64(b[64:], uint64(l.size()))
	le.PutUint32(b[offCRC:], crc32.ChecksumIEEE(b[:describeLen]))
	return b
}

// readLayout parses a header written by describe.
func readLayout(b []byte) (Layout, error) {
	le := binary.LittleEndian
	if string(b[:8]) != magic {
		return Layout{}, fmt.Errorf("%w: it does not start with tolaria's agent-memory magic", ErrCorrupt)
	}
	if crc32.ChecksumIEEE(b[:describeLen]) != le.Uint32(b[offCRC:]) {
		return Layout{}, fmt.Errorf("%w: its header checksum does not match", ErrCorrupt)
	}
	if f := le.Uint32(b[8:]); f != format {
		return Layout{}, fmt.Errorf("%w: it has format %d, this tolaria reads format %d", ErrMismatch, f, format)
	}
	l := Layout{ObsSize: int(le.Uint32(b[12:])), Params: int(le.Uint64(b[16:])), Capacity: int(le.Uint64(b[24:]))}
	if err := l.Validate(); err != nil {
		return Layout{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if string(l.describe()[:describeLen]) != string(b[:describeLen]) {
		return Layout{}, fmt.Errorf("%w: its section offsets do not follow from its sizes", ErrCorrupt)
	}
	return l, nil
}

// Memory is one agent's mapped memory. Its methods are safe for concurrent
// use, within the one-writer rule of the package comment; Close must come
// after every other call has returned.
type Memory struct {
	path   string
	layout Layout
	mem    []byte
	base   unsafe.Pointer
	closed atomic.Bool
	// file keeps an anonymous memory (CreateShared) alive while this
	// process may still hand its path to another; nil for a named file.
	file *os.File
}

// Create makes a new, zeroed agent memory file at path and maps it. The
// file appears whole or not at all: it is written under a temporary name
// and renamed into place, and Create refuses to replace an existing file
// (fs.ErrExist): Remove it first, or Open it to continue a run.
func Create(path string, l Layout) (*Memory, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("shm: create %s: %w; remove it, or open it to continue the run", path, fs.ErrExist)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("shm: create %s: %w", path, err)
	}
	err = tmp.Truncate(l.Size())
	if err == nil {
		_, err = tmp.WriteAt(l.describe(), 0)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat2(unix.AT_FDCWD, tmp.Name(), unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		os.Remove(tmp.Name())
		if errors.Is(err, unix.EEXIST) {
			err = fs.ErrExist
		}
		return nil, fmt.Errorf("shm: create %s (%d bytes): %w", path, l.Size(), err)
	}
	return Open(path, l)
}

// Open maps the agent memory file at path, which must have layout want.
// A missing file is fs.ErrNotExist; a file that is not intact agent memory
// is ErrCorrupt; one with another layout is ErrMismatch, naming both.
func Open(path string, want Layout) (*Memory, error) {
	if err := want.Validate(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("shm: open %s: %w: the learner's memory is made by Create when the agent starts", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	defer f.Close()
	return mapFile(f, path, want)
}

// mapFile checks that f (named path in errors) is intact agent memory of
// layout want and maps it; f may be closed afterwards.
func mapFile(f *os.File, path string, want Layout) (*Memory, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	if st.Size() < headerSize {
		return nil, fmt.Errorf("shm: open %s: %w: %d bytes, shorter than the %d-byte header", path, ErrCorrupt, st.Size(), headerSize)
	}
	head := make([]byte, describeLen+4)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	got, err := readLayout(head)
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", path, err)
	}
	if got != want {
		return nil, fmt.Errorf("shm: open %s: %w: the file holds %d weights, %d-value observations and %d transitions; expected %d, %d and %d",
			path, ErrMismatch, got.Params, got.ObsSize, got.Capacity, want.Params, want.ObsSize, want.Capacity)
	}
	if st.Size() != got.Size() {
		return nil, fmt.Errorf("shm: open %s: %w: %d bytes, its layout needs %d", path, ErrCorrupt, st.Size(), got.Size())
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(got.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s (%d bytes): %w", path, got.Size(), err)
	}
	return &Memory{path: path, layout: got, mem: mem, base: unsafe.Pointer(&mem[0])}, nil
}

// Remove deletes the file at path; a missing file is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shm: remove %s: %w", path, err)
	}
	return nil
}

// Close unmaps the memory; a named file stays for other processes, and an
// anonymous one lives on while another process maps it.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	err := unix.Munmap(m.mem)
	if err != nil {
		err = fmt.Errorf("shm: unmap %s: %w", m.path, err)
	}
	if m.file != nil {
		err = errors.Join(err, m.file.Close())
	}
	return err
}

// Path is the file's path.
func (m *Memory) Path() string { return m.path }

// Layout is the memory's layout.
func (m *Memory) Layout() Layout { return m.layout }

func (m *Memory) u32(off int) *uint32 { return (*uint32)(unsafe.Add(m.base, off)) }
func (m *Memory) u64(off int) *uint64 { return (*uint64)(unsafe.Add(m.base, off)) }

// storeFloats and loadFloats copy float32 values word by word with atomic
// stores and loads: a copy racing a write is detected by the sequence
// numbers around it, and is never a data race.
func (m *Memory) storeFloats(off int, src []float32) {
	for i, v := range src {
		atomic.StoreUint32(m.u32(off+4*i), math.Float32bits(v))
	}
}

func (m *Memory) loadFloats(dst []float32, off int) {
	for i := range dst {
		dst[i] = math.Float32frombits(atomic.LoadUint32(m.u32(off + 4*i)))
	}
}

// Stop sets the stop flag; every process of the agent sees it.
func (m *Memory) Stop() { atomic.StoreUint32(m.u32(offStop), 1) }

// ClearStop clears the stop flag: a run resumed from a saved buffer
// starts its processes with it clear.
func (m *Memory) ClearStop() { atomic.StoreUint32(m.u32(offStop), 0) }

// Stopped reports whether the stop flag is set.
func (m *Memory) Stopped() bool { return atomic.LoadUint32(m.u32(offStop)) != 0 }

// SetEpoch stores the agent's epoch counter.
func (m *Memory) SetEpoch(e uint64) { atomic.StoreUint64(m.u64(offEpoch), e) }

// Epoch is the agent's epoch counter.
func (m *Memory) Epoch() uint64 { return atomic.LoadUint64(m.u64(offEpoch)) }

// SetLearnerSteps stores the learner's training-step count.
func (m *Memory) SetLearnerSteps(n uint64) { atomic.StoreUint64(m.u64(offSteps), n) }

// LearnerSteps is the learner's training-step count.
func (m *Memory) LearnerSteps() uint64 { return atomic.LoadUint64(m.u64(offSteps)) }

// weight slot s's words: its sequence number (odd while it is written),
// the version it holds and the learner step it came from.
func (m *Memory) slot(s int) (seq, version, step *uint64, data int) {
	off := m.layout.weightsOff() + s*m.layout.slotSize()
	return m.u64(off), m.u64(off + 8), m.u64(off + 16), off + slotHeader
}

// Version is the version of the published weights: 0 before the first
// Publish, then 1, 2, ...
func (m *Memory) Version() uint64 { return atomic.LoadUint64(m.u64(offVersion)) }

// Publish makes params (Layout().Params values) the published weights,
// taken at learner step step, and returns their version. Only one process
// (the learner) may publish. It writes the slot readers are not directed
// to, so a reader is disturbed only by two publishes during one read.
func (m *Memory) Publish(params []float32, step uint64) (uint64, error) {
	if m.closed.Load() {
		return 0, ErrClosed
	}
	if len(params) != m.layout.Params {
		return 0, fmt.Errorf("shm: publish %d weights into memory laid out for %d", len(params), m.layout.Params)
	}
	v := m.Version() + 1
	seq, version, st, data := m.slot(int(v % 2))
	s := atomic.LoadUint64(seq)
	if s%2 == 1 {
		s++ // a publisher died mid-write; the slot is rewritten whole below
	}
	atomic.StoreUint64(seq, s+1)
	m.storeFloats(data, params)
	atomic.StoreUint64(version, v)
	atomic.StoreUint64(st, step)
	atomic.StoreUint64(seq, s+2)
	atomic.StoreUint64(m.u64(offVersion), v)
	return v, nil
}

// maxAttempts bounds a read's retries. A weight read fails only if two
// publishes land inside each of this many copies in a row.
const maxAttempts = 1000

// ReadWeights copies the published weights into dst (Layout().Params
// values) and returns their version and learner step. The copy is never
// torn: it is entirely one published vector.
func (m *Memory) ReadWeights(dst []float32) (version, step uint64, err error) {
	if m.closed.Load() {
		return 0, 0, ErrClosed
	}
	if len(dst) != m.layout.Params {
		return 0, 0, fmt.Errorf("shm: read weights into %d values from memory laid out for %d", len(dst), m.layout.Params)
	}
	for range maxAttempts {
		v := m.Version()
		if v == 0 {
			return 0, 0, ErrNoWeights
		}
		seq, version, st, data := m.slot(int(v % 2))
		s1 := atomic.LoadUint64(seq)
		if s1%2 == 1 {
			continue
		}
		got, step := atomic.LoadUint64(version), atomic.LoadUint64(st)
		m.loadFloats(dst, data)
		if atomic.LoadUint64(seq) == s1 && got >= v {
			return got, step, nil
		}
	}
	return 0, 0, fmt.Errorf("shm: read weights from %s: %w (%d attempts)", m.path, ErrContended, maxAttempts)
}

package shm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
)

// Transition is one step of experience.
type Transition struct {
	Obs        []float32 // the observation acted on (ObsSize values)
	Action     int
	Reward     float32
	Terminated bool      // the next state is terminal: its value is 0
	Truncated  bool      // the episode was cut by a time limit after this step
	NextObs    []float32 // the observation the action led to (ObsSize values)
}

// Batch is a sampled minibatch, in flat row-major slices of n rows.
type Batch struct {
	Obs        []float32 // n×ObsSize
	Actions    []int
	Rewards    []float32
	Terminated []bool
	NextObs    []float32 // n×ObsSize
	Index      []uint64  // the transition number of each row, 0 the first ever appended
}

// NewBatch allocates a batch of n rows for layout l.
func NewBatch(l Layout, n int) *Batch {
	return &Batch{Obs: make([]float32, n*l.ObsSize), Actions: make([]int, n), Rewards: make([]float32, n),
		Terminated: make([]bool, n), NextObs: make([]float32, n*l.ObsSize), Index: make([]uint64, n)}
}

// Len is the number of rows.
func (b *Batch) Len() int { return len(b.Actions) }

const (
	flagTerminated = 1 << iota
	flagTruncated
)

// record i's offset. Its stamp is 2j+1 while transition j is written into
// it and 2j+2 once that write is complete (0: never written).
func (m *Memory) record(slot int) int {
	return m.layout.replayOff() + slot*m.layout.recordSize()
}

// Appended is the number of transitions appended since the agent began,
// counting from First; the buffer holds the last min(Appended-First,
// Capacity) of them.
func (m *Memory) Appended() uint64 { return atomic.LoadUint64(m.u64(offHead)) }

// First is the number of the first transition this memory held: 0, or
// where StartAt began an empty buffer for an agent that had already
// stepped its environments.
func (m *Memory) First() uint64 { return atomic.LoadUint64(m.u64(offFirst)) }

// Len is the number of transitions the buffer holds.
func (m *Memory) Len() int { return int(m.held(m.Appended())) }

// held is how many transitions the buffer holds when head were appended.
func (m *Memory) held(head uint64) uint64 {
	return min(head-min(m.First(), head), uint64(m.layout.Capacity))
}

// StartAt numbers an empty buffer's first transition n, so an agent
// whose buffer was lost goes on counting its environment steps (and its
// exploration schedule) from n while the buffer refills. Call it before
// anything is appended.
func (m *Memory) StartAt(n uint64) error {
	if m.closed.Load() {
		return ErrClosed
	}
	if m.Appended() != 0 || m.First() != 0 {
		return fmt.Errorf("shm: start %s at transition %d: it already holds transitions %d..%d", m.path, n, m.First(), m.Appended())
	}
	atomic.StoreUint64(m.u64(offFirst), n)
	atomic.StoreUint64(m.u64(offHead), n)
	return nil
}

// Append adds a transition, overwriting the oldest once the buffer is
// full. Only one process (the actor) may append.
func (m *Memory) Append(t Transition) error {
	if m.closed.Load() {
		return ErrClosed
	}
	o := m.layout.ObsSize
	if len(t.Obs) != o || len(t.NextObs) != o {
		return fmt.Errorf("shm: append a transition with %d- and %d-value observations into memory laid out for %d", len(t.Obs), len(t.NextObs), o)
	}
	if t.Action < 0 || t.Action > math.MaxUint32 {
		return fmt.Errorf("shm: append action %d: actions are 0..2^32-1", t.Action)
	}
	j := m.Appended()
	off := m.record(int(j % uint64(m.layout.Capacity)))
	stamp := m.u64(off)
	atomic.StoreUint64(stamp, 2*j+1)
	var flags uint32
	if t.Terminated {
		flags |= flagTerminated
	}
	if t.Truncated {
		flags |= flagTruncated
	}
	atomic.StoreUint32(m.u32(off+8), uint32(t.Action))
	atomic.StoreUint32(m.u32(off+12), math.Float32bits(t.Reward))
	atomic.StoreUint32(m.u32(off+16), flags)
	m.storeFloats(off+recHeader, t.Obs)
	m.storeFloats(off+recHeader+4*o, t.NextObs)
	atomic.StoreUint64(stamp, 2*j+2)
	atomic.StoreUint64(m.u64(offHead), j+1)
	return nil
}

// Sample fills b with b.Len() transitions drawn uniformly, with
// replacement, from those the buffer holds. A record that the actor is
// overwriting while it is copied is drawn again, so every row is one whole
// transition. With fewer than b.Len() transitions held it returns
// ErrNotEnough.
func (m *Memory) Sample(rng *rand.Rand, b *Batch) error {
	if m.closed.Load() {
		return ErrClosed
	}
	n, o := b.Len(), m.layout.ObsSize
	if len(b.Obs) != n*o || len(b.NextObs) != n*o || len(b.Rewards) != n || len(b.Terminated) != n || len(b.Index) != n {
		return fmt.Errorf("shm: sample into a batch not made by NewBatch for this layout")
	}
	for r := 0; r < n; r++ {
		if err := m.sampleRow(rng, b, r); err != nil {
			return err
		}
	}
	return nil
}

func (m *Memory) sampleRow(rng *rand.Rand, b *Batch, r int) error {
	o, capacity := m.layout.ObsSize, uint64(m.layout.Capacity)
	for range maxAttempts {
		head := m.Appended()
		held := m.held(head)
		if held < uint64(b.Len()) {
			return fmt.Errorf("shm: sample %d from %s: %w (%d held)", b.Len(), m.path, ErrNotEnough, held)
		}
		j := head - held + rng.Uint64N(held)
		off := m.record(int(j % capacity))
		stamp := m.u64(off)
		if atomic.LoadUint64(stamp) != 2*j+2 {
			continue // being overwritten, or already replaced
		}
		action := atomic.LoadUint32(m.u32(off + 8))
		reward := math.Float32frombits(atomic.LoadUint32(m.u32(off + 12)))
		flags := atomic.LoadUint32(m.u32(off + 16))
		m.loadFloats(b.Obs[r*o:(r+1)*o], off+recHeader)
		m.loadFloats(b.NextObs[r*o:(r+1)*o], off+recHeader+4*o)
		if atomic.LoadUint64(stamp) != 2*j+2 {
			continue
		}
		b.Actions[r], b.Rewards[r], b.Terminated[r], b.Index[r] = int(action), reward, flags&flagTerminated != 0, j
		return nil
	}
	return fmt.Errorf("shm: sample from %s: %w (%d attempts)", m.path, ErrContended, maxAttempts)
}

// Read copies transition j (a number below Appended, among the last
// Capacity) into t, whose Obs and NextObs must have ObsSize values. It is
// how a checkpoint saves the buffer and a test inspects it.
func (m *Memory) Read(j uint64, t *Transition) error {
	if m.closed.Load() {
		return ErrClosed
	}
	o, capacity := m.layout.ObsSize, uint64(m.layout.Capacity)
	if len(t.Obs) != o || len(t.NextObs) != o {
		return fmt.Errorf("shm: read a transition into %d- and %d-value observations from memory laid out for %d", len(t.Obs), len(t.NextObs), o)
	}
	head := m.Appended()
	if j >= head || head-j > m.held(head) {
		return fmt.Errorf("shm: read transition %d: the buffer holds %d..%d", j, head-m.held(head), head)
	}
	off := m.record(int(j % capacity))
	stamp := m.u64(off)
	for range maxAttempts {
		if atomic.LoadUint64(stamp) != 2*j+2 {
			return fmt.Errorf("shm: read transition %d: it was overwritten", j)
		}
		action := atomic.LoadUint32(m.u32(off + 8))
		reward := math.Float32frombits(atomic.LoadUint32(m.u32(off + 12)))
		flags := atomic.LoadUint32(m.u32(off + 16))
		m.loadFloats(t.Obs, off+recHeader)
		m.loadFloats(t.NextObs, off+recHeader+4*o)
		if atomic.LoadUint64(stamp) == 2*j+2 {
			t.Action, t.Reward = int(action), reward
			t.Terminated, t.Truncated = flags&flagTerminated != 0, flags&flagTruncated != 0
			return nil
		}
	}
	return fmt.Errorf("shm: read transition %d: %w", j, ErrContended)
}

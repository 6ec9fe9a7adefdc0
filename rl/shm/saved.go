package shm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
)

// A saved buffer (a run's replay.buf) is an agent memory's whole contents
// with who it belongs to, sealed as a tolaria checkpoint is:
//
//	magic        "TOLARIA-RLBUF\x00v1\n"
//	header size  uint32, little-endian
//	header       JSON (SavedHeader)
//	image        the agent memory's bytes (header page, weights, replay ring)
//	digest       SHA-256 of every byte before it (32 bytes)
//
// The digest covers every transition, not only the header, so a damaged
// byte anywhere is found before a learner trains on it, and the owner
// (agent and configuration) keeps one agent's or one run's buffer from
// standing in for another's.
const (
	savedMagic      = "TOLARIA-RLBUF\x00v1\n"
	savedDigestSize = sha256.Size
	maxSavedHeader  = 1 << 16
)

// ErrSaved is wrapped by every refusal of a saved buffer.
var ErrSaved = errors.New("saved replay buffer refused")

// Owner is what a saved buffer belongs to: an agent of a run made under
// one configuration (a digest of it, as its owner computes it).
type Owner struct {
	Agent  int    `json:"agent"`
	Config string `json:"config"`
}

// SavedHeader describes a saved buffer.
type SavedHeader struct {
	Owner
	Params       int    `json:"params"`
	ObsSize      int    `json:"obs_size"`
	Capacity     int    `json:"capacity"`
	First        uint64 `json:"first"`
	Appended     uint64 `json:"appended"`
	Epoch        uint64 `json:"epoch"`
	LearnerSteps uint64 `json:"learner_steps"`
	Size         int64  `json:"size"`
}

// Saved is a verified saved buffer, ready for CreateSharedFrom.
type Saved struct {
	Header SavedHeader
	image  []byte
}

// Layout is the saved memory's layout.
func (s *Saved) Layout() Layout {
	return Layout{Params: s.Header.Params, ObsSize: s.Header.ObsSize, Capacity: s.Header.Capacity}
}

// Save writes the memory's contents, owned by owner, to path atomically.
// Call it while no process writes the memory (both halves of the agent
// have stopped): the copy is taken byte for byte.
func (m *Memory) Save(path string, owner Owner) error {
	if m.closed.Load() {
		return ErrClosed
	}
	h := SavedHeader{Owner: owner, Params: m.layout.Params, ObsSize: m.layout.ObsSize, Capacity: m.layout.Capacity,
		First: m.First(), Appended: m.Appended(), Epoch: m.Epoch(), LearnerSteps: m.LearnerSteps(), Size: m.layout.Size()}
	head, err := json.Marshal(h)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	b.Grow(len(savedMagic) + 4 + len(head) + len(m.mem) + savedDigestSize)
	b.WriteString(savedMagic)
	_ = binary.Write(&b, binary.LittleEndian, uint32(len(head)))
	b.Write(head)
	b.Write(m.mem)
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	if err := atomicfile.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("shm: save %s: %w", path, err)
	}
	return nil
}

// LoadSaved reads and verifies the saved buffer at path: every byte under
// its digest, the owner it names against want, its layout against l, and
// its control words against its header. A refusal wraps ErrSaved and
// says what is wrong.
func LoadSaved(path string, want Owner, l Layout) (*Saved, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	refuse := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrSaved, path, fmt.Sprintf(format, a...))
	}
	if len(raw) < len(savedMagic)+4+savedDigestSize || string(raw[:len(savedMagic)]) != savedMagic {
		return nil, refuse("it is not a saved replay buffer of this tolaria (no %q at its start)", savedMagic[:13])
	}
	body, digest := raw[:len(raw)-savedDigestSize], raw[len(raw)-savedDigestSize:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], digest) {
		return nil, refuse("its SHA-256 does not match its contents: the file is damaged")
	}
	n := int(binary.LittleEndian.Uint32(body[len(savedMagic):]))
	rest := body[len(savedMagic)+4:]
	if n > maxSavedHeader || n > len(rest) {
		return nil, refuse("its header size %d is out of range", n)
	}
	var h SavedHeader
	if err := json.Unmarshal(rest[:n], &h); err != nil {
		return nil, refuse("its header cannot be read: %v", err)
	}
	s := &Saved{Header: h, image: rest[n:]}
	switch {
	case h.Agent != want.Agent:
		return nil, refuse("it is agent %d's buffer, not agent %d's", h.Agent, want.Agent)
	case h.Config != want.Config:
		return nil, refuse("it was saved by a run of another configuration (%.12s, this run's is %.12s)", h.Config, want.Config)
	case s.Layout() != l:
		return nil, refuse("it holds %d weights, %d-value observations and %d transitions; this run's agent needs %d, %d and %d",
			h.Params, h.ObsSize, h.Capacity, l.Params, l.ObsSize, l.Capacity)
	case int64(len(s.image)) != l.Size() || h.Size != l.Size():
		return nil, refuse("it holds %d bytes of memory, its layout needs %d", len(s.image), l.Size())
	}
	got, err := readLayout(s.image[:describeLen+4])
	if err != nil || got != l {
		return nil, refuse("its memory's own header does not describe its layout (%v)", err)
	}
	le := binary.LittleEndian
	words := SavedHeader{First: le.Uint64(s.image[offFirst:]), Appended: le.Uint64(s.image[offHead:]),
		Epoch: le.Uint64(s.image[offEpoch:]), LearnerSteps: le.Uint64(s.image[offSteps:])}
	if words.First != h.First || words.Appended != h.Appended || words.Epoch != h.Epoch || words.LearnerSteps != h.LearnerSteps || h.First > h.Appended {
		return nil, refuse("its control words (transitions from %d to %d, epoch %d, learner step %d) disagree with its header (from %d to %d, %d, %d)",
			words.First, words.Appended, words.Epoch, words.LearnerSteps, h.First, h.Appended, h.Epoch, h.LearnerSteps)
	}
	return s, nil
}

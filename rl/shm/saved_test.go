package shm

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// savedMemory is a memory of layout l holding n transitions from first,
// published weights, an epoch and a learner step count.
func savedMemory(t *testing.T, l Layout, first uint64, n int) *Memory {
	t.Helper()
	m, err := CreateShared("tolaria-test-agent0", l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.StartAt(first); err != nil {
		t.Fatal(err)
	}
	for j := range n {
		if err := m.Append(transition(first+uint64(j), l.ObsSize)); err != nil {
			t.Fatal(err)
		}
	}
	w := make([]float32, l.Params)
	fillVersion(w, 3)
	if _, err := m.Publish(w, 77); err != nil {
		t.Fatal(err)
	}
	m.SetEpoch(9)
	m.SetLearnerSteps(77)
	m.Stop()
	return m
}

// TestSavedBufferRoundTrip: a saved buffer comes back as it was, in a new
// anonymous memory, with its stop flag clear.
func TestSavedBufferRoundTrip(t *testing.T) {
	l := Layout{Params: 10, ObsSize: 4, Capacity: 16}
	m := savedMemory(t, l, 5, 20)
	path := filepath.Join(t.TempDir(), "replay.buf")
	owner := Owner{Agent: 1, Config: "abc"}
	if err := m.Save(path, owner); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSaved(path, owner, l)
	if err != nil {
		t.Fatal(err)
	}
	back, err := CreateSharedFrom("tolaria-test-agent1", s)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if back.Appended() != 25 || back.First() != 5 || back.Len() != 16 || back.Epoch() != 9 || back.LearnerSteps() != 77 || back.Stopped() {
		t.Fatalf("restored: appended %d, first %d, len %d, epoch %d, steps %d, stopped %v", back.Appended(), back.First(), back.Len(), back.Epoch(), back.LearnerSteps(), back.Stopped())
	}
	got := Transition{Obs: make([]float32, 4), NextObs: make([]float32, 4)}
	for j := uint64(9); j < 25; j++ {
		if err := back.Read(j, &got); err != nil {
			t.Fatal(err)
		}
		if want := transition(j, 4); got.Obs[3] != want.Obs[3] || got.Reward != want.Reward || got.Action != want.Action {
			t.Fatalf("transition %d: %+v, want %+v", j, got, want)
		}
	}
	w := make([]float32, l.Params)
	if v, step, err := back.ReadWeights(w); err != nil || v != 1 || step != 77 || checkVersion(w, 3) != nil {
		t.Fatalf("weights: version %d, step %d, %v", v, step, err)
	}
}

// TestSavedBufferEveryByteIsVerified: a change of any byte of a saved
// buffer, a stored transition's included, is refused; so is a buffer
// that belongs to another agent or was saved under another configuration
// or layout.
func TestSavedBufferEveryByteIsVerified(t *testing.T) {
	l := Layout{Params: 10, ObsSize: 4, Capacity: 16}
	m := savedMemory(t, l, 0, 20)
	dir := t.TempDir()
	path := filepath.Join(dir, "replay.buf")
	owner := Owner{Agent: 0, Config: "abc"}
	if err := m.Save(path, owner); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Every 97th byte and the last: the magic, the header, the memory's
	// header page, weights, records, and the digest.
	for i := 0; i < len(raw); i += 97 {
		for _, at := range []int{i, len(raw) - 1} {
			bad := append([]byte(nil), raw...)
			bad[at] ^= 0x10
			p := filepath.Join(dir, "bad.buf")
			if err := os.WriteFile(p, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadSaved(p, owner, l); !errors.Is(err, ErrSaved) {
				t.Fatalf("byte %d of %d flipped: %v", at, len(raw), err)
			}
		}
	}
	for _, c := range []struct {
		owner Owner
		l     Layout
		says  string
	}{
		{Owner{Agent: 1, Config: "abc"}, l, "agent 0's buffer, not agent 1's"},
		{Owner{Agent: 0, Config: "abd"}, l, "another configuration"},
		{owner, Layout{Params: 10, ObsSize: 4, Capacity: 32}, "16 transitions"},
	} {
		if _, err := LoadSaved(path, c.owner, c.l); !errors.Is(err, ErrSaved) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v %+v: %v; want a refusal saying %q", c.owner, c.l, err, c.says)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "short.buf"), raw[:100], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSaved(filepath.Join(dir, "short.buf"), owner, l); !errors.Is(err, ErrSaved) {
		t.Errorf("a truncated buffer: %v", err)
	}
}

// TestStartAtNumbersAnEmptyBuffer: a buffer started at transition n
// counts its appends from n, holds only what was appended since, and
// samples nothing older.
func TestStartAtNumbersAnEmptyBuffer(t *testing.T) {
	l := Layout{Params: 4, ObsSize: 2, Capacity: 8}
	m := create(t, l)
	if err := m.StartAt(1000); err != nil {
		t.Fatal(err)
	}
	if m.Appended() != 1000 || m.Len() != 0 {
		t.Fatalf("appended %d, len %d", m.Appended(), m.Len())
	}
	b := NewBatch(l, 2)
	rng := rand.New(rand.NewPCG(5, 6))
	if err := m.Sample(rng, b); !errors.Is(err, ErrNotEnough) {
		t.Fatalf("sampling an empty buffer: %v", err)
	}
	for j := uint64(1000); j < 1003; j++ {
		if err := m.Append(transition(j, l.ObsSize)); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 3 {
		t.Fatalf("len %d after 3 appends", m.Len())
	}
	for range 20 {
		if err := m.Sample(rng, b); err != nil {
			t.Fatal(err)
		}
		for r := range b.Len() {
			if err := checkRow(b, r, l.ObsSize); err != nil || b.Index[r] < 1000 {
				t.Fatalf("row %d: transition %d: %v", r, b.Index[r], err)
			}
		}
	}
	tr := Transition{Obs: make([]float32, 2), NextObs: make([]float32, 2)}
	if err := m.Read(999, &tr); err == nil {
		t.Fatal("read transition 999, before the buffer's first")
	}
	if err := m.StartAt(5); err == nil {
		t.Fatal("started a buffer that holds transitions again")
	}
}

package shm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(hammerChild())
	}
	goleak.VerifyTestMain(m)
}

func create(t *testing.T, l Layout) *Memory {
	t.Helper()
	m, err := Create(filepath.Join(t.TempDir(), "agent0"), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// fillVersion writes the vector published as version v: every value is
// derived from v and its index, so a copy mixing two versions, or one
// whose returned version is not the one it holds, is caught.
func fillVersion(dst []float32, v uint64) {
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(v)*2654435761 ^ uint32(i))
	}
}

// checkVersion reports the first value of w that does not belong to v.
func checkVersion(w []float32, v uint64) error {
	for i, x := range w {
		if want := math.Float32frombits(uint32(v)*2654435761 ^ uint32(i)); math.Float32bits(x) != math.Float32bits(want) {
			return fmt.Errorf("torn copy: version %d, value %d holds %#x, want %#x", v, i, math.Float32bits(x), math.Float32bits(want))
		}
	}
	return nil
}

func TestOpenErrors(t *testing.T) {
	l := Layout{Params: 100, ObsSize: 4, Capacity: 50}
	dir := t.TempDir()
	path := filepath.Join(dir, "agent0")
	if _, err := Open(path, l); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("open missing: %v, want ErrNotExist naming the path", err)
	}
	m, err := Create(path, l)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := Create(path, l); !errors.Is(err, fs.ErrExist) {
		t.Errorf("create over an existing file: %v, want ErrExist", err)
	}
	if tmps, _ := filepath.Glob(path + ".tmp-*"); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	for _, other := range []Layout{{101, 4, 50}, {100, 5, 50}, {100, 4, 51}} {
		if _, err := Open(path, other); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "expected") {
			t.Errorf("open with layout %+v: %v, want ErrMismatch", other, err)
		}
	}
	if _, err := Open(path, Layout{Params: 0, ObsSize: 4, Capacity: 50}); err == nil {
		t.Error("open with an invalid layout accepted")
	}
	good, _ := os.ReadFile(path)
	corrupt := map[string]func([]byte) []byte{
		"magic":     func(b []byte) []byte { b[0] = 'X'; return b },
		"checksum":  func(b []byte) []byte { b[20]++; return b },
		"truncated": func(b []byte) []byte { return b[:len(b)-8] },
		"short":     func(b []byte) []byte { return b[:100] },
		"empty":     func(b []byte) []byte { return nil },
	}
	for name, f := range corrupt {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, f(append([]byte(nil), good...)), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(p, l); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("removing a missing file: %v", err)
	}
}

func TestControlAcrossMappings(t *testing.T) {
	l := Layout{Params: 10, ObsSize: 2, Capacity: 4}
	a := create(t, l)
	b, err := Open(a.Path(), l)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Stopped() || b.Epoch() != 0 || b.LearnerSteps() != 0 || b.Version() != 0 || b.Appended() != 0 {
		t.Fatal("a new memory is not zeroed")
	}
	a.Stop()
	a.SetEpoch(7)
	a.SetLearnerSteps(1234)
	if !b.Stopped() || b.Epoch() != 7 || b.LearnerSteps() != 1234 {
		t.Fatalf("the other mapping sees stop=%v epoch=%d steps=%d", b.Stopped(), b.Epoch(), b.LearnerSteps())
	}
	w := make([]float32, 10)
	if _, _, err := b.ReadWeights(w); !errors.Is(err, ErrNoWeights) {
		t.Fatalf("read before any publish: %v, want ErrNoWeights", err)
	}
	for v := uint64(1); v <= 3; v++ {
		fillVersion(w, v)
		got, err := a.Publish(w, 100*v)
		if err != nil || got != v {
			t.Fatalf("publish %d = %d, %v", v, got, err)
		}
		r := make([]float32, 10)
		ver, step, err := b.ReadWeights(r)
		if err != nil || ver != v || step != 100*v {
			t.Fatalf("read = version %d step %d %v, want %d %d", ver, step, err, v, 100*v)
		}
		if err := checkVersion(r, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Publish(make([]float32, 9), 0); err == nil {
		t.Error("publishing 9 weights into a 10-weight memory accepted")
	}
	if _, _, err := a.ReadWeights(make([]float32, 11)); err == nil {
		t.Error("reading into 11 values accepted")
	}
	b.Close()
	if _, _, err := b.ReadWeights(w); !errors.Is(err, ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
}

// transition j of the replay tests: every field follows from j.
func transition(j uint64, o int) Transition {
	t := Transition{Obs: make([]float32, o), NextObs: make([]float32, o), Action: int(j % 3), Reward: float32(j % 7),
		Terminated: j%5 == 0, Truncated: j%11 == 0}
	for i := range o {
		t.Obs[i] = float32(j) + float32(i)/8
		t.NextObs[i] = -t.Obs[i]
	}
	return t
}

func checkRow(b *Batch, r, o int) error {
	j := b.Index[r]
	want := transition(j, o)
	ok := b.Actions[r] == want.Action && b.Rewards[r] == want.Reward && b.Terminated[r] == want.Terminated
	for i := range o {
		ok = ok && b.Obs[r*o+i] == want.Obs[i] && b.NextObs[r*o+i] == want.NextObs[i]
	}
	if !ok {
		return fmt.Errorf("row %d does not hold transition %d whole: obs %v next %v action %d reward %v terminated %v",
			r, j, b.Obs[r*o:(r+1)*o], b.NextObs[r*o:(r+1)*o], b.Actions[r], b.Rewards[r], b.Terminated[r])
	}
	return nil
}

func TestReplay(t *testing.T) {
	const o = 3
	l := Layout{Params: 1, ObsSize: o, Capacity: 8}
	m := create(t, l)
	rng := rand.New(rand.NewPCG(1, 2))
	b := NewBatch(l, 4)
	for j := range uint64(3) {
		if err := m.Append(transition(j, o)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Sample(rng, b); !errors.Is(err, ErrNotEnough) {
		t.Fatalf("sampling 4 of 3: %v, want ErrNotEnough", err)
	}
	for j := uint64(3); j < 20; j++ {
		if err := m.Append(transition(j, o)); err != nil {
			t.Fatal(err)
		}
	}
	if m.Appended() != 20 || m.Len() != 8 {
		t.Fatalf("appended %d held %d, want 20 and 8", m.Appended(), m.Len())
	}
	seen := map[uint64]bool{}
	for range 200 {
		if err := m.Sample(rng, b); err != nil {
			t.Fatal(err)
		}
		for r := range b.Len() {
			if err := checkRow(b, r, o); err != nil {
				t.Fatal(err)
			}
			if b.Index[r] < 12 {
				t.Fatalf("sampled transition %d, which the ring has overwritten", b.Index[r])
			}
			seen[b.Index[r]] = true
		}
	}
	if len(seen) != 8 {
		t.Errorf("800 draws saw %d of the 8 transitions held", len(seen))
	}
	var tr Transition
	tr.Obs, tr.NextObs = make([]float32, o), make([]float32, o)
	if err := m.Read(11, &tr); err == nil {
		t.Error("read of an overwritten transition accepted")
	}
	if err := m.Read(15, &tr); err != nil || tr.Action != 0 || !tr.Terminated || tr.Truncated || tr.Obs[1] != 15.125 {
		t.Errorf("read 15: %+v %v", tr, err)
	}
	if err := m.Append(Transition{Obs: make([]float32, 2), NextObs: make([]float32, 3)}); err == nil {
		t.Error("appending a short observation accepted")
	}
}

// TestWeightsHammer publishes on one goroutine while readers copy on
// others, as fast as they can: no read may return a torn copy.
func TestWeightsHammer(t *testing.T) {
	l := Layout{Params: 1 << 14, ObsSize: 1, Capacity: 1}
	m := create(t, l)
	readers, reads, versions := hammerReaders(t, m, 300*time.Millisecond, func() {
		w := make([]float32, l.Params)
		for v := uint64(1); ; v++ {
			fillVersion(w, v)
			if _, err := m.Publish(w, v); err != nil {
				t.Error(err)
				return
			}
			if m.Stopped() {
				return
			}
		}
	})
	t.Logf("%d readers made %d reads of %d distinct versions", readers, reads, versions)
	if reads < 100 || versions < 10 {
		t.Fatalf("the hammer did too little: %d reads, %d versions", reads, versions)
	}
}

// hammerReaders runs publish on a goroutine and readers on others for at
// least d and until they have made 200 reads across 20 versions (at most
// 20 s: a loaded machine under the race detector is slow), then sets the
// stop flag, which ends publish.
func hammerReaders(t *testing.T, m *Memory, d time.Duration, publish func()) (readers int, reads int64, versions int) {
	readers = 3
	var wg sync.WaitGroup
	var n atomic.Int64
	var done atomic.Bool
	seen := make([]map[uint64]bool, readers)
	wg.Go(publish)
	for m.Version() == 0 {
		time.Sleep(time.Millisecond)
	}
	for r := range readers {
		seen[r] = map[uint64]bool{}
		wg.Go(func() {
			w := make([]float32, m.Layout().Params)
			for !done.Load() {
				v, step, err := m.ReadWeights(w)
				if err == nil && step != v {
					err = fmt.Errorf("version %d came with step %d", v, step)
				}
				if err == nil {
					err = checkVersion(w, v)
				}
				if err != nil {
					t.Error(err)
					return
				}
				seen[r][v] = true
				n.Add(1)
			}
		})
	}
	start := time.Now()
	for since := time.Duration(0); since < 20*time.Second; since = time.Since(start) {
		if since >= d && n.Load() >= 200 && m.Version() >= 20 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	done.Store(true)
	m.Stop()
	wg.Wait()
	all := map[uint64]bool{}
	for _, s := range seen {
		for v := range s {
			all[v] = true
		}
	}
	return readers, n.Load(), len(all)
}

// TestReplayHammer appends to a small ring, so records are overwritten
// all the time, while samplers draw from it: every row must be one whole
// transition.
func TestReplayHammer(t *testing.T) {
	const o = 16
	l := Layout{Params: 1, ObsSize: o, Capacity: 32}
	m := create(t, l)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for j := uint64(0); ; j++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := m.Append(transition(j, o)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for m.Len() < 32 {
		time.Sleep(time.Millisecond)
	}
	var rows atomic.Int64
	for s := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(s), 9))
			b := NewBatch(l, 16)
			deadline := time.Now().Add(300 * time.Millisecond)
			for time.Now().Before(deadline) {
				if err := m.Sample(rng, b); err != nil {
					t.Error(err)
					return
				}
				for r := range b.Len() {
					if err := checkRow(b, r, o); err != nil {
						t.Error(err)
						return
					}
				}
				rows.Add(int64(b.Len()))
			}
		})
	}
	time.Sleep(350 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d rows sampled while %d transitions were appended", rows.Load(), m.Appended())
	if rows.Load() < 1000 || m.Appended() < 1000 {
		t.Fatalf("the hammer did too little: %d rows, %d appended", rows.Load(), m.Appended())
	}
}

const childEnv = "TOLARIA_SHM_HAMMER_CHILD"

// TestWeightsHammerProcess runs the readers in another process (this
// test binary, re-executed) mapping the same file, while this process
// publishes and appends. The child signals through the epoch word that it
// has mapped the file and how many reads it has made, and reports what it
// read on stdout. It runs over a named file and over an anonymous memory
// (CreateShared), which the child opens through its /proc path.
func TestWeightsHammerProcess(t *testing.T) {
	l := Layout{Params: 1 << 14, ObsSize: 16, Capacity: 32}
	t.Run("file", func(t *testing.T) { hammerProcess(t, create(t, l)) })
	t.Run("anonymous", func(t *testing.T) {
		m, err := CreateShared("tolaria-test-agent0", l)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		hammerProcess(t, m)
	})
}

func hammerProcess(t *testing.T, m *Memory) {
	l := m.Layout()
	w := make([]float32, l.Params)
	fillVersion(w, 1)
	if _, err := m.Publish(w, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+m.Path(), fmt.Sprintf("TOLARIA_SHM_HAMMER_LAYOUT=%d,%d,%d", l.Params, l.ObsSize, l.Capacity))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for m.Epoch() == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	// Publish for at least half a second and until the child has made 100
	// reads (it counts them in the epoch word, from 1), at most 20 s.
	start := time.Now()
	v, j := uint64(1), uint64(0)
	for since := time.Duration(0); since < 20*time.Second; since = time.Since(start) {
		if since > 500*time.Millisecond && m.Epoch() > 100 {
			break
		}
		v++
		fillVersion(w, v)
		if _, err := m.Publish(w, v); err != nil {
			t.Fatal(err)
		}
		for range 8 {
			if err := m.Append(transition(j, l.ObsSize)); err != nil {
				t.Fatal(err)
			}
			j++
		}
	}
	m.Stop()
	err := cmd.Wait()
	t.Logf("published %d versions and %d transitions; child: %s", v, j, strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("child: %v: %s", err, out.String())
	}
	var reads, versions, rows int
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		fmt.Sscanf(sc.Text(), "reads %d versions %d rows %d", &reads, &versions, &rows)
	}
	if reads < 100 || versions < 5 || rows < 500 {
		t.Fatalf("the child did too little: %d reads, %d versions, %d rows", reads, versions, rows)
	}
}

// hammerChild is the reading process of TestWeightsHammerProcess: it
// alternates weight reads and replay samples until the stop flag is set.
func hammerChild() int {
	var l Layout
	fmt.Sscanf(os.Getenv("TOLARIA_SHM_HAMMER_LAYOUT"), "%d,%d,%d", &l.Params, &l.ObsSize, &l.Capacity)
	m, err := Open(os.Getenv(childEnv), l)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer m.Close()
	w := make([]float32, l.Params)
	b := NewBatch(l, 8)
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[uint64]bool{}
	reads, rows := 0, 0
	m.SetEpoch(1)
	for !m.Stopped() {
		v, _, err := m.ReadWeights(w)
		if err == nil {
			err = checkVersion(w, v)
		}
		if err != nil {
			fmt.Println(err)
			return 1
		}
		reads++
		m.SetEpoch(uint64(reads) + 1)
		seen[v] = true
		if m.Len() < b.Len() {
			continue
		}
		if err := m.Sample(rng, b); err != nil {
			fmt.Println(err)
			return 1
		}
		for r := range b.Len() {
			if err := checkRow(b, r, l.ObsSize); err != nil {
				fmt.Println(err)
				return 1
			}
		}
		rows += b.Len()
	}
	fmt.Printf("reads %d versions %d rows %d\n", reads, len(seen), rows)
	return 0
}

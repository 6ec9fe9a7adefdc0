package trainer

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// savedCheckpoint writes a small checkpoint, with totals and training
// accumulators so the header has every field, and returns its path and
// what was saved.
func savedCheckpoint(t *testing.T) (path string, ck Checkpoint, params []float32, state [][]float32) {
	t.Helper()
	dir := t.TempDir()
	ck = Checkpoint{
		Model: "16-32-4 gelu cross-entropy", Optimizer: "adam lr=0.001", BatchSize: 16, Seed: 7,
		Dataset: "synthetic", TrainSize: 250, Shard: "0/1", Ragged: "pad", Epochs: 3, Step: 5,
		Totals: &Totals{Steps: 5, GraphReplays: 3, EagerSteps: 2, Fallbacks: map[string]int{"ragged_batch": 1},
			Captures: 1, CaptureSeconds: 0.25, EpochSeconds: []float64{1.5}, StageCopies: 5},
		TrainStats: []float64{2.5, 40, 80},
	}
	params = []float32{1, -2, 3.5, 0}
	state = [][]float32{{0.5, 0.25, 0, 1}, {9, 8, 7, 6}}
	if err := SaveCheckpoint(dir, ck, params, state); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, CheckpointFile), ck, params, state
}

func TestCheckpointRoundTrip(t *testing.T) {
	path, want, params, state := savedCheckpoint(t)
	got, err := LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.params, params) || !reflect.DeepEqual(got.state, state) {
		t.Fatalf("params %v state %v, saved %v %v", got.params, got.state, params, state)
	}
	got.params, got.state = nil, nil
	want.Params, want.States = len(params), len(state)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("header\n got %+v\nwant %+v", got, want)
	}
}

// TestEveryCheckpointByteIsVerified changes each byte of a checkpoint in
// turn, header and payload alike: every change is refused, and past the
// magic it is the checksum that refuses it.
func TestEveryCheckpointByteIsVerified(t *testing.T) {
	path, _, _, _ := savedCheckpoint(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range orig {
		// Flipping the low bit turns a digit into another digit and a
		// letter into another letter: the header stays readable JSON
		// for most bytes, so only the checksum can notice.
		edited := append([]byte(nil), orig...)
		edited[i] ^= 0x01
		if err := os.WriteFile(path, edited, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCheckpoint(path)
		if !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("byte %d of %d changed (%q to %q): accepted (%v)", i, len(orig), orig[i], edited[i], err)
		}
		if i >= len(checkpointMagic) && !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("byte %d of %d changed: refused for another reason than the checksum: %v", i, len(orig), err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("refusal does not name the file: %v", err)
		}
	}
}

// TestCheckpointOfAnotherFormatIsRefused: a file of format v1, whose
// header had no checksum, is refused with its version named.
func TestCheckpointOfAnotherFormatIsRefused(t *testing.T) {
	path, _, _, _ := savedCheckpoint(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		magic, want string
	}{
		{"TOLARIA-CKPT\x00v1\n", "format v1 is not read by this tolaria (it reads v2); format v1, from an earlier tolaria"},
		{"TOLARIA-CKPT\x00v3\n", "format v3 is not read by this tolaria (it reads v2); start a new run"},
		{"TOLARIA-CKPT\x00vX\n", "format v? is not read"},
		{"NOT-A-CHECKPOINT", "not a tolaria checkpoint"},
	} {
		edited := append([]byte(c.magic), raw[len(checkpointMagic):]...)
		if err := os.WriteFile(path, edited, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCheckpoint(path)
		if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("magic %q: %v, want a refusal saying %q", c.magic, err, c.want)
		}
	}
}

func TestCheckpointStateOfAnotherSizeIsNotSaved(t *testing.T) {
	err := SaveCheckpoint(t.TempDir(), Checkpoint{}, []float32{1, 2}, [][]float32{{1}})
	if err == nil || !strings.Contains(err.Error(), "optimizer state 0 holds 1 values for 2 parameters") {
		t.Fatalf("state shorter than the parameters: %v", err)
	}
}

package jobserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

func sampleShard() Shard {
	return Shard{
		Header: ShardHeader{Split: "test", Shard: 1, Shards: 3, Samples: 8, Classes: 4, CheckpointSHA256: "ab", Step: 9, Count: 2},
		Scores: []trainer.Scored{{Index: 1, Label: 3, Predicted: 0, Loss: 1.25}, {Index: 4, Label: 2, Predicted: 2, Loss: 1e-300}},
	}
}

// TestShardFileRoundTrip: a shard file reads back as written, float64
// losses bit for bit, and any damage to it is refused.
func TestShardFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shard-1.tles")
	want := sampleShard()
	if err := WriteShard(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadShard(path)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read %+v, %v; want %+v", got, err, want)
	}
	raw, _ := os.ReadFile(path)
	for name, bad := range map[string][]byte{
		"a flipped bit":    flip(raw, len(raw)-40),
		"truncated":        raw[:len(raw)-1],
		"another magic":    append([]byte("TOLARIA-CKPT"), raw[12:]...),
		"another version":  append([]byte("TOLARIA-EVAL\x00v9\n"), raw[16:]...),
		"empty":            nil,
		"a header flipped": flip(raw, 30),
	} {
		if _, err := DecodeShard(bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := os.WriteFile(path, raw[:20], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadShard(path); !errors.Is(err, ErrShardFile) || !strings.Contains(err.Error(), path) {
		t.Errorf("a damaged file: %v", err)
	}
}

func flip(raw []byte, i int) []byte {
	out := append([]byte(nil), raw...)
	out[i] ^= 0x10
	return out
}

// TestServeEval: a worker serves an evaluation shard: it verifies the
// checkpoint (its digest is the one the coordinator saw), scores its
// stride of the test set and writes the shard file.
func TestServeEval(t *testing.T) {
	spec := smallSpec()
	spec.RunDir = t.TempDir()
	if _, _, err := Run(context.Background(), local(t), "cpu", spec, Sink{}); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	sha, err := FileSHA256(ck)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "shard-1.tles")
	ej := EvalJob{Spec: spec, Checkpoint: ck, CheckpointSHA256: sha, Split: SplitTest, Shard: 1, Shards: 2, Attempt: 1, Out: out}
	_, res, err := Evaluate(context.Background(), local(t), "cpu", ej)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := ReadShard(out)
	if err != nil {
		t.Fatal(err)
	}
	test := spec.SyntheticSize / 5
	if res.File != out || res.Samples != test/2 || len(sh.Scores) != res.Samples || sh.Header.Samples != test ||
		sh.Header.CheckpointSHA256 != sha || sh.Header.Step == 0 || sh.Header.Shard != 1 || sh.Scores[0].Index != 1 {
		t.Fatalf("result %+v, header %+v", res, sh.Header)
	}
	for name, edit := range map[string]func(*EvalJob){
		"another checkpoint's digest": func(e *EvalJob) { e.CheckpointSHA256 = "00" },
		"no checkpoint":               func(e *EvalJob) { e.Checkpoint = filepath.Join(t.TempDir(), "none") },
		"another split":               func(e *EvalJob) { e.Split = "val" },
		"another model":               func(e *EvalJob) { e.Spec.Hidden = []int{8} },
	} {
		bad := ej
		edit(&bad)
		bad.Out = filepath.Join(t.TempDir(), "shard.tles")
		_, _, err := Evaluate(context.Background(), local(t), "cpu", bad)
		var we *worker.Error
		if !errors.As(err, &we) {
			t.Errorf("%s: %v", name, err)
		}
		if _, serr := os.Stat(bad.Out); serr == nil {
			t.Errorf("%s: a shard file was written", name)
		}
	}
}

func TestParseEvalFault(t *testing.T) {
	f, err := ParseFault("step=2,kill,shard=1,attempt=1,run=r")
	if err != nil || f != (Fault{Step: 2, Kill: true, OnShard: true, Shard: 1, Attempt: 1, Run: "r"}) {
		t.Fatalf("%+v, %v", f, err)
	}
	ej := EvalJob{Shard: 1, Attempt: 1}
	ej.Spec.RunDir = "/x/r"
	if !f.HitsEval(ej, 2) || f.HitsEval(ej, 1) || f.Hits(ej.Spec, 2) {
		t.Error("an evaluation fault fires at its batch of its shard, and never in training")
	}
	for _, other := range []EvalJob{{Shard: 0, Attempt: 1}, {Shard: 1, Attempt: 2}} {
		other.Spec.RunDir = "/x/r"
		if f.HitsEval(other, 2) {
			t.Errorf("fired for %+v", other)
		}
	}
	if tf, _ := ParseFault("step=2,kill"); tf.HitsEval(ej, 2) {
		t.Error("a training fault fired in an evaluation")
	}
	if _, err := ParseFault("step=2,kill,shard=x"); err == nil {
		t.Error("shard=x accepted")
	}
}

package jobserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
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

// TestShardFileTopK: a shard with top-k probabilities is a v2 file that
// reads back as written; one without stays v1; a header whose top_k
// does not fit its version is refused.
func TestShardFileTopK(t *testing.T) {
	want := sampleShard()
	want.Header.TopK = 2
	want.Scores[0].Top = []trainer.ClassProb{{Class: 0, Prob: 0.5}, {Class: 3, Prob: 0.25}}
	want.Scores[1].Top = []trainer.ClassProb{{Class: 2, Prob: 1 - 1e-300}, {Class: 0, Prob: 1e-301}}
	raw, err := EncodeShard(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), "TOLARIA-EVAL\x00v2\n") {
		t.Errorf("magic %q", raw[:16])
	}
	got, err := DecodeShard(raw)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read %+v, %v; want %+v", got, err, want)
	}
	if plain, _ := EncodeShard(sampleShard()); !strings.HasPrefix(string(plain), shardMagic) {
		t.Errorf("without top k: magic %q", plain[:16])
	}
	short := want
	short.Scores = []trainer.Scored{want.Scores[0], {Index: 4}}
	if _, err := EncodeShard(short); err == nil {
		t.Error("a record without its top k was encoded")
	}
	// A v2 body under a v1 magic (and its digest made good) is refused by
	// its header, not misread.
	v1 := append([]byte(shardMagic), raw[16:len(raw)-32]...)
	sum := sha256.Sum256(v1)
	if _, err := DecodeShard(append(v1, sum[:]...)); err == nil || !strings.Contains(err.Error(), "top_k") {
		t.Errorf("v1 with top_k: %v", err)
	}
}

// TestOpenShardStreams: a shard file read record by record gives the
// records ReadShard gives, and a damaged file is refused before any.
func TestOpenShardStreams(t *testing.T) {
	withTop := sampleShard()
	withTop.Header.TopK = 1
	withTop.Scores[0].Top = []trainer.ClassProb{{Class: 0, Prob: 0.5}}
	withTop.Scores[1].Top = []trainer.ClassProb{{Class: 2, Prob: 0.75}}
	for name, want := range map[string]Shard{"v1": sampleShard(), "v2": withTop} {
		path := filepath.Join(t.TempDir(), "shard-1.tles")
		if err := WriteShard(path, want); err != nil {
			t.Fatal(err)
		}
		r, err := OpenShard(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []trainer.Scored
		for {
			sc, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			sc.Top = append([]trainer.ClassProb(nil), sc.Top...)
			if len(sc.Top) == 0 {
				sc.Top = nil
			}
			got = append(got, sc)
		}
		r.Close()
		if !reflect.DeepEqual(Shard{Header: r.Header, Scores: got}, want) {
			t.Errorf("%s: read %+v %+v; want %+v", name, r.Header, got, want)
		}
		raw, _ := os.ReadFile(path)
		for what, bad := range map[string][]byte{"a flipped bit": flip(raw, len(raw)-40), "truncated": raw[:len(raw)-1],
			"a header flipped": flip(raw, 30), "short": raw[:10], "another version": append([]byte("TOLARIA-EVAL\x00v9\n"), raw[16:]...)} {
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			if r, err := OpenShard(path); !errors.Is(err, ErrShardFile) {
				t.Errorf("%s: %s: opened (%v)", name, what, err)
				if r != nil {
					r.Close()
				}
			}
		}
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
	_, res, err := Evaluate(context.Background(), local(t), "cpu", ej, Sink{})
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
	// The shard records the fingerprint of the split it scored, as the
	// coordinator computes it, so that a resumed evaluation can tell it.
	ds, _, _, err := EvalData(spec, SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	if want := SplitFingerprint(ds); sh.Header.Data != want || want == "" {
		t.Errorf("the shard's data fingerprint %q, want %q", sh.Header.Data, want)
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
		_, _, err := Evaluate(context.Background(), local(t), "cpu", bad, Sink{})
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

// evalTextSpec is a token model small enough to check by hand: embedding,
// positional and lm_head over windows of 8 bytes of a small corpus in
// dir, trained for an epoch.
func evalTextSpec(t *testing.T, dir string) job.Spec {
	t.Helper()
	corpus := filepath.Join(dir, "corpus")
	text := strings.Repeat("the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs.\n", 12)
	if err := os.WriteFile(corpus, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s := job.Default()
	s.Device, s.Dataset, s.DataDir, s.Epochs, s.BatchSize, s.LR, s.EnableGraphs = "cpu", "text", corpus, 1, 4, 0.01, true
	s.Input, s.Layers = []int{8}, job.Layers{nn.Embedding(data.TextVocab, 6), nn.Positional(), nn.LMHead()}
	s.RunDir = t.TempDir()
	return s
}

// TestServeEvalText: a token model's shard holds a record per position of
// each of its windows, in window then position order; the records do not
// depend on the number of shards; and each loss is the float64
// cross-entropy of the model computed here from the checkpoint's
// parameters (to float32's precision: the forward pass runs in float32 on
// the device).
func TestServeEvalText(t *testing.T) {
	spec := evalTextSpec(t, t.TempDir())
	if _, _, err := Run(context.Background(), local(t), "cpu", spec, Sink{}); err != nil {
		t.Fatal(err)
	}
	ds, cfg, _, err := EvalData(spec, SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	text := ds.(*data.Text)
	const T = 8
	windows := text.Len()
	ckPath := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	sha, err := FileSHA256(ckPath)
	if err != nil {
		t.Fatal(err)
	}
	byIndex := map[int]trainer.Scored{}
	for _, shards := range []int{1, 3} {
		for s := range shards {
			out := filepath.Join(t.TempDir(), "shard.tles")
			ej := EvalJob{Spec: spec, Checkpoint: ckPath, CheckpointSHA256: sha, Split: SplitTest, Shard: s, Shards: shards, Attempt: 1, Out: out}
			if shards > 1 {
				ej.TopK = 3 // the figures are those without
			}
			_, res, err := Evaluate(context.Background(), local(t), "cpu", ej, Sink{})
			if err != nil {
				t.Fatal(err)
			}
			sh, err := ReadShard(out)
			if err != nil {
				t.Fatal(err)
			}
			mine := (windows - s + shards - 1) / shards
			if h := sh.Header; h.Positions != T || h.Classes != data.TextVocab || h.Samples != windows || res.Samples != mine || len(sh.Scores) != mine*T {
				t.Fatalf("shard %d of %d: header %+v, result %+v; want %d windows of %d positions", s, shards, h, res, mine, T)
			}
			for j, r := range sh.Scores {
				w, p := s+(j/T)*shards, j%T
				if r.Index != trainer.ScoredIndex(w, p, T) || r.Label != int(text.Window(w)[p+1]) {
					t.Fatalf("shard %d of %d: record %d is %+v; want window %d position %d, label %d", s, shards, j, r, w, p, text.Window(w)[p+1])
				}
				if len(r.Top) != ej.TopK || sh.Header.TopK != ej.TopK || ej.TopK > 0 && r.Top[0].Class != r.Predicted {
					t.Fatalf("shard %d of %d: record %d's top %+v (header's top_k %d), predicted %d", s, shards, j, r.Top, sh.Header.TopK, r.Predicted)
				}
				r.Top = nil
				if shards == 1 {
					byIndex[r.Index] = r
				} else if !reflect.DeepEqual(byIndex[r.Index], r) {
					t.Errorf("window %d position %d: %+v in shard %d of %d, %+v alone", w, p, r, s, shards, byIndex[r.Index])
				}
			}
		}
	}
	ck, err := trainer.CheckpointFor(cfg, ckPath)
	if err != nil {
		t.Fatal(err)
	}
	arch, err := cfg.Net.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	ref := bigramReference(arch, ck.Parameters())
	for w := range windows {
		win := text.Window(w)
		for p := range T {
			loss, top := ref(win[p], p, win[p+1])
			r := byIndex[trainer.ScoredIndex(w, p, T)]
			if math.Abs(r.Loss-loss) > 1e-5*max(1, loss) {
				t.Fatalf("window %d position %d: loss %v, the float64 reference %v", w, p, r.Loss, loss)
			}
			if r.Predicted != top.best && top.margin > 1e-4 {
				t.Errorf("window %d position %d: predicted %d, the reference %d by %v", w, p, r.Predicted, top.best, top.margin)
			}
		}
	}
}

// argmax is a reference prediction and how far its logit is above the
// runner-up's.
type argmax struct {
	best   int
	margin float64
}

// bigramReference computes in float64 the model embedding -> positional
// -> lm_head: the logits of id at position p are (E[id] + P[p]) W + b.
// It returns a function giving the cross-entropy of target there and the
// arg-max.
func bigramReference(arch nn.Arch, params []float32) func(id byte, p int, target byte) (float64, argmax) {
	emb, pos, head := arch.Layers[0], arch.Layers[1], arch.Layers[2]
	d, v := emb.Layer.Dim, head.Layer.Out
	return func(id byte, p int, target byte) (float64, argmax) {
		h := make([]float64, d)
		for k := range d {
			h[k] = float64(params[emb.WeightAt+int(id)*d+k]) + float64(params[pos.WeightAt+p*d+k])
		}
		logits := make([]float64, v)
		top := argmax{}
		for c := range v {
			z := float64(params[head.BiasAt+c])
			for k := range d {
				z += h[k] * float64(params[head.WeightAt+k*v+c])
			}
			logits[c] = z
			if z > logits[top.best] {
				top.best = c
			}
		}
		m, second := logits[top.best], math.Inf(-1)
		var sum float64
		for c, z := range logits {
			sum += math.Exp(z - m)
			if c != top.best {
				second = max(second, z)
			}
		}
		top.margin = m - second
		return m + math.Log(sum) - logits[target], top
	}
}

// TestServeEvalRefusesChangedData: a worker whose data files are not those
// the evaluation began with (the corpus appended to between the
// coordinator's load and the worker's) scores nothing, and its error says
// which file changed and how.
func TestServeEvalRefusesChangedData(t *testing.T) {
	spec := evalTextSpec(t, t.TempDir())
	if _, _, err := Run(context.Background(), local(t), "cpu", spec, Sink{}); err != nil {
		t.Fatal(err)
	}
	_, _, files, err := EvalData(spec, SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Path != spec.DataDir || files[0].Size == 0 {
		t.Fatalf("the files an evaluation reads: %+v", files)
	}
	ckPath := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	sha, err := FileSHA256(ckPath)
	if err != nil {
		t.Fatal(err)
	}
	ej := EvalJob{Spec: spec, Checkpoint: ckPath, CheckpointSHA256: sha, Split: SplitTest, Shards: 1, Attempt: 1,
		Out: filepath.Join(t.TempDir(), "shard.tles"), DataFiles: files}
	if _, _, err := Evaluate(context.Background(), local(t), "cpu", ej, Sink{}); err != nil {
		t.Fatalf("the data as it began: %v", err)
	}
	f, err := os.OpenFile(spec.DataDir, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("one more line\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ej.Out = filepath.Join(t.TempDir(), "shard.tles")
	_, _, err = Evaluate(context.Background(), local(t), "cpu", ej, Sink{})
	want := fmt.Sprintf("%s was %d bytes, SHA-256 %s..., and is now %d bytes", spec.DataDir, files[0].Size, files[0].SHA256[:12], files[0].Size+14)
	if err == nil || !strings.Contains(err.Error(), ErrDataChanged.Error()) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a changed corpus: %v; want %q", err, want)
	}
	if _, serr := os.Stat(ej.Out); serr == nil {
		t.Error("a shard file was written from changed data")
	}
}

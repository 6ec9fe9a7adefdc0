package eval

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// scores are n examples' figures: labels and predictions of 3 classes,
// losses of very different sizes, so that the order of a float64 sum shows.
func scores(n int) []trainer.Scored {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]trainer.Scored, n)
	for i := range out {
		out[i] = trainer.Scored{Index: i, Label: rng.IntN(3), Predicted: rng.IntN(3), Loss: rng.ExpFloat64() * float64(int(1)<<rng.IntN(40))}
	}
	return out
}

func header(samples, shards int) jobserver.ShardHeader {
	return jobserver.ShardHeader{Split: "test", Shards: shards, Samples: samples, Classes: 3, CheckpointSHA256: "ab", Step: 7}
}

// strided splits all into shards as the workers do.
func strided(all []trainer.Scored, shards int) []jobserver.Shard {
	out := make([]jobserver.Shard, shards)
	for s := range out {
		out[s].Header = header(len(all), shards)
		out[s].Header.Shard = s
		for i := s; i < len(all); i += shards {
			out[s].Scores = append(out[s].Scores, all[i])
		}
		out[s].Header.Count = len(out[s].Scores)
	}
	return out
}

// TestMergeDoesNotDependOnTheShards: the merged figures of 1..7 shards are
// identical, bit for bit, and correct.
func TestMergeDoesNotDependOnTheShards(t *testing.T) {
	all := scores(101)
	one, err := Merge(header(101, 1), strided(all, 1))
	if err != nil {
		t.Fatal(err)
	}
	var loss float64
	correct, perClass := 0, [3]int{}
	for _, s := range all {
		loss += s.Loss
		if s.Label == s.Predicted {
			correct++
			perClass[s.Label]++
		}
	}
	if one.Loss != loss/101 || one.Correct != correct || one.Accuracy != float64(correct)/101 {
		t.Errorf("merged loss %v, correct %d; want %v, %d", one.Loss, one.Correct, loss/101, correct)
	}
	total := 0
	for c, p := range one.PerClass {
		if p.Correct != perClass[c] || p.Correct != one.Confusion[c][c] {
			t.Errorf("class %d: %+v, confusion %v", c, p, one.Confusion[c])
		}
		total += p.Samples
	}
	if total != 101 {
		t.Errorf("per-class samples add up to %d", total)
	}
	for n := 2; n <= 7; n++ {
		got, err := Merge(header(101, n), strided(all, n))
		if err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
		got.Workers = 1
		if !reflect.DeepEqual(got, one) {
			t.Errorf("%d shards: %+v\nwant %+v", n, got, one)
		}
	}
}

// TestMergeRefuses: every way the shards can fail to cover the examples
// exactly once is refused, naming the indices or the header at fault.
func TestMergeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func([]jobserver.Shard) []jobserver.Shard
		wants []string
	}{
		{"duplicate", func(s []jobserver.Shard) []jobserver.Shard {
			s[1].Scores = append(s[1].Scores, s[0].Scores[2])
			s[1].Header.Count++
			return s
		}, []string{"1 scored twice: 6 (shards 0 and 1)"}},
		{"missing", func(s []jobserver.Shard) []jobserver.Shard {
			s[2].Scores = s[2].Scores[:len(s[2].Scores)-2]
			s[2].Header.Count -= 2
			return s
		}, []string{"2 missing: 5, 8"}},
		{"out of range", func(s []jobserver.Shard) []jobserver.Shard {
			s[0].Scores[1].Index = 10
			return s
		}, []string{"out of range: 10 (shard 0)", "1 missing: 3"}},
		{"negative index", func(s []jobserver.Shard) []jobserver.Shard {
			s[0].Scores[0].Index = -1
			return s
		}, []string{"out of range: -1 (shard 0)", "1 missing: 0"}},
		{"class out of range", func(s []jobserver.Shard) []jobserver.Shard {
			s[1].Scores[0].Predicted = 3
			return s
		}, []string{"1 (shard 1: label", "predicted 3 of 3 classes)"}},
		{"another checkpoint", func(s []jobserver.Shard) []jobserver.Shard {
			s[1].Header.CheckpointSHA256 = "cd"
			return s
		}, []string{"shard 1's header", "CheckpointSHA256:cd"}},
		{"another split", func(s []jobserver.Shard) []jobserver.Shard {
			s[2].Header.Split = "train"
			return s
		}, []string{"shard 2's header"}},
		{"another shard count", func(s []jobserver.Shard) []jobserver.Shard {
			s[0].Header.Shards = 4
			return s
		}, []string{"shard 0's header"}},
		{"shards swapped", func(s []jobserver.Shard) []jobserver.Shard {
			s[0], s[1] = s[1], s[0]
			return s
		}, []string{"shard 0's header"}},
		{"count not the records'", func(s []jobserver.Shard) []jobserver.Shard {
			s[0].Header.Count++
			return s
		}, []string{"shard 0 holds 4 records, its header says 5"}},
		{"a shard short", func(s []jobserver.Shard) []jobserver.Shard { return s[:2] }, []string{"2 shard files for 3 shards"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge(header(10, 3), tc.edit(strided(scores(10), 3)))
			if !errors.Is(err, ErrMerge) {
				t.Fatalf("merged: %v", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

// TestShardsFailedNamesThem: the error of an incomplete evaluation names
// each missing shard and why.
func TestShardsFailedNamesThem(t *testing.T) {
	err := &ShardsFailedError{Missing: []int{1, 4}, Reasons: map[int]string{1: "exit status 7", 4: "hung"}}
	for _, w := range []string{"2 shard(s) failed twice", "shard 1: exit status 7", "shard 4: hung", "eval.json was not replaced"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
}

func TestEvalRequestValidate(t *testing.T) {
	for _, r := range []Request{{Workers: 1}, {RunDir: "r"}, {RunDir: "r", Workers: -2}, {RunDir: "r", Workers: 1, Split: "val"}, {RunDir: "r", Workers: 1, HeartbeatTimeout: time.Millisecond}} {
		if err := r.Validate(); !errors.Is(err, refusal.ErrConfig) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	if err := (Request{RunDir: "r", Workers: 2, Split: "train"}).Validate(); err != nil {
		t.Error(err)
	}
}

// tokenScores are the records of windows windows of positions targets
// each, over a 256-byte vocabulary: about a third predicted right, losses
// of very different sizes so that the order of a float64 sum shows.
func tokenScores(windows, positions int) []trainer.Scored {
	rng := rand.New(rand.NewPCG(3, 4))
	out := make([]trainer.Scored, 0, windows*positions)
	for w := range windows {
		for p := range positions {
			label, pred := rng.IntN(256), rng.IntN(256)
			if rng.IntN(3) == 0 {
				pred = label
			}
			out = append(out, trainer.Scored{Index: trainer.ScoredIndex(w, p, positions), Label: label, Predicted: pred,
				Loss: rng.ExpFloat64() * float64(int(1)<<rng.IntN(40))})
		}
	}
	return out
}

func tokenHeader(windows, positions, shards int) jobserver.ShardHeader {
	return jobserver.ShardHeader{Split: "test", Shards: shards, Samples: windows, Classes: 256, Positions: positions, CheckpointSHA256: "ab", Step: 7}
}

// tokenStrided splits a token model's records into shards as the workers
// do: shard s scores windows s, s+shards, ..., each window's positions in
// order.
func tokenStrided(all []trainer.Scored, windows, positions, shards int) []jobserver.Shard {
	out := make([]jobserver.Shard, shards)
	for s := range out {
		out[s].Header = tokenHeader(windows, positions, shards)
		out[s].Header.Shard = s
		for w := s; w < windows; w += shards {
			out[s].Scores = append(out[s].Scores, all[w*positions:(w+1)*positions]...)
		}
		out[s].Header.Count = len(out[s].Scores)
	}
	return out
}

// TestMergeTokenShards: a token model's merged figures are the same, bit
// for bit, for 1..5 shards; the loss and accuracy are per token, summed in
// window then position order in float64; the accuracy and loss per
// position are vectors of the context's length, the accuracies in [0, 1];
// and there are no per-class figures.
func TestMergeTokenShards(t *testing.T) {
	const windows, positions = 23, 6
	all := tokenScores(windows, positions)
	one, err := Merge(tokenHeader(windows, positions, 1), tokenStrided(all, windows, positions, 1))
	if err != nil {
		t.Fatal(err)
	}
	var loss float64
	correct := 0
	posLoss, posCorrect := make([]float64, positions), make([]int, positions)
	for i, s := range all {
		loss += s.Loss
		posLoss[i%positions] += s.Loss
		if s.Label == s.Predicted {
			correct++
			posCorrect[i%positions]++
		}
	}
	tokens := float64(windows * positions)
	seq := one.Sequence
	if seq == nil || one.PerClass != nil || one.Confusion != nil {
		t.Fatalf("a token model's report: %+v", one)
	}
	if one.Samples != windows || seq.Positions != positions || seq.Tokens != windows*positions || one.Correct != correct ||
		one.Loss != loss/tokens || one.Accuracy != float64(correct)/tokens || seq.BitsPerByte != one.Loss/math.Ln2 {
		t.Errorf("merged %+v %+v; want loss %v, %d correct of %v tokens", one, seq, loss/tokens, correct, tokens)
	}
	if len(seq.PositionAccuracy) != positions || len(seq.PositionLoss) != positions {
		t.Fatalf("per-position figures of length %d and %d; want %d", len(seq.PositionAccuracy), len(seq.PositionLoss), positions)
	}
	for p := range positions {
		if a := seq.PositionAccuracy[p]; a < 0 || a > 1 || a != float64(posCorrect[p])/windows || seq.PositionLoss[p] != posLoss[p]/windows {
			t.Errorf("position %d: accuracy %v, loss %v; want %v, %v", p, a, seq.PositionLoss[p], float64(posCorrect[p])/windows, posLoss[p]/windows)
		}
	}
	for n := 2; n <= 5; n++ {
		got, err := Merge(tokenHeader(windows, positions, n), tokenStrided(all, windows, positions, n))
		if err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
		got.Workers = 1
		if !reflect.DeepEqual(got, one) {
			t.Errorf("%d shards: %+v %+v\nwant %+v %+v", n, got, got.Sequence, one, one.Sequence)
		}
	}
	raw, err := json.Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"per_class"`, `"confusion"`} {
		if strings.Contains(string(raw), key) {
			t.Errorf("a token model's eval.json holds %s: %s", key, raw)
		}
	}
	if !strings.Contains(string(raw), `"position_accuracy":[`) {
		t.Errorf("eval.json lacks the accuracy per position: %s", raw)
	}
}

// TestMergeTokenShardsRefuses: a position missing, a window scored twice
// or shards of another context are refused, naming window.position.
func TestMergeTokenShardsRefuses(t *testing.T) {
	const windows, positions = 10, 4
	for _, tc := range []struct {
		name  string
		edit  func([]jobserver.Shard) []jobserver.Shard
		wants []string
	}{
		{"a position missing", func(s []jobserver.Shard) []jobserver.Shard {
			s[1].Scores = s[1].Scores[:len(s[1].Scores)-1]
			s[1].Header.Count--
			return s
		}, []string{"every position of every window", "1 missing: 7.3"}},
		{"a window twice", func(s []jobserver.Shard) []jobserver.Shard {
			s[2].Scores = append(s[2].Scores, s[0].Scores[:positions]...)
			s[2].Header.Count += positions
			return s
		}, []string{"4 scored twice: 0.0 (shards 0 and 2), 0.1"}},
		{"past the last window", func(s []jobserver.Shard) []jobserver.Shard {
			s[0].Scores[0].Index = windows * positions
			return s
		}, []string{"out of range: 10.0 (shard 0)", "1 missing: 0.0"}},
		{"another context", func(s []jobserver.Shard) []jobserver.Shard {
			s[1].Header.Positions = 8
			return s
		}, []string{"shard 1's header", "Positions:8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge(tokenHeader(windows, positions, 3), tc.edit(tokenStrided(tokenScores(windows, positions), windows, positions, 3)))
			if !errors.Is(err, ErrMerge) {
				t.Fatalf("merged: %v", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

// TestMergePartialOverEveryPattern: for 1..5 shards and every pattern of
// failed shards, the partial figures are those of the examples scored,
// summed in index order, marked incomplete; with every shard scored they
// are Merge's, bit for bit.
func TestMergePartialOverEveryPattern(t *testing.T) {
	all := scores(53)
	for n := 1; n <= 5; n++ {
		shards := strided(all, n)
		whole, err := Merge(header(len(all), n), shards)
		if err != nil {
			t.Fatal(err)
		}
		for pattern := range 1 << n {
			scored := make([]bool, n)
			var kept []trainer.Scored
			for _, r := range all {
				if scored[r.Index%n] = pattern&(1<<(r.Index%n)) == 0; scored[r.Index%n] {
					kept = append(kept, r)
				}
			}
			got, err := MergePartial(header(len(all), n), shards, scored)
			if err != nil {
				t.Fatalf("%d shards, pattern %b: %v", n, pattern, err)
			}
			if pattern == 0 {
				got.SplitSamples = 0
				if !reflect.DeepEqual(got, whole) || !got.Complete {
					t.Errorf("%d shards, none failed:\n%+v\nwant Merge's\n%+v", n, got, whole)
				}
				continue
			}
			var loss float64
			correct := 0
			for _, r := range kept {
				loss += r.Loss
				if r.Label == r.Predicted {
					correct++
				}
			}
			want := ratio(loss, len(kept))
			if got.Complete || got.Samples != len(kept) || got.SplitSamples != len(all) || got.Correct != correct ||
				math.Float64bits(got.Loss) != math.Float64bits(want) {
				t.Errorf("%d shards, failed %b: complete %v, samples %d/%d, correct %d, loss %v; want %d/%d, %d, %v",
					n, pattern, got.Complete, got.Samples, got.SplitSamples, got.Correct, got.Loss, len(kept), len(all), correct, want)
			}
			if _, err := json.Marshal(got); err != nil {
				t.Errorf("%d shards, failed %b: %v", n, pattern, err)
			}
		}
	}
}

// TestMergePartialRefusesAHoleInAShardScored: a shard counted as scored
// must hold all its examples.
func TestMergePartialRefusesAHoleInAShardScored(t *testing.T) {
	shards := strided(scores(20), 3)
	shards[1].Scores = shards[1].Scores[1:]
	shards[1].Header.Count--
	if _, err := MergePartial(header(20, 3), shards, []bool{false, true, true}); !errors.Is(err, ErrMerge) || !strings.Contains(err.Error(), "missing: 1") {
		t.Errorf("got %v", err)
	}
	if _, err := MergePartial(header(20, 3), shards, []bool{true, false, true}); err != nil {
		t.Errorf("the damaged shard counted as failed: %v", err)
	}
}

// TestMergePartialOfATokenModel: a token model's partial figures are over
// the windows scored.
func TestMergePartialOfATokenModel(t *testing.T) {
	const windows, positions = 11, 4
	all := tokenScores(windows, positions)
	shards := tokenStrided(all, windows, positions, 3)
	got, err := MergePartial(tokenHeader(windows, positions, 3), shards, []bool{true, false, true})
	if err != nil {
		t.Fatal(err)
	}
	scored := 0
	for w := range windows {
		if w%3 != 1 {
			scored++
		}
	}
	if got.Complete || got.Samples != scored || got.Sequence.Tokens != scored*positions || got.SplitSamples != windows {
		t.Errorf("partial token figures %+v, %+v", got, got.Sequence)
	}
}

// planned is an evaluation planned by hand over shard files in dir: n
// shards of 20 examples of 3 classes.
func planned(dir string, n int) *Run {
	return &Run{req: Request{RunDir: dir, Workers: n, Split: "test"}, samples: 20, classes: 3, sha: "ab", step: 7, data: "xxh64:0"}
}

// TestResumeKeepsOnlyVerifiedShards: a resumed evaluation keeps a shard
// file only when it is whole and of this evaluation: the same checkpoint,
// data, split and number of shards, every example of its shard once.
func TestResumeKeepsOnlyVerifiedShards(t *testing.T) {
	dir := t.TempDir()
	e := planned(dir, 5)
	if err := os.MkdirAll(filepath.Join(dir, Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	shards := strided(scores(20), 5)
	for s := range shards {
		shards[s].Header.Data = e.data
	}
	write := func(s int, sh jobserver.Shard) {
		t.Helper()
		if err := jobserver.WriteShard(ShardFile(dir, s), sh); err != nil {
			t.Fatal(err)
		}
	}
	write(0, shards[0]) // kept
	other := shards[1]
	other.Header.Data = "xxh64:1" // scored on other data
	write(1, other)
	short := shards[2]
	short.Scores = short.Scores[:len(short.Scores)-1] // not whole
	write(2, short)
	old := shards[3]
	old.Header.Data = "" // written before shard files recorded the data
	write(3, old)
	// shard 4 has no file
	e.findKept()
	if got := e.Kept(); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("kept %v, want [0]", got)
	}
	if r := e.Rescored(); len(r) != 3 || r[1] == nil || r[2] == nil || r[3] == nil {
		t.Errorf("rescored %v, want shards 1, 2 and 3 with reasons", r)
	}
	other4 := planned(dir, 4)
	other4.findKept()
	if len(other4.Kept()) != 0 {
		t.Errorf("another number of shards kept %v", other4.Kept())
	}
}

// TestPublishKeepsThePreviousResult: a complete result replaces eval.json,
// the old one kept byte for byte as eval.prev.json, and a stale partial
// result goes; a partial one leaves eval.json as it was.
func TestPublishKeepsThePreviousResult(t *testing.T) {
	dir := t.TempDir()
	e := planned(dir, 3)
	old := []byte("{\"old\": true}\n")
	path := filepath.Join(dir, JSONFile)
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	shards := strided(scores(20), 3)
	for s := range shards {
		shards[s].Header.Data = e.data
	}
	// The merge reads the shards scored from their files.
	if err := os.MkdirAll(filepath.Join(dir, Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range []int{0, 2} {
		if err := jobserver.WriteShard(ShardFile(dir, s), shards[s]); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := e.partial([]bool{true, false, true}, map[int]string{1: "exit status 7"}, time.Now())
	var fe *ShardsFailedError
	if !errors.As(err, &fe) || fe.Partial != filepath.Join(dir, PartialJSONFile) || rep.Complete {
		t.Fatalf("partial: %v, %+v", err, rep)
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != string(old) {
		t.Errorf("eval.json after a partial result: %q, %v", raw, err)
	}
	var got Report
	raw, err := os.ReadFile(fe.Partial)
	if err != nil || json.Unmarshal(raw, &got) != nil || got.Complete ||
		!reflect.DeepEqual(got.Missing, []MissingShard{{Shard: 1, First: 1, Stride: 3, Count: 7, Reason: "exit status 7", Log: e.shardLog(1)}}) {
		t.Errorf("eval.partial.json: %s", raw)
	}
	full, err := Merge(e.expect(), shards)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.publish(full); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(filepath.Join(dir, PrevJSONFile)); err != nil || string(raw) != string(old) {
		t.Errorf("eval.prev.json: %q, %v", raw, err)
	}
	if _, err := os.Stat(fe.Partial); !os.IsNotExist(err) {
		t.Errorf("a complete result left eval.partial.json: %v", err)
	}
	if raw, err := os.ReadFile(path); err != nil || json.Unmarshal(raw, &got) != nil || !got.Complete {
		t.Errorf("eval.json: %s, %v", raw, err)
	}
}

// TestMergeFilesStreamsAsMergeMerges: the merge of an evaluation's shard
// files, read record by record, is Merge's (MergePartial's) of the same
// shards in memory, bit for bit, for 1..4 shards, a token model, and with
// a shard missing; and the predictions file it streams is
// WritePredictions's, byte for byte.
func TestMergeFilesStreamsAsMergeMerges(t *testing.T) {
	for _, token := range []bool{false, true} {
		for n := 1; n <= 4; n++ {
			dir := t.TempDir()
			e := planned(dir, n)
			var shards []jobserver.Shard
			if token {
				e.samples, e.classes, e.positions = 7, 256, 5
				shards = tokenStrided(tokenScores(7, 5), 7, 5, n)
			} else {
				shards = strided(scores(20), n)
			}
			if err := os.MkdirAll(filepath.Join(dir, Dir), 0o755); err != nil {
				t.Fatal(err)
			}
			for s := range shards {
				shards[s].Header.Data = e.data
				if err := jobserver.WriteShard(ShardFile(dir, s), shards[s]); err != nil {
					t.Fatal(err)
				}
			}
			want, err := Merge(e.expect(), shards)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.mergeFiles(nil)
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("token %v, %d shards: streamed %+v, %v; in memory %+v", token, n, got, err, want)
			}
			if n > 1 {
				scored := make([]bool, n)
				for s := range scored {
					scored[s] = s != 1
				}
				want, err := MergePartial(e.expect(), shards, scored)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := e.mergeFiles(scored); err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("token %v, %d shards, partial: streamed %+v, %v; in memory %+v", token, n, got, err, want)
				}
			}
			e.req.Predictions = true
			if _, _, err := e.publishPredictions(); err != nil {
				t.Fatal(err)
			}
			ref := filepath.Join(t.TempDir(), PredictionsFile)
			if err := WritePredictions(ref, e.expect(), shards); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(filepath.Join(dir, PredictionsFile))
			b, _ := os.ReadFile(ref)
			if len(a) == 0 || string(a) != string(b) {
				t.Errorf("token %v, %d shards: the streamed predictions file differs (%d bytes, %d)", token, n, len(a), len(b))
			}
		}
	}
}

// TestMergeFilesRefusesAShardOutOfOrder: a shard file whose records are
// not in its examples' order is refused, naming the shard.
func TestMergeFilesRefusesAShardOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	e := planned(dir, 2)
	shards := strided(scores(20), 2)
	shards[1].Scores[0], shards[1].Scores[1] = shards[1].Scores[1], shards[1].Scores[0]
	if err := os.MkdirAll(filepath.Join(dir, Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	for s := range shards {
		shards[s].Header.Data = e.data
		if err := jobserver.WriteShard(ShardFile(dir, s), shards[s]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.mergeFiles(nil); !errors.Is(err, ErrMerge) || !strings.Contains(err.Error(), "shard 1") {
		t.Errorf("err %v", err)
	}
}

// The shards spread over the GPUs named: by default every shard at once,
// ceil(workers/GPUs) per GPU; --per-device and --parallel bound them, the
// others waiting for a slot; without GPUs every shard's worker keeps the
// GPUs of its environment.
func TestEvalPlacement(t *testing.T) {
	kind := launch.Local()
	for _, c := range []struct {
		req  Request
		want []string
	}{
		{Request{Workers: 4, Device: "cuda", GPUs: []int{0, 1}}, []string{"cuda:0", "cuda:1", "cuda:0", "cuda:1"}},
		{Request{Workers: 3, Device: "cuda", GPUs: []int{2, 0, 1}}, []string{"cuda:2", "cuda:0", "cuda:1"}},
		{Request{Workers: 5, Device: "cuda", GPUs: []int{0, 1}}, []string{"cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"}},
		{Request{Workers: 4, Device: "cuda", GPUs: []int{0, 1}, PerDevice: 1}, []string{"cuda:0", "cuda:1"}},
		{Request{Workers: 4, Device: "cuda", GPUs: []int{3}, Parallel: 2}, []string{"cuda:3", "cuda:3"}},
		{Request{Workers: 3, Device: "cpu"}, []string{"cpu", "cpu", "cpu"}},
		{Request{Workers: 3, Device: "cpu", Parallel: 1}, []string{"cpu"}},
		{Request{Workers: 2, Device: "cuda"}, []string{"cuda", "cuda"}},
	} {
		cfg := c.req.launchConfig(kind, "w", nil)
		if cfg.GPUsFromEnv != (len(c.req.GPUs) == 0) {
			t.Errorf("%+v: GPUs from the environment %v", c.req, cfg.GPUsFromEnv)
		}
		slots, err := launch.LayOut(cfg.Device, cfg.GPUs, cfg.PerDevice, cfg.Parallel)
		if err != nil {
			t.Errorf("%+v: %v", c.req, err)
			continue
		}
		var got []string
		for _, s := range slots {
			got = append(got, s.String())
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: slots %v, want %v", c.req, got, c.want)
		}
	}
	for _, bad := range []Request{
		{RunDir: "r", Workers: 2, Device: "cpu", GPUs: []int{0}},
		{RunDir: "r", Workers: 2, PerDevice: -1},
		{RunDir: "r", Workers: 2, Parallel: -1},
	} {
		if err := bad.Validate(); !errors.Is(err, refusal.ErrConfig) {
			t.Errorf("%+v: %v, want a refusal", bad, err)
		}
	}
}

// A shard file of another evaluation is scored again with the reason in
// words: another --workers (and which to give), split, checkpoint, data or
// top k.
func TestExplainHeader(t *testing.T) {
	e := &Run{req: Request{Workers: 2, Split: "test"}, samples: 10, classes: 3, sha: "abcdef0123456789", step: 7, data: "xxh64:1", topK: 0}
	want := e.expect()
	for _, c := range []struct {
		edit func(*jobserver.ShardHeader)
		says string
	}{
		{func(h *jobserver.ShardHeader) { h.Shards = 3 }, "written by an evaluation of 3 shards, not 2: give workers 3 to keep it"},
		{func(h *jobserver.ShardHeader) { h.Split = "train" }, "of the train split, not test"},
		{func(h *jobserver.ShardHeader) { h.CheckpointSHA256, h.Step = "ffff00001111", 9 }, "scored with another checkpoint (SHA-256 ffff00001111..., step 9)"},
		{func(h *jobserver.ShardHeader) { h.Data = "xxh64:2" }, "scored on other data"},
		{func(h *jobserver.ShardHeader) { h.TopK = 5 }, "holds the top 5 classes, this evaluation 0: give the same top_k"},
	} {
		h := want
		c.edit(&h)
		if err := e.explainHeader(h); !errors.Is(err, ErrMerge) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want %q", h, err, c.says)
		}
	}
	if err := e.explainHeader(want); err != nil {
		t.Errorf("this evaluation's own header: %v", err)
	}
}

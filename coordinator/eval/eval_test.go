package eval

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

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
	for _, w := range []string{"2 shard(s) failed twice", "shard 1: exit status 7", "shard 4: hung", "no eval.json"} {
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

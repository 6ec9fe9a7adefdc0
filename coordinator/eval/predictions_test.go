package eval

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// readRows reads a whole Parquet file of rows T and its row groups' sizes.
func readRows[T any](t *testing.T, path string) ([]T, []int64, map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var groups []int64
	for _, rg := range pf.RowGroups() {
		groups = append(groups, rg.NumRows())
	}
	meta := map[string]string{}
	for _, kv := range pf.Metadata().KeyValueMetadata {
		meta[kv.Key] = kv.Value
	}
	r := parquet.NewGenericReader[T](f)
	defer r.Close()
	rows := make([]T, r.NumRows())
	n, err := r.Read(rows)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return rows[:n], groups, meta
}

// TestWritePredictionsInIndexOrder: for any number of shards the file
// holds one row per example in index order, with the shard records'
// figures exactly, in row groups of PredictionsRowGroup rows; its loss
// column sums, in row order, to the merged loss.
func TestWritePredictionsInIndexOrder(t *testing.T) {
	n := PredictionsRowGroup + 123 // two row groups
	all := scores(n)
	for _, shards := range []int{1, 3} {
		path := filepath.Join(t.TempDir(), PredictionsFile)
		sh := strided(all, shards)
		if err := WritePredictions(path, header(n, shards), sh); err != nil {
			t.Fatal(err)
		}
		rows, groups, meta := readRows[ExamplePrediction](t, path)
		if len(rows) != n {
			t.Fatalf("%d shards: %d rows, want %d", shards, len(rows), n)
		}
		if len(groups) != 2 || groups[0] != PredictionsRowGroup {
			t.Errorf("%d shards: row groups %v, want %d then the rest", shards, groups, PredictionsRowGroup)
		}
		var loss float64
		for i, r := range rows {
			want := ExamplePrediction{Index: int64(i), Label: int32(all[i].Label), Predicted: int32(all[i].Predicted), Loss: all[i].Loss}
			if r != want {
				t.Fatalf("%d shards: row %d is %+v, want %+v", shards, i, r, want)
			}
			loss += r.Loss
		}
		rep, err := Merge(header(n, shards), sh)
		if err != nil {
			t.Fatal(err)
		}
		if got := loss / float64(n); got != rep.Loss {
			t.Errorf("%d shards: the loss column's mean %v, eval's %v", shards, got, rep.Loss)
		}
		if meta["tolaria.checkpoint_sha256"] != "ab" || meta["tolaria.step"] != "7" || meta["tolaria.split"] != "test" {
			t.Errorf("metadata %v", meta)
		}
		if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(left) > 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}
}

// TestWritePredictionsOfATokenModel: a row per position of every window,
// window by window.
func TestWritePredictionsOfATokenModel(t *testing.T) {
	const windows, positions, shards = 7, 5, 3
	all := tokenScores(windows, positions)
	path := filepath.Join(t.TempDir(), PredictionsFile)
	if err := WritePredictions(path, tokenHeader(windows, positions, shards), tokenStrided(all, windows, positions, shards)); err != nil {
		t.Fatal(err)
	}
	rows, _, meta := readRows[TokenPrediction](t, path)
	if len(rows) != windows*positions {
		t.Fatalf("%d rows, want %d", len(rows), windows*positions)
	}
	for i, r := range rows {
		w, p := i/positions, i%positions
		s := all[trainer.ScoredIndex(w, p, positions)]
		want := TokenPrediction{Window: int64(w), Position: int32(p), Label: int32(s.Label), Predicted: int32(s.Predicted), Loss: s.Loss}
		if r != want {
			t.Fatalf("row %d is %+v, want %+v", i, r, want)
		}
	}
	if meta["tolaria.positions"] != "5" {
		t.Errorf("metadata %v", meta)
	}
}

// TestWritePredictionsRefusesAMisorderedShard: a shard whose records are
// not its examples in order writes no file, and leaves the old one.
func TestWritePredictionsRefusesAMisorderedShard(t *testing.T) {
	all := scores(10)
	sh := strided(all, 2)
	sh[1].Scores[0], sh[1].Scores[1] = sh[1].Scores[1], sh[1].Scores[0]
	path := filepath.Join(t.TempDir(), PredictionsFile)
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WritePredictions(path, header(10, 2), sh); !errors.Is(err, ErrMerge) {
		t.Fatalf("err %v, want ErrMerge", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("the old file became %q", b)
	}
}

// withTop gives each record k (class, probability) pairs, and every
// shard's header top_k k.
func withTop(shards []jobserver.Shard, k int) {
	for s := range shards {
		shards[s].Header.TopK = k
		for i := range shards[s].Scores {
			r := &shards[s].Scores[i]
			r.Top = make([]trainer.ClassProb, k)
			for j := range k {
				r.Top[j] = trainer.ClassProb{Class: (r.Predicted + j) % shards[s].Header.Classes, Prob: 1 / float64(r.Index+j+2)}
			}
		}
	}
}

// TestWritePredictionsTopK: with top_k the rows carry the records' top k
// as the list columns top_class and top_prob, in each record's order.
func TestWritePredictionsTopK(t *testing.T) {
	const k = 2
	check := func(t *testing.T, i int, class []int32, prob []float64, want trainer.Scored) {
		t.Helper()
		if len(class) != k || len(prob) != k {
			t.Fatalf("row %d: top_class %v, top_prob %v", i, class, prob)
		}
		for j, c := range want.Top {
			if class[j] != int32(c.Class) || prob[j] != c.Prob {
				t.Fatalf("row %d: top_class %v, top_prob %v, want %+v", i, class, prob, want.Top)
			}
		}
	}
	t.Run("examples", func(t *testing.T) {
		const n = PredictionsRowGroup + 50 // the lists of two row groups
		sh := strided(scores(n), 3)
		withTop(sh, k)
		want := header(n, 3)
		want.TopK = k
		path := filepath.Join(t.TempDir(), PredictionsFile)
		if err := WritePredictions(path, want, sh); err != nil {
			t.Fatal(err)
		}
		rows, _, meta := readRows[ExampleTopPrediction](t, path)
		if len(rows) != n || meta["tolaria.top_k"] != "2" {
			t.Fatalf("%d rows, metadata %v", len(rows), meta)
		}
		for i, r := range rows {
			rec := sh[i%3].Scores[i/3]
			if r.Index != int64(i) || r.Predicted != int32(rec.Predicted) || r.Loss != rec.Loss {
				t.Fatalf("row %d is %+v, want %+v", i, r, rec)
			}
			check(t, i, r.TopClass, r.TopProb, rec)
		}
	})
	t.Run("tokens", func(t *testing.T) {
		const windows, positions, shards = 7, 5, 3
		all := tokenScores(windows, positions)
		sh := tokenStrided(all, windows, positions, shards)
		withTop(sh, k)
		want := tokenHeader(windows, positions, shards)
		want.TopK = k
		path := filepath.Join(t.TempDir(), PredictionsFile)
		if err := WritePredictions(path, want, sh); err != nil {
			t.Fatal(err)
		}
		rows, _, _ := readRows[TokenTopPrediction](t, path)
		if len(rows) != windows*positions {
			t.Fatalf("%d rows", len(rows))
		}
		for i, r := range rows {
			w := i / positions
			rec := sh[w%shards].Scores[w/shards*positions+i%positions]
			if r.Window != int64(w) || r.Position != int32(i%positions) || r.Label != int32(rec.Label) {
				t.Fatalf("row %d is %+v, want %+v", i, r, rec)
			}
			check(t, i, r.TopClass, r.TopProb, rec)
		}
	})
}

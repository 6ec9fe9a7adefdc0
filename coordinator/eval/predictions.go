package eval

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/parquet-go/parquet-go"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// PredictionsFile is the per-example output of a complete evaluation run
// with Request.Predictions, in the run directory: Parquet, one row per
// label in index order (ExamplePrediction, or TokenPrediction for a token
// model), in row groups of PredictionsRowGroup rows.
const PredictionsFile = "predictions.parquet"

// PredictionsRowGroup is the rows of one row group of PredictionsFile:
// the merge holds one such chunk at a time while it writes.
const PredictionsRowGroup = 1 << 16

// ExamplePrediction is a row of PredictionsFile for a model of one class
// per example.
type ExamplePrediction struct {
	Index     int64   `parquet:"index"`     // the example's index in the split
	Label     int32   `parquet:"label"`     // its class
	Predicted int32   `parquet:"predicted"` // the first maximum of its logits
	Loss      float64 `parquet:"loss"`      // as eval.json's loss sums it
}

// TokenPrediction is a row of PredictionsFile for a token model: one
// position of one window, position p predicting the window's byte p+1
// from bytes 0..p.
type TokenPrediction struct {
	Window    int64   `parquet:"window"`    // the window's index in the split
	Position  int32   `parquet:"position"`  // 0 .. positions-1
	Label     int32   `parquet:"label"`     // the byte at position+1
	Predicted int32   `parquet:"predicted"` // the byte predicted
	Loss      float64 `parquet:"loss"`
}

// ExampleTopPrediction is ExamplePrediction with the top k: the k most
// probable classes, most probable first (of equal probabilities the lower
// class first), and their probabilities (the softmax of the logits, in
// float64), as two list columns of k values each.
type ExampleTopPrediction struct {
	Index     int64     `parquet:"index"`
	Label     int32     `parquet:"label"`
	Predicted int32     `parquet:"predicted"`
	Loss      float64   `parquet:"loss"`
	TopClass  []int32   `parquet:"top_class,list"` // top_class[0] is predicted
	TopProb   []float64 `parquet:"top_prob,list"`  // non-increasing, summing to at most 1
}

// TokenTopPrediction is TokenPrediction with the top k, as
// ExampleTopPrediction's.
type TokenTopPrediction struct {
	Window    int64     `parquet:"window"`
	Position  int32     `parquet:"position"`
	Label     int32     `parquet:"label"`
	Predicted int32     `parquet:"predicted"`
	Loss      float64   `parquet:"loss"`
	TopClass  []int32   `parquet:"top_class,list"`
	TopProb   []float64 `parquet:"top_prob,list"`
}

// WritePredictions replaces path with the shards' records as Parquet, in
// index order, atomically (a temporary file, synced, renamed). The shards
// must be those Merge accepted for want: each is read in place, record by
// record, so the writer holds one row group beyond them. (An evaluation
// streams its shard files instead: see Run.) The file's
// key-value metadata names the evaluation (tolaria.* keys), so a file can
// be matched with its eval.json.
func WritePredictions(path string, want jobserver.ShardHeader, shards []jobserver.Shard) error {
	if len(shards) != want.Shards || want.Shards < 1 {
		return fmt.Errorf("%w: %d shard files for %d shards", ErrMerge, len(shards), want.Shards)
	}
	per := max(1, want.Positions)
	return writePredictions(path, want, func(i int) (trainer.Scored, error) {
		ex := i / per
		s, k := ex%want.Shards, ex/want.Shards*per+i%per
		if k >= len(shards[s].Scores) || shards[s].Scores[k].Index != i {
			return trainer.Scored{}, fmt.Errorf("%w: shard %d holds no record %d for label %d", ErrMerge, s, k, i)
		}
		return shards[s].Scores[k], nil
	})
}

// writePredictions is WritePredictions of the records at gives, called
// for every label in index order.
func writePredictions(path string, want jobserver.ShardHeader, at func(i int) (trainer.Scored, error)) error {
	meta := []parquet.WriterOption{
		parquet.Compression(&parquet.Snappy),
		parquet.MaxRowsPerRowGroup(PredictionsRowGroup),
		parquet.KeyValueMetadata("tolaria.split", want.Split),
		parquet.KeyValueMetadata("tolaria.checkpoint_sha256", want.CheckpointSHA256),
		parquet.KeyValueMetadata("tolaria.step", strconv.Itoa(want.Step)),
		parquet.KeyValueMetadata("tolaria.samples", strconv.Itoa(want.Samples)),
		parquet.KeyValueMetadata("tolaria.positions", strconv.Itoa(want.Positions)),
		parquet.KeyValueMetadata("tolaria.data", want.Data),
		parquet.KeyValueMetadata("tolaria.top_k", strconv.Itoa(want.TopK)),
	}
	return atomicfile.Write(path, 0o644, func(w io.Writer) error {
		switch {
		case want.Positions > 0 && want.TopK > 0:
			return writeRows(w, meta, want, at, func(i int, r recordView) TokenTopPrediction {
				class, prob := r.top()
				return TokenTopPrediction{Window: int64(i / want.Positions), Position: int32(i % want.Positions),
					Label: int32(r.label), Predicted: int32(r.pred), Loss: r.loss, TopClass: class, TopProb: prob}
			})
		case want.TopK > 0:
			return writeRows(w, meta, want, at, func(i int, r recordView) ExampleTopPrediction {
				class, prob := r.top()
				return ExampleTopPrediction{Index: int64(i), Label: int32(r.label), Predicted: int32(r.pred), Loss: r.loss, TopClass: class, TopProb: prob}
			})
		case want.Positions > 0:
			return writeRows(w, meta, want, at, func(i int, r recordView) TokenPrediction {
				return TokenPrediction{Window: int64(i / want.Positions), Position: int32(i % want.Positions),
					Label: int32(r.label), Predicted: int32(r.pred), Loss: r.loss}
			})
		}
		return writeRows(w, meta, want, at, func(i int, r recordView) ExamplePrediction {
			return ExamplePrediction{Index: int64(i), Label: int32(r.label), Predicted: int32(r.pred), Loss: r.loss}
		})
	})
}

type recordView struct {
	label, pred int
	loss        float64
	topK        []trainer.ClassProb
	// class and prob are the row's top-k columns to fill, of top_k values
	// each: parts of one array per row group, which the writer copies.
	class []int32
	prob  []float64
}

// top is the record's top k as the two list columns.
func (r recordView) top() ([]int32, []float64) {
	for j, c := range r.topK {
		r.class[j], r.prob[j] = int32(c.Class), c.Prob
	}
	return r.class, r.prob
}

// writeRows writes every label's row in index order, a row group at a
// time. Label i is in shard (i/T)%N (T the positions, 1 for a model of a
// class per example), its record ((i/T)/N)*T + i%T there.
func writeRows[T any](w io.Writer, opts []parquet.WriterOption, want jobserver.ShardHeader, at func(i int) (trainer.Scored, error), row func(int, recordView) T) error {
	pw := parquet.NewGenericWriter[T](w, opts...)
	per := max(1, want.Positions)
	labels := want.Samples * per
	chunk := make([]T, 0, min(labels, PredictionsRowGroup))
	// The top-k lists of a row group's rows, reused from one to the next
	// (the writer copies the rows it is given).
	k := want.TopK
	classes, probs := make([]int32, cap(chunk)*k), make([]float64, cap(chunk)*k)
	flush := func() error {
		if _, err := pw.Write(chunk); err != nil {
			return err
		}
		chunk = chunk[:0]
		return pw.Flush()
	}
	for i := range labels {
		r, err := at(i)
		if err != nil {
			return err
		}
		j := len(chunk)
		chunk = append(chunk, row(i, recordView{label: r.Label, pred: r.Predicted, loss: r.Loss, topK: r.Top,
			class: classes[j*k : (j+1)*k : (j+1)*k], prob: probs[j*k : (j+1)*k : (j+1)*k]}))
		if len(chunk) == cap(chunk) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(chunk) > 0 {
		if err := flush(); err != nil {
			return err
		}
	}
	return pw.Close()
}

// publishPredictions writes, with Request.Predictions, the complete
// evaluation's predictions file just before eval.json is replaced;
// without it, it returns the stale file of the result being replaced, to
// be removed once eval.json is.
func (e *Run) publishPredictions() (written, stale string, err error) {
	path := filepath.Join(e.req.RunDir, PredictionsFile)
	if !e.req.Predictions {
		if _, err := os.Stat(path); err == nil {
			return "", path, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", "", err
		}
		return "", "", nil
	}
	at, closeAll, err := e.streamShards(nil)
	if err != nil {
		return "", "", err
	}
	defer closeAll()
	if err := writePredictions(path, e.expect(), at); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", PredictionsFile, err)
	}
	return path, "", nil
}

package trainer_test

import (
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// batchRecorder keeps the training examples of every batch, by sequence
// number.
type batchRecorder struct {
	mu      sync.Mutex
	batches map[int][]int
}

func (b *batchRecorder) Observe(m trainer.Measurement) {
	tb, ok := m.(trainer.TrainBatch)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.batches[tb.Seq]; dup {
		panic("batch filled twice")
	}
	b.batches[tb.Seq] = tb.Indices
}

// TestRanksTrainOnDisjointStridesOfTheData trains both ranks of a world
// of two: in every epoch each rank sees each of its examples once, the
// ranks' examples are disjoint and together they are the training set.
func TestRanksTrainOnDisjointStridesOfTheData(t *testing.T) {
	cfg := smallConfig(t)
	cfg.World, cfg.ObserveBatches = 2, true
	steps, err := trainer.StepsPerEpoch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Optimizer.TotalSteps = cfg.Epochs * steps
	n := cfg.Train.Len()
	// seen[epoch][example] is the rank that trained on it, -1 for none.
	seen := make([][]int, cfg.Epochs)
	for e := range seen {
		seen[e] = make([]int, n)
		for i := range seen[e] {
			seen[e][i] = -1
		}
	}
	var params []string
	for rank := range cfg.World {
		cfg.Rank = rank
		rec := &batchRecorder{batches: map[int][]int{}}
		cfg.Observer = rec
		sum := run(t, cfg)
		params = append(params, sum.ParamsSHA256)
		if len(rec.batches) != cfg.Epochs*steps || sum.Steps != cfg.Epochs*steps {
			t.Fatalf("rank %d: %d batches filled and %d steps trained, want %d", rank, len(rec.batches), sum.Steps, cfg.Epochs*steps)
		}
		for seq, indices := range rec.batches {
			epoch := seq / steps
			for _, i := range indices {
				if prev := seen[epoch][i]; prev >= 0 {
					t.Fatalf("epoch %d: example %d trained by rank %d and again by rank %d", epoch+1, i, prev, rank)
				}
				seen[epoch][i] = rank
			}
		}
	}
	for e := range seen {
		count := make([]int, cfg.World)
		for i, rank := range seen[e] {
			if rank < 0 {
				t.Fatalf("epoch %d: example %d was trained by no rank", e+1, i)
			}
			count[rank]++
		}
		for rank, c := range count {
			if want := (n - rank + cfg.World - 1) / cfg.World; c != want {
				t.Fatalf("epoch %d: rank %d trained %d examples, its stride holds %d", e+1, rank, c, want)
			}
		}
	}
	if params[0] == params[1] {
		t.Fatal("both ranks ended with the same parameters")
	}
}

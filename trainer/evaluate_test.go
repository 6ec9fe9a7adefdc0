package trainer_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestEvaluateAgreesWithTraining: every example of the test set is scored
// once across the shards, in each shard's stride order; the correct count
// is the training summary's exactly, the mean loss its to float32's
// precision (the trainer accumulates batch sums in a float32 on the
// device), and a shard's figures do not depend on the number of shards.
func TestEvaluateAgreesWithTraining(t *testing.T) {
	for name, cfg := range map[string]trainer.Config{"mlp": smallConfig(t), "cnn": cnnConfig(t)} {
		t.Run(name, func(t *testing.T) { evaluateAgreesWithTraining(t, cfg) })
	}
}

// evaluateAgreesWithTraining checks one model; a CNN's evaluation uses
// the checkpoint's running statistics.
func evaluateAgreesWithTraining(t *testing.T, cfg trainer.Config) {
	cfg.RunDir = t.TempDir()
	sum := run(t, cfg)
	ck, err := trainer.CheckpointFor(cfg, filepath.Join(cfg.RunDir, trainer.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Test.Len()
	byIndex := map[int]trainer.Scored{}
	for _, shards := range []int{1, 3} {
		seen := make([]int, n)
		var loss float64
		correct := 0
		for s := range shards {
			got, err := trainer.Evaluate(context.Background(), openCPU(t), newShared(t), trainer.EvalConfig{
				Spec: cfg.Spec, Net: cfg.Net, BatchSize: cfg.BatchSize, Data: cfg.Test.(*data.Dataset), Params: ck.Parameters(), Running: ck.RunningState(),
				Shard: s, Shards: shards})
			if err != nil {
				t.Fatal(err)
			}
			for j, r := range got {
				if r.Index != s+j*shards {
					t.Fatalf("%d shards: shard %d's record %d is example %d", shards, s, j, r.Index)
				}
				seen[r.Index]++
				if r.Label != int(cfg.Test.(*data.Dataset).Y[r.Index]) {
					t.Fatalf("example %d: label %d, want %d", r.Index, r.Label, cfg.Test.(*data.Dataset).Y[r.Index])
				}
				if r.Label == r.Predicted {
					correct++
				}
				if shards == 1 {
					byIndex[r.Index] = r
				} else if !reflect.DeepEqual(byIndex[r.Index], r) {
					t.Errorf("example %d: %+v in shard %d of %d, %+v alone", r.Index, r, s, shards, byIndex[r.Index])
				}
			}
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("%d shards: example %d scored %d times", shards, i, c)
			}
		}
		for i := range n {
			loss += byIndex[i].Loss
		}
		if acc := float64(correct) / float64(n); acc != sum.TestAccuracy {
			t.Errorf("%d shards: accuracy %v, training summary %v", shards, acc, sum.TestAccuracy)
		}
		if mean := loss / float64(n); math.Abs(mean-sum.TestLoss) > 1e-6*mean {
			t.Errorf("%d shards: loss %v, training summary %v", shards, mean, sum.TestLoss)
		}
	}
}

// TestEvaluateTopK: each row's top k are its most probable classes, most
// probable first, the first the predicted class; over every class they sum
// to 1, and the label's probability is exp(-loss); the other figures are
// those of an evaluation without top k.
func TestEvaluateTopK(t *testing.T) {
	cfg := cnnConfig(t)
	cfg.RunDir = t.TempDir()
	run(t, cfg)
	ck, err := trainer.CheckpointFor(cfg, filepath.Join(cfg.RunDir, trainer.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	ec := trainer.EvalConfig{Spec: cfg.Spec, Net: cfg.Net, BatchSize: cfg.BatchSize, Data: cfg.Test.(*data.Dataset), Params: ck.Parameters(),
		Running: ck.RunningState(), Shards: 2}
	plain, err := trainer.Evaluate(context.Background(), openCPU(t), newShared(t), ec)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 3, cfg.Spec.Outputs} {
		ec.TopK = k
		got, err := trainer.Evaluate(context.Background(), openCPU(t), newShared(t), ec)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if len(r.Top) != k || r.Top[0].Class != r.Predicted {
				t.Fatalf("k %d: row %d's top %+v, predicted %d", k, i, r.Top, r.Predicted)
			}
			var sum float64
			for j, c := range r.Top {
				sum += c.Prob
				if j > 0 && (c.Prob > r.Top[j-1].Prob || c.Prob == r.Top[j-1].Prob && c.Class < r.Top[j-1].Class) {
					t.Fatalf("k %d: row %d's top out of order: %+v", k, i, r.Top)
				}
				if c.Class == r.Label && math.Abs(c.Prob-math.Exp(-r.Loss)) > 1e-12 {
					t.Errorf("k %d: row %d: label's probability %v, exp(-loss) %v", k, i, c.Prob, math.Exp(-r.Loss))
				}
			}
			if sum > 1+1e-12 || k == cfg.Spec.Outputs && math.Abs(sum-1) > 1e-12 {
				t.Errorf("k %d: row %d's top %d sum to %v", k, i, k, sum)
			}
			r.Top = nil
			if !reflect.DeepEqual(r, plain[i]) {
				t.Fatalf("k %d: row %d is %+v, %+v without top k", k, i, r, plain[i])
			}
		}
	}
}

func TestEvaluateRefuses(t *testing.T) {
	cfg := smallConfig(t)
	good := trainer.EvalConfig{Spec: cfg.Spec, BatchSize: 8, Data: cfg.Test.(*data.Dataset), Params: make([]float32, cfg.Spec.ParamCount()), Shards: 1}
	for name, edit := range map[string]func(*trainer.EvalConfig){
		"no data":           func(c *trainer.EvalConfig) { c.Data = nil },
		"shard past shards": func(c *trainer.EvalConfig) { c.Shard, c.Shards = 2, 2 },
		"more shards than examples": func(c *trainer.EvalConfig) {
			c.Shards = cfg.Test.Len() + 1
		},
		"parameters of another model": func(c *trainer.EvalConfig) { c.Params = c.Params[1:] },
		"model not of the data":       func(c *trainer.EvalConfig) { c.Spec = nn.Spec{Inputs: 3, Outputs: 4, Loss: nn.LossCrossEntropy} },
		"top k past the classes":      func(c *trainer.EvalConfig) { c.TopK = cfg.Spec.Outputs + 1 },
		"negative top k":              func(c *trainer.EvalConfig) { c.TopK = -1 },
		"top k of an MSE model": func(c *trainer.EvalConfig) {
			c.Spec.Loss, c.TopK = nn.LossMSE, 1
		},
		"a net without its running state": func(c *trainer.EvalConfig) {
			cnn := cnnConfig(t)
			a, _ := cnn.Net.Resolve()
			c.Spec, c.Net, c.Params = cnn.Spec, cnn.Net, make([]float32, a.Params)
		},
	} {
		c := good
		edit(&c)
		if _, err := trainer.Evaluate(context.Background(), openCPU(t), newShared(t), c); err == nil {
			t.Errorf("%s: evaluated", name)
		}
	}
	if _, err := trainer.Evaluate(context.Background(), openCPU(t), nil, good); !errors.Is(err, trainer.ErrNoShared) {
		t.Errorf("without the shared state: %v", err)
	}
}

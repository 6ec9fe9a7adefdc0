package trainer_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/trainer"
)

// stages records every Config.Advance call, in order.
type stages []string

func (s *stages) advance(stage string) { *s = append(*s, stage) }

func (s stages) count(stage string) int {
	n := 0
	for _, x := range s {
		if x == stage {
			n++
		}
	}
	return n
}

// TestAdvanceFollowsTheWork: a run reports its work moving at every step,
// evaluation batch, capture and checkpoint, so that no stretch between two
// reports is longer than one of them (a worker's heartbeats carry the
// count; a wedged run is found by it standing still).
func TestAdvanceFollowsTheWork(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir = t.TempDir()
	var got stages
	cfg.Advance = got.advance
	sum := run(t, cfg)
	evalBatches := sum.EvalReplays + sum.EvalEagerBatches
	for stage, want := range map[string]int{
		trainer.StageSetup:      1,
		trainer.StageTrainStep:  sum.Steps,
		trainer.StageEvalBatch:  evalBatches,
		trainer.StageCheckpoint: cfg.Epochs,
		trainer.StageCapture:    2, // before and after the one capture
	} {
		if n := got.count(stage); n != want {
			t.Errorf("%d advances of %q, want %d", n, stage, want)
		}
	}
	if len(got) == 0 || got[0] != trainer.StageSetup || got[len(got)-1] != trainer.StageCheckpoint {
		t.Errorf("advances begin with %q and end with %q; want setup first and the last checkpoint last", first(got), last(got))
	}
	// Each epoch's evaluation and checkpoint come after its steps.
	if i := strings.Index(strings.Join(got, ","), trainer.StageEvalBatch); i < 0 ||
		!strings.Contains(strings.Join(got, ",")[:i], trainer.StageTrainStep) {
		t.Errorf("evaluation batches before any step: %v", got)
	}
}

// TestEvaluateAdvancesPerBatch: an evaluation shard reports its work once
// set up and after every batch.
func TestEvaluateAdvancesPerBatch(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir = t.TempDir()
	run(t, cfg)
	ck, err := trainer.CheckpointFor(cfg, filepath.Join(cfg.RunDir, trainer.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var got stages
	scores, err := trainer.Evaluate(context.Background(), openCPU(t), newShared(t), trainer.EvalConfig{
		Spec: cfg.Spec, BatchSize: cfg.BatchSize, Data: cfg.Test.(*data.Dataset), Params: ck.Parameters(), Shard: 0, Shards: 1, Advance: got.advance})
	if err != nil {
		t.Fatal(err)
	}
	batches := (len(scores) + cfg.BatchSize - 1) / cfg.BatchSize
	if got.count(trainer.StageSetup) != 1 || got.count(trainer.StageEvalBatch) != batches || len(got) != batches+1 {
		t.Errorf("advances %v; want setup, then one per batch (%d)", got, batches)
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

package trainer_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestPlanRefusesACheckpointOfAnotherShape: a checkpoint whose digest
// holds (recomputed by whoever made it) but whose parameter or optimizer
// state count is not this run's model's is refused when the run is
// planned, as one of another model is, so a command refuses it before it
// writes anything; it used to pass the plan and fail only when the model
// was restored, after the run had recorded its start.
func TestPlanRefusesACheckpointOfAnotherShape(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir = t.TempDir()
	steps, _ := trainer.StepsPerEpoch(cfg)
	cfg.MaxSteps = steps
	run(t, cfg)
	path := filepath.Join(cfg.RunDir, trainer.CheckpointFile)
	good, err := trainer.LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	params, state := good.Parameters(), good.State()
	if len(state) == 0 {
		t.Fatal("the optimizer keeps no state: nothing to take away")
	}
	for name, c := range map[string]struct {
		params []float32
		state  [][]float32
		want   string
	}{
		"one parameter fewer": {params[:len(params)-1], trimmed(state, 1), "parameters"},
		"one parameter more":  {append(append([]float32{}, params...), 0), padded(state), "parameters"},
		"no optimizer state":  {params, nil, "optimizer state"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			h := good
			if err := trainer.SaveCheckpoint(dir, h, c.params, c.state); err != nil {
				t.Fatal(err)
			}
			if _, err := trainer.LoadCheckpoint(filepath.Join(dir, trainer.CheckpointFile)); err != nil {
				t.Fatalf("the crafted checkpoint does not load, so it tests nothing: %v", err)
			}
			resume := cfg
			resume.RunDir, resume.Resume, resume.MaxSteps = dir, true, 0
			_, err := trainer.NewPlan(resume)
			if !errors.Is(err, trainer.ErrCheckpoint) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("planned a resume from it: %v; want a checkpoint refusal naming the %s", err, c.want)
			}
		})
	}
}

func trimmed(state [][]float32, n int) [][]float32 {
	out := make([][]float32, len(state))
	for i, s := range state {
		out[i] = s[:len(s)-n]
	}
	return out
}

func padded(state [][]float32) [][]float32 {
	out := make([][]float32, len(state))
	for i, s := range state {
		out[i] = append(append([]float32{}, s...), 0)
	}
	return out
}

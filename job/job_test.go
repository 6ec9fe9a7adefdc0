package job

import (
	"math"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
)

func TestDefaultIsValidAndIsTheDocumentedModel(t *testing.T) {
	s := Default()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Model(784, 10) != "784-256-128-10" || s.Optimizer != "adamw" || s.BatchSize != 64 || s.Dataset != "fashion-mnist" {
		t.Fatalf("defaults changed: %+v", s)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		field string
		edit  func(*Spec)
	}{
		{"device", func(s *Spec) { s.Device = "tpu" }},
		{"epochs", func(s *Spec) { s.Epochs = 0 }},
		{"batch_size", func(s *Spec) { s.BatchSize = 0 }},
		{"lr", func(s *Spec) { s.LR = -1 }},
		{"optimizer", func(s *Spec) { s.Optimizer = "lion" }},
		{"dataset", func(s *Spec) { s.Dataset = "mnist" }},
		{"model.hidden", func(s *Spec) { s.Hidden = []int{10, 0} }},
		{"model.activation", func(s *Spec) { s.Activation = "swish" }},
		{"model.loss", func(s *Spec) { s.Loss = "hinge" }},
		{"ragged", func(s *Spec) { s.Ragged = "trim" }},
		{"staging_slots", func(s *Spec) { s.Slots = 1 }},
		{"rank", func(s *Spec) { s.Rank, s.World = 2, 2 }},
		{"resume", func(s *Spec) { s.Resume, s.RunDir = true, "" }},
		{"momentum", func(s *Spec) { s.Momentum = 1 }},
		{"weight_decay", func(s *Spec) { s.WeightDecay = 2 }},
		{"momentum", func(s *Spec) { s.Momentum = math.NaN() }},
		{"weight_decay", func(s *Spec) { s.WeightDecay = math.NaN() }},
		{"clip_norm", func(s *Spec) { s.ClipNorm = math.NaN() }},
		{"lr", func(s *Spec) { s.LR = math.NaN() }},
		{"slow_stage_copy_ms", func(s *Spec) { s.SlowStageCopyMS = math.NaN() }},
	} {
		s := Default()
		c.edit(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.field) || !field.Is(err, field.Name(c.field)) {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
}

func TestConfigSetsTheSchedule(t *testing.T) {
	s := Default()
	s.Dataset, s.SyntheticSize, s.Epochs, s.BatchSize, s.WarmupSteps = "synthetic", 1000, 3, 100, 10000
	train, test, err := s.LoadData()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.Config(train, test, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Optimizer.TotalSteps != 30 || cfg.Optimizer.WarmupSteps != 15 {
		t.Fatalf("total %d warm-up %d; want 30 and a warm-up capped at half the run", cfg.Optimizer.TotalSteps, cfg.Optimizer.WarmupSteps)
	}
	if cfg.Spec.Inputs != train.Features || cfg.Spec.Outputs != train.Classes {
		t.Fatalf("model %+v does not fit the data", cfg.Spec)
	}
}

// TestConfigCarriesTheShard: the trainer gets the spec's rank and world,
// and the schedule counts the steps of that rank's stride.
func TestConfigCarriesTheShard(t *testing.T) {
	s := Default()
	s.Dataset, s.SyntheticSize, s.Epochs, s.BatchSize, s.Rank, s.World = "synthetic", 1000, 3, 100, 1, 2
	train, test, err := s.LoadData()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.Config(train, test, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rank != 1 || cfg.World != 2 {
		t.Fatalf("trainer config has rank %d of world %d, the spec 1 of 2", cfg.Rank, cfg.World)
	}
	// 1000 training examples, 500 in rank 1's stride: 5 batches of 100.
	if cfg.Optimizer.TotalSteps != 3*5 {
		t.Fatalf("total steps %d for rank 1 of 2 over %d examples, want 3 epochs of 5", cfg.Optimizer.TotalSteps, train.Len())
	}
}

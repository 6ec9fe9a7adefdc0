package job

import (
	"math"
	"os"
	"path/filepath"
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
		{"dataset", func(s *Spec) { s.Dataset = "text" }},
		{"data_dir", func(s *Spec) { s.Dataset, s.DataDir = "text", "" }},
		{"context", func(s *Spec) { s.Context = -1 }},
		{"context", func(s *Spec) { s.Dataset, s.Context = "text", 1<<16+1 }},
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

// TestTextNeedsASequenceModel: dataset text is refused, by Validate and by
// LoadData, with a message that says which models train on what, until a
// model trains on sequences.
func TestTextNeedsASequenceModel(t *testing.T) {
	s := Default()
	s.Dataset, s.DataDir, s.Context = "text", t.TempDir(), 64
	err := s.Validate()
	if !field.Is(err, "dataset") {
		t.Fatalf("Validate: got %v; want a refusal of dataset", err)
	}
	for _, want := range []string{"byte sequences", "no model", "model.hidden", "model.layers", "fashion-mnist or synthetic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %q does not say %q", err, want)
		}
	}
	flags := field.Render(err, func(n field.Name) string { return "--" + strings.TrimPrefix(string(n), "model.") })
	if !strings.Contains(flags, "--dataset: text") || !strings.Contains(flags, "--hidden") {
		t.Errorf("a command cannot respell the keys: %q", flags)
	}
	if _, _, err := s.LoadData(); !field.Is(err, "dataset") {
		t.Errorf("LoadData: got %v; want the same refusal, not another dataset", err)
	}
}

func TestSpecLoadText(t *testing.T) {
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(corpus, []byte(strings.Repeat("the quick brown fox ", 10)), 0o644); err != nil {
		t.Fatal(err)
	}
	s := Default()
	s.Dataset, s.DataDir, s.Context = "text", corpus, 8
	train, valid, err := s.LoadText()
	if err != nil {
		t.Fatal(err)
	}
	// 200 bytes: 180 to train, 20 to validate, in windows of 9 every 8 bytes.
	if len(train.Bytes) != 180 || len(valid.Bytes) != 20 || train.Context != 8 || train.Len() != 22 || valid.Len() != 2 {
		t.Errorf("train %d bytes %d windows, valid %d bytes %d windows, context %d",
			len(train.Bytes), train.Len(), len(valid.Bytes), valid.Len(), train.Context)
	}
	s.Context = 0
	if c := s.TextConfig(); c.Path != corpus || c.Context != 0 {
		t.Errorf("TextConfig %+v", c)
	}
	if _, _, err := Default().LoadText(); !field.Is(err, "dataset") {
		t.Errorf("LoadText of fashion-mnist: got %v", err)
	}
}

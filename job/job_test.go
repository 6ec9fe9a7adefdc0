package job

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
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
		{"schedule.epochs", func(s *Spec) { s.Epochs = 0 }},
		{"schedule.batch_size", func(s *Spec) { s.BatchSize = 0 }},
		{"optimizer.lr", func(s *Spec) { s.LR = -1 }},
		{"optimizer.kind", func(s *Spec) { s.Optimizer = "lion" }},
		{"data.dataset", func(s *Spec) { s.Dataset = "mnist" }},
		{"model.layers", func(s *Spec) { s.Dataset = "text" }},
		{"model.layers", func(s *Spec) { s.Dataset, s.Layers = "text", Layers{nn.Linear(10)} }},
		{"data.dataset", func(s *Spec) { s.Layers = Layers{nn.Embedding(256, 8), nn.LMHead()} }},
		{"data.context", func(s *Spec) {
			s.Dataset, s.Context, s.Input, s.Layers = "text", 32, []int{64}, Layers{nn.Embedding(256, 8), nn.LMHead()}
		}},
		{"data.dir", func(s *Spec) { s.Dataset, s.DataDir = "text", "" }},
		{"data.context", func(s *Spec) { s.Context = -1 }},
		{"data.context", func(s *Spec) { s.Dataset, s.Context = "text", 1<<16+1 }},
		{"model.hidden", func(s *Spec) { s.Hidden = []int{10, 0} }},
		{"model.activation", func(s *Spec) { s.Activation = "swish" }},
		{"model.loss", func(s *Spec) { s.Loss = "hinge" }},
		{"data.ragged", func(s *Spec) { s.Ragged = "trim" }},
		{"staging.slots", func(s *Spec) { s.Slots = 1 }},
		{"data.rank", func(s *Spec) { s.Rank, s.World = 2, 2 }},
		{"resume", func(s *Spec) { s.Resume, s.RunDir = true, "" }},
		{"optimizer.momentum", func(s *Spec) { s.Momentum = 1 }},
		{"optimizer.weight_decay", func(s *Spec) { s.WeightDecay = 2 }},
		{"optimizer.momentum", func(s *Spec) { s.Momentum = math.NaN() }},
		{"optimizer.weight_decay", func(s *Spec) { s.WeightDecay = math.NaN() }},
		{"optimizer.clip_norm", func(s *Spec) { s.ClipNorm = math.NaN() }},
		{"optimizer.lr", func(s *Spec) { s.LR = math.NaN() }},
		{"staging.slow_copy_ms", func(s *Spec) { s.SlowStageCopyMS = math.NaN() }},
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
	if d := train.Shape(); cfg.Spec.Inputs != d.Inputs || cfg.Spec.Outputs != d.Classes {
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

// TestTextNeedsATokenModel: dataset text and a model that reads token
// ids go together, and a refusal says which key to change and how.
func TestTextNeedsATokenModel(t *testing.T) {
	for _, c := range []struct {
		name, key string
		edit      func(*Spec)
		says      []string
	}{
		{"the MLP on text", "model.layers", func(s *Spec) { s.Dataset = "text" },
			[]string{"required for dataset text", "embedding", "model.hidden"}},
		{"a vector model on text", "model.layers", func(s *Spec) { s.Dataset, s.Layers = "text", Layers{nn.Linear(256)} }, []string{"starts with linear"}},
		{"a token model on fashion-mnist", "data.dataset", func(s *Spec) { s.Layers = Layers{nn.Embedding(256, 8), nn.LMHead()} },
			[]string{"fashion-mnist serves feature vectors", "model.layers starts with embedding", "dataset text"}},
		{"a token model on synthetic", "data.dataset", func(s *Spec) { s.Dataset, s.Layers = "synthetic", Layers{nn.Embedding(256, 8), nn.LMHead()} }, nil},
		{"context against model.input", "data.context", func(s *Spec) {
			s.Dataset, s.Context, s.Input, s.Layers = "text", 32, []int{64}, Layers{nn.Embedding(256, 8), nn.LMHead()}
		}, []string{"is 32", "model.input is [64]"}},
	} {
		s := Default()
		c.edit(&s)
		err := s.Validate()
		if !field.Is(err, field.Name(c.key)) {
			t.Errorf("%s: got %v; want a refusal of %s", c.name, err, c.key)
			continue
		}
		for _, want := range c.says {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", c.name, err, want)
			}
		}
	}
	s := Default()
	s.Dataset = "text"
	flags := field.Render(s.Validate(), func(n field.Name) string { return "--" + strings.TrimPrefix(string(n), "model.") })
	if !strings.HasPrefix(flags, "--layers: ") || !strings.Contains(flags, "--hidden") {
		t.Errorf("a command cannot respell the keys: %q", flags)
	}
}

// A token model plans on a text corpus when its input T, context and
// vocabulary agree; where they do not, the key to change is named.
func TestPlanTokenModel(t *testing.T) {
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(corpus, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := Default()
	base.Dataset, base.DataDir, base.BatchSize, base.Epochs = "text", corpus, 4, 1
	model := "[{embedding: {vocab: 256, dim: 16}}, {positional: {}}, {transformer_block: {heads: 2, mlp: 32}}, {lm_head: {}}]"
	for _, c := range []struct {
		name    string
		input   []int
		context int
		layers  string
		want    string // "" plans
	}{
		{"input and context", []int{16}, 16, model, ""},
		{"context from the input", []int{16}, 0, model, ""},
		{"input from the context", nil, 8, model, ""},
		{"a vocabulary other than bytes", []int{16}, 0, strings.Replace(model, "vocab: 256", "vocab: 100", 1),
			"model.layers: layers[3] (lm_head): the model ends in [16, 100] but the dataset has 256 tokens, so it must end in [16, 256], logits per position"},
		{"one class per example", []int{16}, 0, "[{embedding: {vocab: 256, dim: 16}}, {flatten: {}}, {linear: {out: 256}}]",
			"model.layers: layers[2] (linear): the model ends in [256] but the dataset has 256 tokens, so it must end in [16, 256], logits per position"},
	} {
		s := base
		s.Input, s.Context = c.input, c.context
		must(t, s.Set("model.layers", c.layers))
		must(t, s.Validate())
		train, test, err := s.LoadData()
		must(t, err)
		if d := train.Shape(); !d.Tokens || d.Classes != data.TextVocab || d.Positions != s.TextConfig().Context {
			t.Fatalf("%s: text shape %+v", c.name, d)
		}
		p, err := s.Plan(train, test)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && p.Trainer.Config().Spec.Positions != train.Shape().Positions:
			t.Errorf("%s: planned %s", c.name, p.Trainer.Config().Spec)
		case c.want != "" && (err == nil || err.Error() != c.want):
			t.Errorf("%s:\n got %v\nwant %s", c.name, err, c.want)
		}
	}
}

// TestTokenNetRefusesAFeatureRun: a run trained on feature vectors has no
// token model to sample, and the refusal says so in one sentence naming
// data.dataset and the dataset that would do.
func TestTokenNetRefusesAFeatureRun(t *testing.T) {
	for _, dataset := range []string{"synthetic", "fashion-mnist"} {
		s := Default()
		s.Dataset = dataset
		_, err := s.TokenNet()
		want := "data.dataset: is " + dataset + ", not text, so the run's model is not a token model; " +
			"only a model trained on dataset text can be sampled (e.g. a run of examples/char-transformer.yaml)"
		if err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", dataset, err, want)
		}
		if !field.Is(err, "data.dataset") || !errors.Is(err, nn.ErrNotTokenModel) {
			t.Errorf("%s: %v is not an error of data.dataset wrapping nn.ErrNotTokenModel", dataset, err)
		}
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
	if _, _, err := Default().LoadText(); !field.Is(err, "data.dataset") {
		t.Errorf("LoadText of fashion-mnist: got %v", err)
	}
}

package trainer_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// tokenConfig is a tiny transformer over the bytes of a small corpus in a
// temporary file: windows of 16 byte ids, a target at each position, with
// dropout so that a resume must carry the generator.
func tokenConfig(t *testing.T) trainer.Config {
	t.Helper()
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	text := strings.Repeat("the quick brown fox jumps over the lazy dog; pack my box with five dozen jugs. ", 30)
	if err := os.WriteFile(corpus, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	train, valid, err := data.LoadText(data.TextConfig{Path: corpus, Context: 16})
	if err != nil {
		t.Fatal(err)
	}
	net := nn.Net{Input: nn.Shape{16}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Embedding(data.TextVocab, 16), nn.Positional(), nn.TransformerBlock(2, 32).WithDropout(0.1), nn.LayerNorm(), nn.LMHead()}}
	arch, err := net.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if err := arch.FitsTokens(train.Context, data.TextVocab); err != nil {
		t.Fatal(err)
	}
	cfg := trainer.Config{
		Spec: arch.Outline(), Net: net, Optimizer: nn.DefaultOptimizer(),
		Epochs: 3, BatchSize: 8, Seed: 7, Ragged: data.RaggedPad,
		EnableGraphs: true, WarmupBatches: 2, Slots: 4, Loaders: 2, LogEvery: 4, World: 1,
		Train: train, Test: valid,
	}
	cfg.Optimizer.LR = 0.01
	steps, err := trainer.StepsPerEpoch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Optimizer.TotalSteps = cfg.Epochs * steps
	cfg.Optimizer.WarmupSteps = steps / 2
	return cfg
}

// A token model trains on text windows through the same staging as
// vectors: its whole step replayed from one graph, to the bits of the
// eager run, its loss finite and falling from chance (ln 256 per byte),
// its accuracy that of every position.
func TestTokenModelGraphsMatchEager(t *testing.T) {
	cfg := tokenConfig(t)
	var losses, epochSamples []float64
	cfg.Progress = func(p trainer.Progress) {
		if p.EpochDone {
			epochSamples = append(epochSamples, p.SamplesPerSecond*p.EpochSeconds)
		} else {
			losses = append(losses, p.Loss)
		}
	}
	g := run(t, cfg)
	cfg.EnableGraphs, cfg.Progress = false, nil
	e := run(t, cfg)
	if !g.GraphEnabled || g.GraphReplays != g.Steps-cfg.WarmupBatches || e.GraphReplays != 0 {
		t.Fatalf("graphs: %d replays of %d steps; eager: %d replays", g.GraphReplays, g.Steps, e.GraphReplays)
	}
	if g.ParamsSHA256 != e.ParamsSHA256 || g.TestLoss != e.TestLoss || g.TrainLoss != e.TrainLoss {
		t.Fatalf("graphs %s (test loss %v), eager %s (%v)", g.ParamsSHA256, g.TestLoss, e.ParamsSHA256, e.TestLoss)
	}
	if len(losses) < 2 {
		t.Fatalf("%d interval losses", len(losses))
	}
	first, last := losses[0], losses[len(losses)-1]
	t.Logf("%d steps: interval loss %.3f to %.3f; test loss %.3f, per-position accuracy %.3f", g.Steps, first, last, g.TestLoss, g.TestAccuracy)
	for _, l := range append(losses, g.TestLoss) {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("losses %v, test loss %v", losses, g.TestLoss)
		}
	}
	if !(last < first && g.TestLoss < math.Log(data.TextVocab)-1) {
		t.Fatalf("loss from %.3f to %.3f, test loss %.3f: not falling from chance %.3f", first, last, g.TestLoss, math.Log(data.TextVocab))
	}
	// An epoch's rate counts windows, not the positions the loss averages.
	for i, n := range epochSamples {
		if math.Abs(n-float64(cfg.Train.Len())) > 1e-6*n {
			t.Errorf("epoch %d: rate times time is %.3f samples; the epoch trained %d windows", i+1, n, cfg.Train.Len())
		}
	}
	if !(g.TestAccuracy > 0.2 && g.TestAccuracy <= 1) {
		t.Fatalf("per-position test accuracy %.3f", g.TestAccuracy)
	}
}

// A token model stopped mid-epoch and resumed from its checkpoint ends
// with the bits of the run never stopped.
func TestTokenModelResumeMatchesUninterrupted(t *testing.T) {
	cfg := tokenConfig(t)
	whole := run(t, cfg)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), whole.Steps/2+1
	if part := run(t, cfg); !part.Interrupted {
		t.Fatal("the first part was not interrupted")
	}
	cfg.MaxSteps, cfg.Resume = 0, true
	rest := run(t, cfg)
	if rest.ParamsSHA256 != whole.ParamsSHA256 || rest.TestLoss != whole.TestLoss || rest.TrainLoss != whole.TrainLoss {
		t.Fatalf("resumed %s (test loss %v), uninterrupted %s (%v)", rest.ParamsSHA256, rest.TestLoss, whole.ParamsSHA256, whole.TestLoss)
	}
}

// A batch laid out for one label per example does not carry a text's
// label per position: the configuration is refused before anything runs.
func TestTokenDataNeedsATokenModel(t *testing.T) {
	cfg := tokenConfig(t)
	vectors := smallConfig(t)
	cfg.Spec, cfg.Net = nn.Spec{Inputs: 16, Hidden: []int{8}, Outputs: data.TextVocab, Act: vectors.Spec.Act, Loss: nn.LossCrossEntropy}, nn.Net{}
	want := "dataset text/corpus.txt/train has 16 labels per example but the model 16-8-256 gelu cross_entropy scores 1"
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

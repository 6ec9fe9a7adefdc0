package trainer_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// A model described as layers trains as its MLP does, and its checkpoint
// resumes only the same architecture, however it is described: another is
// refused with both names.
func TestCheckpointRecordsTheLayers(t *testing.T) {
	cfg := smallConfig(t)
	whole := run(t, cfg)

	layers := cfg
	layers.Net = nn.Net{Input: nn.Shape{1, 4, 4}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Flatten(), nn.Linear(32), nn.GELU(), nn.Linear(16), nn.GELU(), nn.Linear(4)}}
	layers.RunDir, layers.MaxSteps = t.TempDir(), 20
	run(t, layers)

	other := layers
	other.MaxSteps, other.Resume = 0, true
	other.Net.Layers = []nn.LayerSpec{nn.Flatten(), nn.Linear(32), nn.ReLU(), nn.Linear(16), nn.ReLU(), nn.Linear(4)}
	other.Spec.Act = device.ActReLU
	_, err := trainer.Run(context.Background(), openCPU(t), newShared(t), other)
	want := "it was written for model 16-32-16-4 gelu cross_entropy but this run has 16-32-16-4 relu cross_entropy"
	if !errors.Is(err, trainer.ErrCheckpoint) || !strings.Contains(err.Error(), want) {
		t.Fatalf("resume with other layers: %v, want a refusal saying %q", err, want)
	}

	// The same MLP given as a Spec alone resumes it, and ends where the
	// uninterrupted run does.
	same := cfg
	same.RunDir, same.Resume = layers.RunDir, true
	if rest := run(t, same); rest.ParamsSHA256 != whole.ParamsSHA256 || rest.Model != "16-32-16-4 gelu cross_entropy" {
		t.Fatalf("resumed as the shorthand: %s %s, uninterrupted %s", rest.Model, rest.ParamsSHA256, whole.ParamsSHA256)
	}
}

func TestNetMustBeTheSpecsMLP(t *testing.T) {
	cfg := smallConfig(t)
	cfg.Net = nn.Spec{Inputs: 16, Hidden: []int{8}, Outputs: 4, Act: device.ActGELU, Loss: nn.LossCrossEntropy}.Net()
	want := "the layers describe 16-8-4 gelu cross_entropy but the step was given 16-32-16-4 gelu cross_entropy"
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	// Any other net is trained by the net's step; Spec is its outline.
	cfg.Net = nn.Net{Input: nn.Shape{1, 4, 4}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Conv(4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4)}}
	want = "the layers describe 16-4 none cross_entropy but the step was given 16-32-16-4 gelu cross_entropy"
	if err := cfg.Validate(); err == nil || err.Error() != want {
		t.Errorf("a CNN with an MLP's spec: %v", err)
	}
	cfg.Spec = nn.Spec{Inputs: 16, Outputs: 4, Act: device.ActNone, Loss: nn.LossCrossEntropy}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a CNN with its outline: %v", err)
	}
}

// cnnConfig is smallConfig's run with a small CNN that has every kind of
// running state: batchnorm (in a residual block too) and dropout.
func cnnConfig(t *testing.T) trainer.Config {
	cfg := smallConfig(t)
	cfg.Net = nn.Net{Input: nn.Shape{1, 4, 4}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Conv(6, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU(), nn.MaxPool(2),
		nn.Residual(nn.Conv(6, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU()),
		nn.Flatten(), nn.Dropout(0.2), nn.Linear(4)}}
	cfg.Spec = nn.Spec{Inputs: 16, Outputs: 4, Act: device.ActNone, Loss: nn.LossCrossEntropy}
	return cfg
}

// A CNN trains with its whole step replayed from one graph, to the same
// bits as eagerly, and learns something of the synthetic set (which has
// no spatial structure) in its 48 steps: better than chance, 0.25.
func TestCNNGraphsMatchEager(t *testing.T) {
	cfg := cnnConfig(t)
	g := run(t, cfg)
	cfg.EnableGraphs = false
	e := run(t, cfg)
	if !g.GraphEnabled || g.GraphReplays != g.Steps-cfg.WarmupBatches || e.GraphReplays != 0 {
		t.Fatalf("graphs: %d replays of %d steps; eager: %d replays", g.GraphReplays, g.Steps, e.GraphReplays)
	}
	if g.ParamsSHA256 != e.ParamsSHA256 || g.TestLoss != e.TestLoss || g.TrainLoss != e.TrainLoss {
		t.Fatalf("graphs %s (test loss %v), eager %s (%v)", g.ParamsSHA256, g.TestLoss, e.ParamsSHA256, e.TestLoss)
	}
	if g.TestAccuracy < 0.35 || !strings.HasPrefix(g.Model, "[1,4,4] conv(") {
		t.Fatalf("model %s: test accuracy %.3f", g.Model, g.TestAccuracy)
	}
}

// A CNN stopped mid-epoch and resumed ends with the bits of the run never
// stopped: the checkpoint carries the running statistics (the test loss
// is evaluated with them) and the dropout generator (the masks after the
// resume are the ones the uninterrupted run drew).
func TestCNNResumeMatchesUninterrupted(t *testing.T) {
	cfg := cnnConfig(t)
	whole := run(t, cfg)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 21
	if part := run(t, cfg); !part.Interrupted {
		t.Fatal("the first part was not interrupted")
	}
	ck, err := trainer.LoadCheckpoint(filepath.Join(cfg.RunDir, trainer.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if ck.Running != 2*6+2*6+device.RNGLen || len(ck.RunningState()) != ck.Running {
		t.Fatalf("the checkpoint holds %d running-state values", ck.Running)
	}
	cfg.MaxSteps, cfg.Resume = 0, true
	rest := run(t, cfg)
	if rest.ParamsSHA256 != whole.ParamsSHA256 || rest.TestLoss != whole.TestLoss || rest.TrainLoss != whole.TrainLoss {
		t.Fatalf("resumed %s (test loss %v), uninterrupted %s (%v)", rest.ParamsSHA256, rest.TestLoss, whole.ParamsSHA256, whole.TestLoss)
	}
}

// A CNN parked mid-epoch, its running state in pinned memory with the
// parameters, ends as the run never parked; a short last batch run
// eagerly trains it too.
func TestCNNParkedAndRagged(t *testing.T) {
	twin := run(t, cnnConfig(t))
	cfg := cnnConfig(t)
	dev := openCPU(t)
	p := &stepParker{dev: dev, at: map[int]bool{5: true, 23: true}}
	cfg.Observer, cfg.Parker = p, p
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.unparked != 2 || sum.ParamsSHA256 != twin.ParamsSHA256 || sum.TestLoss != twin.TestLoss {
		t.Fatalf("unparked %d times: %s (test loss %v), never parked %s (%v)", p.unparked, sum.ParamsSHA256, sum.TestLoss, twin.ParamsSHA256, twin.TestLoss)
	}

	cfg = cnnConfig(t)
	cfg.Ragged = data.RaggedEager
	if s := run(t, cfg); s.Fallbacks[graphs.ReasonRaggedBatch] != cfg.Epochs || s.TestAccuracy < 0.35 {
		t.Fatalf("ragged eager: %v fallbacks, test accuracy %.3f", s.Fallbacks, s.TestAccuracy)
	}
}

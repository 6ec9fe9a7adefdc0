package trainer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
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
	cfg.Net = nn.Net{Input: nn.Shape{1, 4, 4}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Conv(4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4)}}
	if err := cfg.Validate(); !errors.Is(err, nn.ErrNotMLP) {
		t.Errorf("a CNN: %v", err)
	}
}

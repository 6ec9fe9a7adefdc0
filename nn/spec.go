// Package nn describes models and their training step against the device
// contract: a net's layers (or the MLP shorthand), its seeded
// initialisation, the loss, the optimizers and the learning-rate schedule.
// A Step (an MLP's) or a NetStep (any net's) enqueues the whole iteration
// (forward, loss, backward, clipping, update, metric accumulation, a net's
// running statistics and dropout generator) with no allocation and no host
// synchronisation, so it can be captured into one graph.
package nn

import (
	"fmt"
	"strings"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Loss selects the training loss.
type Loss string

const (
	LossCrossEntropy Loss = "cross_entropy" // softmax cross-entropy over class labels
	LossMSE          Loss = "mse"           // mean squared error against one-hot targets
)

// ParseActivation maps a config name to an activation.
func ParseActivation(s string) (device.Activation, error) {
	switch strings.ToLower(s) {
	case "relu":
		return device.ActReLU, nil
	case "gelu":
		return device.ActGELU, nil
	case "tanh":
		return device.ActTanh, nil
	case "none", "identity", "linear":
		return device.ActNone, nil
	}
	return 0, fmt.Errorf("unknown activation %q: use relu, gelu, tanh or none", s)
}

// Spec describes an MLP: Inputs -> Hidden... -> Outputs.
type Spec struct {
	Inputs  int
	Hidden  []int
	Outputs int
	Act     device.Activation // hidden-layer activation
	Loss    Loss
	// Positions is a sequence model's positions per example, each with
	// its own label (Outputs logits each); 0: one label per example. Only
	// a net's outline (Arch.Outline) sets it.
	Positions int
}

// Validate reports a malformed spec.
func (s Spec) Validate() error {
	if s.Inputs <= 0 {
		return fmt.Errorf("model: inputs must be positive, got %d", s.Inputs)
	}
	if s.Outputs <= 0 {
		return fmt.Errorf("model: outputs must be positive, got %d", s.Outputs)
	}
	if err := CheckHidden(s.Hidden); err != nil {
		return err
	}
	if err := device.CheckAct(s.Act); err != nil {
		return field.Errorf("model.activation", "%w", err)
	}
	if err := CheckLoss(s.Loss); err != nil {
		return err
	}
	if s.Loss == LossCrossEntropy && s.Outputs < 2 {
		return field.Errorf("model.loss", "cross_entropy needs at least 2 outputs, got %d", s.Outputs)
	}
	return nil
}

// CheckHidden checks an MLP's hidden layer sizes (model.hidden).
func CheckHidden(hidden []int) error {
	for i, h := range hidden {
		if h <= 0 || h > 1<<16 {
			return field.Errorf("model.hidden", "layer %d must have 1..65536 units, got %d", i+1, h)
		}
	}
	return nil
}

// CheckLoss checks a loss's name (model.loss).
func CheckLoss(l Loss) error {
	if l != LossCrossEntropy && l != LossMSE {
		return field.Errorf("model.loss", "unknown loss %q: use cross_entropy or mse", l)
	}
	return nil
}

// Layer is one affine layer: In -> Out, with its offsets in the flat
// parameter buffer (weights In×Out row-major, then Out biases).
type Layer struct {
	In, Out  int
	WeightAt int
	BiasAt   int
}

// Layers lists the affine layers in order.
func (s Spec) Layers() []Layer {
	dims := append(append([]int{s.Inputs}, s.Hidden...), s.Outputs)
	layers := make([]Layer, 0, len(dims)-1)
	off := 0
	for i := 0; i+1 < len(dims); i++ {
		l := Layer{In: dims[i], Out: dims[i+1], WeightAt: off}
		l.BiasAt = off + l.In*l.Out
		off = l.BiasAt + l.Out
		layers = append(layers, l)
	}
	return layers
}

// ParamCount is the number of parameters.
func (s Spec) ParamCount() int {
	ls := s.Layers()
	last := ls[len(ls)-1]
	return last.BiasAt + last.Out
}

// LabelLen is the number of label values per row in a batch.
func (s Spec) LabelLen() int {
	if s.Loss == LossMSE {
		return s.Outputs
	}
	return max(1, s.Positions)
}

// String is a compact description, e.g. "784-256-128-10 gelu cross_entropy".
func (s Spec) String() string {
	parts := []string{fmt.Sprint(s.Inputs)}
	for _, h := range s.Hidden {
		parts = append(parts, fmt.Sprint(h))
	}
	parts = append(parts, fmt.Sprint(s.Outputs))
	if s.Positions > 0 {
		return fmt.Sprintf("%s %s %s per position of %d", strings.Join(parts, "-"), s.Act, s.Loss, s.Positions)
	}
	return fmt.Sprintf("%s %s %s", strings.Join(parts, "-"), s.Act, s.Loss)
}

// Layout places a batch in one flat float32 record: inputs, labels, mask
// and the optimizer's hyper-parameters, so that one copy stages all of it.
type Layout struct {
	Batch                    int
	X, Y, Mask, Hyper        int // offsets
	XLen, YLen, MaskLen, Len int
}

// NewLayout returns the batch layout for spec at batch size b.
func NewLayout(s Spec, b int) Layout {
	l := Layout{Batch: b, XLen: b * s.Inputs, YLen: b * s.LabelLen(), MaskLen: b}
	l.Y = l.XLen
	l.Mask = l.Y + l.YLen
	l.Hyper = l.Mask + l.MaskLen
	l.Len = l.Hyper + device.HyperLen
	return l
}

// Batch is a staged batch's views.
type Batch struct {
	X, Y, Mask, Hyper device.Buffer
}

// Views splits a device buffer holding one batch record.
func (l Layout) Views(b device.Buffer) Batch {
	return Batch{
		X:     b.Slice(l.X, l.XLen),
		Y:     b.Slice(l.Y, l.YLen),
		Mask:  b.Slice(l.Mask, l.MaskLen),
		Hyper: b.Slice(l.Hyper, device.HyperLen),
	}
}

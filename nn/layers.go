package nn

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// LayerKind names a layer, as a model's configuration writes it.
type LayerKind string

// The layers a Net is made of.
const (
	KindLinear        LayerKind = "linear"         // affine map of a vector: Out features
	KindConv          LayerKind = "conv"           // 2-D convolution of an image: Out channels
	KindMaxPool       LayerKind = "maxpool"        // maximum over Kernel×Kernel windows
	KindAvgPool       LayerKind = "avgpool"        // average over Kernel×Kernel windows
	KindGlobalAvgPool LayerKind = "global_avgpool" // average over the whole image: [C, H, W] -> [C, 1, 1]
	KindBatchNorm     LayerKind = "batchnorm"      // batch normalisation per channel (per feature of a vector)
	KindReLU          LayerKind = "relu"
	KindGELU          LayerKind = "gelu"
	KindTanh          LayerKind = "tanh"
	KindSigmoid       LayerKind = "sigmoid"  // 1/(1+e^-x), elementwise
	KindFlatten       LayerKind = "flatten"  // [C, H, W] -> [H·W·C], in (h, w, c) order
	KindResidual      LayerKind = "residual" // Body's output added to its input
	KindDropout       LayerKind = "dropout"  // zero each value with probability P in training

	// Sequence layers (nn/seqlayers.go).
	KindEmbedding        LayerKind = "embedding"         // token ids [T] -> [T, Dim], a row of a Vocab×Dim table each
	KindPositional       LayerKind = "positional"        // a learned T×D table added to every sequence
	KindLayerNorm        LayerKind = "layernorm"         // normalisation of each position over its features
	KindAttention        LayerKind = "attention"         // causal multi-head self-attention of Heads heads
	KindTransformerBlock LayerKind = "transformer_block" // pre-norm attention and MLP, each a residual block
	KindLMHead           LayerKind = "lm_head"           // per position, logits over the embedding's vocabulary
)

// LayerKinds lists every kind, sorted by name.
func LayerKinds() []LayerKind {
	return []LayerKind{KindAttention, KindAvgPool, KindBatchNorm, KindConv, KindDropout, KindEmbedding,
		KindFlatten, KindGELU, KindGlobalAvgPool, KindLayerNorm, KindLinear, KindLMHead, KindMaxPool,
		KindPositional, KindReLU, KindResidual, KindSigmoid, KindTanh, KindTransformerBlock}
}

// Known reports whether k is one of LayerKinds.
func (k LayerKind) Known() bool { return slices.Contains(LayerKinds(), k) }

// Activation reports whether k is an elementwise activation layer that
// BiasAct computes, so a linear or conv layer before it fuses it. Sigmoid
// is elementwise too but has no kernel of its own (see opSigmoid).
func (k LayerKind) Activation() bool { return k == KindReLU || k == KindGELU || k == KindTanh }

// Defaults of the layers' settings, as PyTorch has them.
const (
	DefaultBatchNormEps      = 1e-5
	DefaultBatchNormMomentum = 0.1
)

// LayerSpec is one layer of a Net. Only the fields of its Kind are read,
// and they hold explicit values: the constructors (Linear, Conv, ...) and
// the configuration fill in the defaults, so a zero Stride is an error,
// not a default.
type LayerSpec struct {
	Kind LayerKind

	Out     int // linear: output features; conv: output channels
	Kernel  int // conv, maxpool, avgpool: the window's side
	Stride  int // conv (default 1), maxpool and avgpool (default Kernel)
	Padding int // conv, maxpool, avgpool: zeros on every side (default 0)

	Eps      float64 // batchnorm: added to the variance
	Momentum float64 // batchnorm: weight of the batch in the running statistics

	P float64 // dropout: the probability of zeroing a value, in [0, 1); attention, transformer_block: their dropout's

	Vocab int // embedding: token ids 0..Vocab-1
	Dim   int // embedding: features per position
	Heads int // attention, transformer_block: attention heads, dividing the features
	MLP   int // transformer_block: the position-wise MLP's hidden width

	Body []LayerSpec // residual: the layers whose output is added to the input
}

// Linear is an affine layer of out features.
func Linear(out int) LayerSpec { return LayerSpec{Kind: KindLinear, Out: out} }

// Conv is a 2-D convolution of out channels with a kernel×kernel window,
// stride 1 and no padding (see WithStride, WithPadding).
func Conv(out, kernel int) LayerSpec {
	return LayerSpec{Kind: KindConv, Out: out, Kernel: kernel, Stride: 1}
}

// MaxPool is a maximum over kernel×kernel windows, stride kernel, no
// padding.
func MaxPool(kernel int) LayerSpec {
	return LayerSpec{Kind: KindMaxPool, Kernel: kernel, Stride: kernel}
}

// AvgPool is an average over kernel×kernel windows, stride kernel, no
// padding; padding counts as zeros, as in PyTorch's default.
func AvgPool(kernel int) LayerSpec {
	return LayerSpec{Kind: KindAvgPool, Kernel: kernel, Stride: kernel}
}

// GlobalAvgPool averages each channel over the whole image.
func GlobalAvgPool() LayerSpec { return LayerSpec{Kind: KindGlobalAvgPool} }

// BatchNorm normalises each channel with PyTorch's defaults (eps 1e-5,
// momentum 0.1).
func BatchNorm() LayerSpec {
	return LayerSpec{Kind: KindBatchNorm, Eps: DefaultBatchNormEps, Momentum: DefaultBatchNormMomentum}
}

// ReLU, GELU and Tanh are elementwise activations.
func ReLU() LayerSpec { return LayerSpec{Kind: KindReLU} }
func GELU() LayerSpec { return LayerSpec{Kind: KindGELU} }
func Tanh() LayerSpec { return LayerSpec{Kind: KindTanh} }

// Sigmoid is the logistic function 1/(1+e^-x), elementwise.
func Sigmoid() LayerSpec { return LayerSpec{Kind: KindSigmoid} }

// Flatten turns an image into a vector in (h, w, c) order.
func Flatten() LayerSpec { return LayerSpec{Kind: KindFlatten} }

// Residual adds the output of body to its input; body must keep the shape.
func Residual(body ...LayerSpec) LayerSpec { return LayerSpec{Kind: KindResidual, Body: body} }

// Dropout zeroes each value with probability p in training and scales the
// others by 1/(1-p); it is the identity in evaluation.
func Dropout(p float64) LayerSpec { return LayerSpec{Kind: KindDropout, P: p} }

// WithStride returns l with stride s (conv and pools).
func (l LayerSpec) WithStride(s int) LayerSpec { l.Stride = s; return l }

// WithPadding returns l with padding p (conv and pools).
func (l LayerSpec) WithPadding(p int) LayerSpec { l.Padding = p; return l }

// WithEps returns l with eps e (batchnorm).
func (l LayerSpec) WithEps(e float64) LayerSpec { l.Eps = e; return l }

// WithMomentum returns l with momentum m (batchnorm).
func (l LayerSpec) WithMomentum(m float64) LayerSpec { l.Momentum = m; return l }

// String is the layer's canonical form, every setting written out, e.g.
// "conv(out=32,kernel=3,stride=1,padding=1)" or "residual(conv(...) relu)".
func (l LayerSpec) String() string {
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch l.Kind {
	case KindLinear:
		return fmt.Sprintf("linear(out=%d)", l.Out)
	case KindConv:
		return fmt.Sprintf("conv(out=%d,kernel=%d,stride=%d,padding=%d)", l.Out, l.Kernel, l.Stride, l.Padding)
	case KindMaxPool, KindAvgPool:
		return fmt.Sprintf("%s(kernel=%d,stride=%d,padding=%d)", l.Kind, l.Kernel, l.Stride, l.Padding)
	case KindBatchNorm:
		return fmt.Sprintf("batchnorm(eps=%s,momentum=%s)", g(l.Eps), g(l.Momentum))
	case KindDropout:
		return fmt.Sprintf("dropout(p=%s)", g(l.P))
	case KindResidual:
		return "residual(" + layersString(l.Body) + ")"
	case KindEmbedding, KindLayerNorm, KindAttention, KindTransformerBlock, KindAttentionCore:
		return l.seqString()
	}
	return string(l.Kind)
}

func layersString(ls []LayerSpec) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return strings.Join(parts, " ")
}

// Limits on a layer's settings and on a Net's size.
const (
	MaxWidth     = 1 << 16 // linear out, conv out
	MaxKernel    = 255     // conv and pool kernel, stride
	MaxLayers    = 1024    // layers in a Net, residual bodies included
	MaxDepth     = 8       // residual blocks inside residual blocks
	MaxShapeSize = 1 << 28 // values per example in any activation
	MaxParams    = 1 << 30 // trained parameters of a Net
)

// ValidateLayers checks every layer's own settings, without shapes: the
// kinds, the ranges of their values and the nesting. Its errors name the
// layer by its path, e.g. "layers[4].residual[0] (conv)".
func ValidateLayers(layers []LayerSpec) error {
	if len(layers) == 0 {
		return modelErr("has no layers; give at least one")
	}
	n := 0
	return validateLayers(layers, "layers", 0, &n)
}

func validateLayers(layers []LayerSpec, prefix string, depth int, n *int) error {
	for i, l := range layers {
		path := fmt.Sprintf("%s[%d]", prefix, i)
		if *n++; *n > MaxLayers {
			return modelErr("%s: a model has at most %d layers, residual bodies included", path, MaxLayers)
		}
		if err := l.validate(path); err != nil {
			return err
		}
		if l.Kind != KindResidual {
			continue
		}
		if depth+1 > MaxDepth {
			return modelErr("%s (residual): residual blocks nest at most %d deep", path, MaxDepth)
		}
		if err := validateLayers(l.Body, path+".residual", depth+1, n); err != nil {
			return err
		}
	}
	return nil
}

// validate checks l's own settings; path names it in errors.
func (l LayerSpec) validate(path string) error {
	bad := func(format string, args ...any) error {
		return modelErr("%s (%s): %s", path, l.Kind, fmt.Sprintf(format, args...))
	}
	inRange := func(key string, v, lo, hi int) error {
		if v < lo || v > hi {
			return bad("%s must be in %d..%d, got %d", key, lo, hi, v)
		}
		return nil
	}
	switch l.Kind {
	case KindLinear:
		return inRange("out", l.Out, 1, MaxWidth)
	case KindConv:
		return firstErr(inRange("out", l.Out, 1, MaxWidth), inRange("kernel", l.Kernel, 1, MaxKernel),
			inRange("stride", l.Stride, 1, MaxKernel), inRange("padding", l.Padding, 0, l.Kernel-1))
	case KindMaxPool, KindAvgPool:
		return firstErr(inRange("kernel", l.Kernel, 1, MaxKernel), inRange("stride", l.Stride, 1, MaxKernel),
			inRange("padding", l.Padding, 0, l.Kernel/2))
	case KindBatchNorm:
		if !(l.Eps > 0 && l.Eps < 1) {
			return bad("eps must be in (0, 1), got %g", l.Eps)
		}
		if !(l.Momentum >= 0 && l.Momentum <= 1) {
			return bad("momentum must be in [0, 1], got %g", l.Momentum)
		}
	case KindDropout:
		if !(l.P >= 0 && l.P < 1) {
			return bad("p must be in [0, 1), got %g", l.P)
		}
	case KindResidual:
		if len(l.Body) == 0 {
			return bad("has no layers; give the block's layers, e.g. residual: [{conv: {out: 32, kernel: 3, padding: 1}}, {relu: {}}]")
		}
	case KindEmbedding, KindLayerNorm, KindAttention, KindTransformerBlock:
		return l.validateSeq(bad, inRange)
	case KindGlobalAvgPool, KindReLU, KindGELU, KindTanh, KindSigmoid, KindFlatten, KindPositional, KindLMHead:
	default:
		return modelErr("%s: unknown layer %q%s; layers are %s", path, l.Kind, KindHint(l.Kind), kindList())
	}
	return nil
}

func kindList() string {
	names := make([]string, 0, len(LayerKinds()))
	for _, k := range LayerKinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ExampleCNN is examples/cnn.yaml's model on Fashion-MNIST's 1×28×28
// images: two convolution blocks with max pools, a residual block of two
// convolutions, and a classifier with a hidden layer and dropout. The
// cnn benchmark preset trains it; a test in cmd/run_graph_bench keeps it
// equal to the example file.
func ExampleCNN() Net {
	return Net{
		Input: Shape{1, 28, 28},
		Layers: []LayerSpec{
			Conv(32, 3).WithPadding(1), BatchNorm(), ReLU(), MaxPool(2),
			Conv(64, 3).WithPadding(1), BatchNorm(), ReLU(), MaxPool(2),
			Residual(Conv(64, 3).WithPadding(1), BatchNorm(), ReLU(),
				Conv(64, 3).WithPadding(1), BatchNorm()),
			ReLU(), Flatten(), Linear(128), ReLU(), Dropout(0.3), Linear(10),
		},
		Loss: LossCrossEntropy,
	}
}

package nn

import (
	"fmt"
	"strings"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Shape is one example's activation shape, written as a model's input is:
// [C, H, W] for an image of C channels of H×W pixels, [F] for a vector of
// F features, [T, D] for a sequence of T positions of D features each (a
// sequence model's activations; its input is [T] token ids). Whatever the writing, an image is stored NHWC on the device
// (channels fastest; see device/image.go), so [C, H, W] names the sizes,
// not the order in memory.
type Shape []int

// Image reports whether s is an image, [C, H, W].
func (s Shape) Image() bool { return len(s) == 3 }

// Size is the number of values per example.
func (s Shape) Size() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// C, H and W are an image's channels, height and width.
func (s Shape) C() int { return s[0] }
func (s Shape) H() int { return s[1] }
func (s Shape) W() int { return s[2] }

// Channels is the number of per-channel statistics batchnorm keeps: an
// image's C, a vector's features, or a sequence's features per position.
func (s Shape) Channels() int {
	if s.Sequence() {
		return s[1]
	}
	return s[0]
}

// String writes s as the configuration does, e.g. "[32, 14, 14]".
func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Equal reports whether s and t are the same shape.
func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// CheckInput refuses an input shape that is neither [C, H, W] nor [F]
// with positive sizes.
func CheckInput(s Shape) error {
	if len(s) != 1 && len(s) != 3 {
		return field.Errorf("model.input", "give [C, H, W] for images or [features] for vectors, got %s", s)
	}
	for _, d := range s {
		if d < 1 || d > MaxShapeSize {
			return field.Errorf("model.input", "sizes must be in 1..%d, got %s", MaxShapeSize, s)
		}
	}
	if s.Size() > MaxShapeSize {
		return field.Errorf("model.input", "%s holds %d values per example, more than %d", s, s.Size(), MaxShapeSize)
	}
	return nil
}

// ShapeError is a layer whose input does not fit it, or a block or model
// whose output does not fit what follows. Its message names the layer by
// its path (layers[4].residual[0]) and both shapes.
type ShapeError struct {
	Path string
	Kind LayerKind
	Msg  string
}

func (e *ShapeError) Error() string { return fmt.Sprintf("%s (%s): %s", e.Path, e.Kind, e.Msg) }

func shapeErr(path string, kind LayerKind, format string, args ...any) error {
	return field.Errorf("model.layers", "%w", &ShapeError{Path: path, Kind: kind, Msg: fmt.Sprintf(format, args...)})
}

// KindHint suggests the layer kind meant by an unknown one, a slip of a
// letter or two away (rellu, flaten): " (did you mean relu?)", or "" when
// no kind is that near.
func KindHint(kind LayerKind) string {
	names := make([]string, 0, len(LayerKinds()))
	for _, k := range LayerKinds() {
		names = append(names, string(k))
	}
	if near := field.Nearest(string(kind), names); near != "" {
		return fmt.Sprintf(" (did you mean %s?)", near)
	}
	return ""
}

func modelErr(format string, args ...any) error {
	return field.Errorf("model.layers", format, args...)
}

// Net is a model described as a list of layers, its input's shape and its
// loss. A Net is plain data: Resolve infers and checks its shapes and lays
// out its parameters before anything is allocated.
type Net struct {
	Input  Shape
	Layers []LayerSpec
	Loss   Loss
}

// Validate checks the layers, their shapes and the loss (see Resolve).
func (n Net) Validate() error {
	_, err := n.Resolve()
	return err
}

// String is the net's canonical name, which a checkpoint records: a Net
// that the MLP step runs (see MLP) is named as its Spec is, e.g.
// "784-256-128-10 gelu cross_entropy", so a run described either way
// resumes the other's checkpoint; any other is its input, every layer
// with every setting, and its loss, e.g. "[1,28,28] conv(out=32,kernel=3,
// stride=1,padding=1) relu flatten linear(out=10) cross_entropy".
func (n Net) String() string {
	if s, err := n.MLP(); err == nil {
		return s.String()
	}
	in := strings.ReplaceAll(n.Input.String(), " ", "")
	return fmt.Sprintf("%s %s %s", in, layersString(n.Layers), n.Loss)
}

// Node is one layer of a resolved Net: its settings, its path, the shapes
// it takes and gives, and where its parameters and its state lie.
type Node struct {
	Layer   LayerSpec // its settings (a residual's Body is in Node.Body)
	Path    string    // e.g. "layers[4].residual[0]"
	In, Out Shape

	// Parameters, in the flat parameter buffer: linear weights In×Out
	// row-major (a sequence's features × Out, applied per position; as
	// lm_head's); conv weights (kh, kw, c_in)×c_out row-major, the columns
	// of device.ImageKernels.Im2Col times the output channels, so the
	// forward pass is Gemm(cols, W); batchnorm and layernorm gamma (C or D
	// values); embedding's vocab×dim and positional's T×D tables (no
	// bias). Bias: linear and conv Out values, batchnorm and layernorm
	// beta right after gamma, as their kernels' params want them.
	WeightAt, WeightLen int
	BiasAt, BiasLen     int

	// State that is not trained, in the flat state buffer: batchnorm's
	// running means then running variances (C values each), as
	// BatchNormTrain's running wants them.
	StateAt, StateLen int

	Body []Node // residual, attention, transformer_block: the block's layers
}

// Conv is the node's convolution geometry at batch size n (conv only).
func (nd Node) Conv(n int) device.ConvShape {
	return device.ConvShape{N: n, H: nd.In.H(), W: nd.In.W(), C: nd.In.C(), KH: nd.Layer.Kernel, KW: nd.Layer.Kernel, Stride: nd.Layer.Stride, Pad: nd.Layer.Padding}
}

// Pool is the node's pooling geometry at batch size n (maxpool, avgpool,
// global_avgpool).
func (nd Node) Pool(n int) device.PoolShape {
	if nd.Layer.Kind == KindGlobalAvgPool {
		return device.PoolShape{N: n, H: nd.In.H(), W: nd.In.W(), C: nd.In.C(), K: nd.In.H(), Stride: 1}
	}
	return device.PoolShape{N: n, H: nd.In.H(), W: nd.In.W(), C: nd.In.C(), K: nd.Layer.Kernel, Stride: nd.Layer.Stride, Pad: nd.Layer.Padding}
}

// Arch is a Net resolved: every layer's shapes, the parameter layout and
// the sizes of the flat buffers.
type Arch struct {
	Net    Net
	Layers []Node
	Out    Shape // the net's output, a vector, or [T, V] logits per position
	Params int   // trained parameters (weights, biases, gamma, beta, tables)
	State  int   // state that is not trained (batchnorm's running statistics)
	// Tokens: the input is Net.Input[0] token ids per example (the net
	// starts with embedding), not values.
	Tokens bool
}

// Walk calls f on every node in order, a residual block before its body.
func (a Arch) Walk(f func(Node)) { walk(a.Layers, f) }

func walk(nodes []Node, f func(Node)) {
	for _, nd := range nodes {
		f(nd)
		walk(nd.Body, f)
	}
}

// Resolve infers every layer's shapes from the input, checks that each
// fits, and lays out the parameters and the state, in order, a residual
// block's body in its place. An error names the layer's path and both
// shapes; it is a field.Error of model.layers (model.input, model.loss
// for those), and a shape's is a *ShapeError.
func (n Net) Resolve() (Arch, error) {
	if err := CheckInput(n.Input); err != nil {
		return Arch{}, err
	}
	if err := CheckLoss(n.Loss); err != nil {
		return Arch{}, err
	}
	if err := ValidateLayers(n.Layers); err != nil {
		return Arch{}, err
	}
	r := resolver{}
	nodes, out, err := r.layers(n.Layers, "layers", n.Input)
	if err != nil {
		return Arch{}, err
	}
	if r.params > MaxParams {
		return Arch{}, modelErr("has %d parameters, more than %d", r.params, MaxParams)
	}
	last := fmt.Sprintf("layers[%d]", len(n.Layers)-1)
	lastKind := n.Layers[len(n.Layers)-1].Kind
	if out.Image() {
		return Arch{}, shapeErr(last, lastKind, "the model ends in the image %s; a model ends in a vector of one value per class: end it with flatten and linear", out)
	}
	if out.Sequence() && n.Loss != LossCrossEntropy {
		return Arch{}, field.Errorf("model.loss", "is %s, but the model ends in the sequence %s at %s (%s), logits per position, which only cross_entropy scores; set %s to cross_entropy",
			n.Loss, out, last, lastKind, field.Name("model.loss"))
	}
	if n.Loss == LossCrossEntropy && out[len(out)-1] < 2 {
		return Arch{}, shapeErr(last, lastKind, "the model ends in %s; cross_entropy needs at least 2 outputs", out)
	}
	tokens := n.Layers[0].Kind == KindEmbedding
	return Arch{Net: n, Layers: nodes, Out: out, Params: r.params, State: r.state, Tokens: tokens}, nil
}

// Fits checks the resolved net against a dataset of features values per
// example and classes classes: the input must hold the features and the
// output give one value per class.
func (a Arch) Fits(features, classes int) error {
	if a.Net.Input.Size() != features {
		what := "values"
		if a.Tokens {
			what = "token ids"
		}
		return field.Errorf("model.input", "%s holds %d %s per example but the dataset has %d features", a.Net.Input, a.Net.Input.Size(), what, features)
	}
	if a.Out.Sequence() {
		last := a.Layers[len(a.Layers)-1]
		return shapeErr(last.Path, last.Layer.Kind, "the model ends in the sequence %s, logits per position, but the dataset has one class per example; end it in [%d] (e.g. flatten and linear: {out: %d})",
			a.Out, classes, classes)
	}
	if want := (Shape{classes}); !a.Out.Equal(want) {
		last := a.Layers[len(a.Layers)-1]
		return shapeErr(last.Path, last.Layer.Kind, "the model ends in %s but the dataset has %d classes, so it must end in %s; give the last layer out: %d",
			a.Out, classes, want, classes)
	}
	return nil
}

// resolver counts the parameters and the state as layers are placed, and
// keeps the embedding's vocabulary for lm_head.
type resolver struct{ params, state, vocab int }

func (r *resolver) layers(ls []LayerSpec, prefix string, in Shape) ([]Node, Shape, error) {
	nodes := make([]Node, 0, len(ls))
	for i, l := range ls {
		nd, err := r.layer(l, fmt.Sprintf("%s[%d]", prefix, i), in)
		if err != nil {
			return nil, nil, err
		}
		nodes = append(nodes, nd)
		in = nd.Out
	}
	return nodes, in, nil
}

func (r *resolver) layer(l LayerSpec, path string, in Shape) (Node, error) {
	nd := Node{Layer: l, Path: path, In: in}
	nd.Layer.Body = nil
	bad := func(format string, args ...any) (Node, error) {
		return Node{}, shapeErr(path, l.Kind, format, args...)
	}
	switch l.Kind {
	case KindLinear:
		if in.Image() {
			return bad("takes a vector, got the image %s; put flatten before it (it gives [%d])", in, in.Size())
		}
		nd.Out = Shape{l.Out}
		if in.Sequence() { // per position
			nd.Out = Shape{in[0], l.Out}
		}
		r.place(&nd, in.Channels()*l.Out, l.Out)
	case KindConv:
		if !in.Image() {
			return bad("takes an image [C, H, W], got %s; give model.input as [C, H, W]", in.describe())
		}
		if fix := windowFits(l, in); fix != "" {
			return bad("its %d×%d kernel is larger than its input %s padded by %d: %s", l.Kernel, l.Kernel, in, l.Padding, fix)
		}
		nd.Out = Shape{l.Out, (in.H()+2*l.Padding-l.Kernel)/l.Stride + 1, (in.W()+2*l.Padding-l.Kernel)/l.Stride + 1}
		r.place(&nd, l.Kernel*l.Kernel*in.C()*l.Out, l.Out)
	case KindMaxPool, KindAvgPool:
		if !in.Image() {
			return bad("takes an image [C, H, W], got %s", in.describe())
		}
		if fix := windowFits(l, in); fix != "" {
			return bad("its %d×%d window is larger than its input %s padded by %d: %s", l.Kernel, l.Kernel, in, l.Padding, fix)
		}
		nd.Out = Shape{in.C(), (in.H()+2*l.Padding-l.Kernel)/l.Stride + 1, (in.W()+2*l.Padding-l.Kernel)/l.Stride + 1}
	case KindGlobalAvgPool:
		if !in.Image() {
			return bad("takes an image [C, H, W], got %s", in.describe())
		}
		if in.H() != in.W() {
			return bad("averages a square image, got %s, %d high and %d wide: give it a square image, or average K×K windows with avgpool: {kernel: K}",
				in, in.H(), in.W())
		}
		nd.Out = Shape{in.C(), 1, 1}
	case KindBatchNorm:
		nd.Out = in
		r.place(&nd, in.Channels(), in.Channels())
		nd.StateAt, nd.StateLen = r.state, 2*in.Channels()
		r.state += nd.StateLen
	case KindFlatten:
		nd.Out = Shape{in.Size()}
	case KindResidual:
		body, out, err := r.layers(l.Body, path+".residual", in)
		if err != nil {
			return Node{}, err
		}
		if !out.Equal(in) {
			return bad("its body turns %s into %s; a residual block's output is added to its input, so it must keep its shape", in, out)
		}
		nd.Body, nd.Out = body, out
	case KindEmbedding, KindPositional, KindLayerNorm, KindAttention, KindAttentionCore, KindTransformerBlock, KindLMHead:
		if err := r.seqLayer(&nd, path, in); err != nil {
			return Node{}, err
		}
	default: // activations, dropout
		nd.Out = in
	}
	if nd.Out.Size() > MaxShapeSize {
		return bad("gives %s, %d values per example, more than %d", nd.Out, nd.Out.Size(), MaxShapeSize)
	}
	return nd, nil
}

// windowFits says how to fit the K×K window of l (a conv or a pool) into
// the image in, padded by l.Padding on every side; "" when it fits. The
// smaller side bounds it: kernel at most side+2·padding, or padding at
// least ⌈(kernel−side)/2⌉, which ValidateLayers' limits on padding
// (kernel−1 for conv, kernel/2 for a pool) always allow.
func windowFits(l LayerSpec, in Shape) string {
	side := min(in.H(), in.W())
	if side+2*l.Padding >= l.Kernel {
		return ""
	}
	return fmt.Sprintf("use a kernel of at most %d, or padding of at least %d", side+2*l.Padding, (l.Kernel-side+1)/2)
}

// place lays out a node's weights and biases at the end of the parameters.
func (r *resolver) place(nd *Node, weights, biases int) {
	nd.WeightAt, nd.WeightLen = r.params, weights
	nd.BiasAt, nd.BiasLen = r.params+weights, biases
	r.params += weights + biases
}

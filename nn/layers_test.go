package nn_test

import (
	"errors"
	"math"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
)

// blockCNN is a conv block, a residual block and a linear classifier
// (72,426 parameters): the layout tests' fixture.
func blockCNN() nn.Net {
	return nn.Net{
		Input: nn.Shape{1, 28, 28},
		Layers: []nn.LayerSpec{
			nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU(), nn.MaxPool(2),
			nn.Residual(nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU()),
			nn.Flatten(), nn.Linear(10),
		},
		Loss: nn.LossCrossEntropy,
	}
}

// exampleCNN is examples/cnn.yaml's model.
func exampleCNN() nn.Net { return nn.ExampleCNN() }

func TestExampleCNNResolves(t *testing.T) {
	a, err := exampleCNN().Resolve()
	must(t, err)
	// By hand: conv 3·3·1·32 + 32 and batchnorm 2·32; conv 3·3·32·64 + 64
	// and batchnorm 2·64; the residual body's two convs 3·3·64·64 + 64 and
	// batchnorms 2·64; linear 7·7·64·128 + 128; linear 128·10 + 10.
	wantParams := (9*1*32 + 32) + 2*32 + (9*32*64 + 64) + 2*64 + 2*((9*64*64+64)+2*64) + (7*7*64*128 + 128) + (128*10 + 10)
	if wantParams != 495946 || a.Params != wantParams {
		t.Fatalf("Params = %d, want %d (495946)", a.Params, wantParams)
	}
	// Running means and variances of 32 + 3·64 channels, then the dropout
	// generator's words.
	if want := 2 * (32 + 3*64); a.State != want || a.RunningLen() != want+device.RNGLen {
		t.Errorf("State = %d, RunningLen = %d, want %d and %d", a.State, a.RunningLen(), want, want+device.RNGLen)
	}
	must(t, a.Fits(784, 10))
}

func TestSmallCNNResolves(t *testing.T) {
	a, err := blockCNN().Resolve()
	must(t, err)
	// By hand: conv 3·3·1·32 + 32; batchnorm 2·32; residual conv
	// 3·3·32·32 + 32 and batchnorm 2·32; linear 14·14·32·10 + 10.
	wantParams := (9*1*32 + 32) + 2*32 + (9*32*32 + 32) + 2*32 + (14*14*32*10 + 10)
	if wantParams != 72426 || a.Params != wantParams {
		t.Fatalf("Params = %d, want %d (72426)", a.Params, wantParams)
	}
	if a.State != 4*32 {
		t.Errorf("State = %d, want %d", a.State, 4*32)
	}
	type row struct {
		path                        string
		in, out                     string
		weightAt, weightLen, biasAt int
		stateAt, stateLen           int
	}
	var got []row
	a.Walk(func(nd nn.Node) {
		got = append(got, row{nd.Path, nd.In.String(), nd.Out.String(), nd.WeightAt, nd.WeightLen, nd.BiasAt, nd.StateAt, nd.StateLen})
	})
	want := []row{
		{"layers[0]", "[1, 28, 28]", "[32, 28, 28]", 0, 288, 288, 0, 0},
		{"layers[1]", "[32, 28, 28]", "[32, 28, 28]", 320, 32, 352, 0, 64},
		{"layers[2]", "[32, 28, 28]", "[32, 28, 28]", 0, 0, 0, 0, 0},
		{"layers[3]", "[32, 28, 28]", "[32, 14, 14]", 0, 0, 0, 0, 0},
		{"layers[4]", "[32, 14, 14]", "[32, 14, 14]", 0, 0, 0, 0, 0},
		{"layers[4].residual[0]", "[32, 14, 14]", "[32, 14, 14]", 384, 9216, 9600, 0, 0},
		{"layers[4].residual[1]", "[32, 14, 14]", "[32, 14, 14]", 9632, 32, 9664, 64, 64},
		{"layers[4].residual[2]", "[32, 14, 14]", "[32, 14, 14]", 0, 0, 0, 0, 0},
		{"layers[5]", "[32, 14, 14]", "[6272]", 0, 0, 0, 0, 0},
		{"layers[6]", "[6272]", "[10]", 9696, 62720, 72416, 0, 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("nodes:\n got %v\nwant %v", got, want)
	}
	conv := a.Layers[4].Body[0]
	if s := conv.Conv(64); s != (device.ConvShape{N: 64, H: 14, W: 14, C: 32, KH: 3, KW: 3, Stride: 1, Pad: 1}) || s.Cols()*32 != conv.WeightLen || s.OutH() != 14 {
		t.Errorf("conv geometry %+v", s)
	}
	if s := a.Layers[3].Pool(64); s != (device.PoolShape{N: 64, H: 28, W: 28, C: 32, K: 2, Stride: 2}) || s.OutH() != 14 {
		t.Errorf("pool geometry %+v", s)
	}
	must(t, a.Fits(784, 10))
}

func TestResolveErrors(t *testing.T) {
	img := nn.Shape{1, 28, 28}
	for _, c := range []struct {
		name   string
		net    nn.Net
		want   string
		field  field.Name
		isShap bool
	}{
		{"linear on an image", nn.Net{Input: img, Layers: []nn.LayerSpec{nn.Conv(8, 3), nn.Linear(10)}},
			"model.layers: layers[1] (linear): takes a vector, got the image [8, 26, 26]; put flatten before it (it gives [5408])", "model.layers", true},
		{"conv on a vector", nn.Net{Input: nn.Shape{784}, Layers: []nn.LayerSpec{nn.Conv(8, 3), nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[0] (conv): takes an image [C, H, W], got the vector [784]; give model.input as [C, H, W]", "model.layers", true},
		{"residual changes the shape", nn.Net{Input: img, Layers: []nn.LayerSpec{
			nn.Conv(8, 3).WithPadding(1), nn.Residual(nn.ReLU(), nn.Conv(16, 3).WithPadding(1)), nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[1] (residual): its body turns [8, 28, 28] into [16, 28, 28]; a residual block's output is added to its input, so it must keep its shape", "model.layers", true},
		{"nested path", nn.Net{Input: img, Layers: []nn.LayerSpec{
			nn.Residual(nn.ReLU(), nn.Residual(nn.Linear(4))), nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[0].residual[1].residual[0] (linear): takes a vector, got the image [1, 28, 28]; put flatten before it (it gives [784])", "model.layers", true},
		{"pool window too large", nn.Net{Input: img, Layers: []nn.LayerSpec{nn.MaxPool(4), nn.MaxPool(4), nn.AvgPool(4), nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[2] (avgpool): its 4×4 window is larger than its input [1, 1, 1] padded by 0: use a kernel of at most 1, or padding of at least 2", "model.layers", true},
		{"kernel too large", nn.Net{Input: nn.Shape{3, 4, 4}, Layers: []nn.LayerSpec{nn.Conv(8, 5), nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[0] (conv): its 5×5 kernel is larger than its input [3, 4, 4] padded by 0: use a kernel of at most 4, or padding of at least 1", "model.layers", true},
		{"padded kernel too large for the narrower side", nn.Net{Input: nn.Shape{2, 9, 6}, Layers: []nn.LayerSpec{nn.Conv(8, 9).WithPadding(1), nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[0] (conv): its 9×9 kernel is larger than its input [2, 9, 6] padded by 1: use a kernel of at most 8, or padding of at least 2", "model.layers", true},
		{"global_avgpool of a non-square image", nn.Net{Input: nn.Shape{1, 28, 14}, Layers: []nn.LayerSpec{nn.GlobalAvgPool(), nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[0] (global_avgpool): averages a square image, got [1, 28, 14], 28 high and 14 wide: give it a square image, or average K×K windows with avgpool: {kernel: K}", "model.layers", true},
		{"mse on a sequence", nn.Net{Input: nn.Shape{5}, Loss: nn.LossMSE, Layers: []nn.LayerSpec{nn.Embedding(11, 8), nn.LMHead()}},
			"model.loss: is mse, but the model ends in the sequence [5, 11] at layers[1] (lm_head), logits per position, which only cross_entropy scores; set model.loss to cross_entropy", "model.loss", false},
		{"ends in an image", nn.Net{Input: img, Layers: []nn.LayerSpec{nn.Conv(10, 3), nn.GlobalAvgPool()}},
			"model.layers: layers[1] (global_avgpool): the model ends in the image [10, 1, 1]; a model ends in a vector of one value per class: end it with flatten and linear", "model.layers", true},
		{"one output for cross_entropy", nn.Net{Input: nn.Shape{4}, Layers: []nn.LayerSpec{nn.Linear(1)}},
			"model.layers: layers[0] (linear): the model ends in [1]; cross_entropy needs at least 2 outputs", "model.layers", true},
		{"stride zero", nn.Net{Input: img, Layers: []nn.LayerSpec{{Kind: nn.KindConv, Out: 8, Kernel: 3}, nn.Flatten(), nn.Linear(10)}},
			"model.layers: layers[0] (conv): stride must be in 1..255, got 0", "model.layers", false},
		{"conv padding", nn.Net{Input: img, Layers: []nn.LayerSpec{nn.Conv(8, 3).WithPadding(3)}},
			"model.layers: layers[0] (conv): padding must be in 0..2, got 3", "model.layers", false},
		{"pool padding", nn.Net{Input: img, Layers: []nn.LayerSpec{nn.Residual(nn.MaxPool(3).WithPadding(2))}},
			"model.layers: layers[0].residual[0] (maxpool): padding must be in 0..1, got 2", "model.layers", false},
		{"dropout p", nn.Net{Input: nn.Shape{4}, Layers: []nn.LayerSpec{nn.Dropout(1), nn.Linear(2)}},
			"model.layers: layers[0] (dropout): p must be in [0, 1), got 1", "model.layers", false},
		{"batchnorm momentum", nn.Net{Input: nn.Shape{4}, Layers: []nn.LayerSpec{nn.BatchNorm().WithMomentum(2), nn.Linear(2)}},
			"model.layers: layers[0] (batchnorm): momentum must be in [0, 1], got 2", "model.layers", false},
		{"empty residual", nn.Net{Input: nn.Shape{4}, Layers: []nn.LayerSpec{nn.Residual(), nn.Linear(2)}},
			"model.layers: layers[0] (residual): has no layers; give the block's layers, e.g. residual: [{conv: {out: 32, kernel: 3, padding: 1}}, {relu: {}}]", "model.layers", false},
		{"unknown kind", nn.Net{Input: nn.Shape{4}, Layers: []nn.LayerSpec{{Kind: "softmax"}}},
			`model.layers: layers[0]: unknown layer "softmax"; layers are attention, avgpool, batchnorm, conv, dropout, embedding, flatten, gelu, global_avgpool, layernorm, linear, lm_head, maxpool, positional, relu, residual, sigmoid, tanh, transformer_block`, "model.layers", false},
		{"misspelt kind", nn.Net{Input: nn.Shape{4}, Layers: []nn.LayerSpec{nn.Linear(4), {Kind: "rellu"}, nn.Linear(2)}},
			`model.layers: layers[1]: unknown layer "rellu" (did you mean relu?); layers are attention, avgpool, batchnorm, conv, dropout, embedding, flatten, gelu, global_avgpool, layernorm, linear, lm_head, maxpool, positional, relu, residual, sigmoid, tanh, transformer_block`, "model.layers", false},
		{"no layers", nn.Net{Input: nn.Shape{4}},
			"model.layers: has no layers; give at least one", "model.layers", false},
		{"bad input", nn.Net{Input: nn.Shape{28, 28}, Layers: []nn.LayerSpec{nn.Linear(2)}},
			"model.input: give [C, H, W] for images or [features] for vectors, got [28, 28]", "model.input", false},
		{"bad loss", nn.Net{Input: nn.Shape{4}, Layers: []nn.LayerSpec{nn.Linear(2)}, Loss: "hinge"},
			`model.loss: unknown loss "hinge": use cross_entropy or mse`, "model.loss", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.net.Loss == "" {
				c.net.Loss = nn.LossCrossEntropy
			}
			_, err := c.net.Resolve()
			if err == nil || err.Error() != c.want {
				t.Fatalf("error\n got %v\nwant %s", err, c.want)
			}
			if !field.Is(err, c.field) {
				t.Errorf("not a field error of %s", c.field)
			}
			var se *nn.ShapeError
			if errors.As(err, &se) != c.isShap {
				t.Errorf("ShapeError: %v, want %v", !c.isShap, c.isShap)
			}
		})
	}
}

// TestWindowTooLargeSuggestsFixesThatFit: for every conv and pool whose
// window overhangs its padded input, each fix the refusal suggests (the
// largest kernel, the smallest padding) resolves, and one step past it
// (a kernel one larger, a padding one smaller) is refused again, so the
// bounds are exact.
func TestWindowTooLargeSuggestsFixesThatFit(t *testing.T) {
	suggestion := regexp.MustCompile(`: use a kernel of at most (\d+), or padding of at least (\d+)$`)
	layer := func(kind nn.LayerKind, k, p int) nn.LayerSpec {
		if kind == nn.KindConv {
			return nn.Conv(2, k).WithPadding(p)
		}
		return nn.LayerSpec{Kind: kind, Kernel: k, Stride: 1, Padding: p}
	}
	resolve := func(kind nn.LayerKind, in nn.Shape, k, p int) error {
		_, err := nn.Net{Input: in, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{layer(kind, k, p), nn.Flatten(), nn.Linear(2)}}.Resolve()
		return err
	}
	checked := 0
	for _, kind := range []nn.LayerKind{nn.KindConv, nn.KindMaxPool, nn.KindAvgPool} {
		for _, in := range []nn.Shape{{1, 1, 1}, {3, 4, 4}, {2, 9, 6}, {1, 5, 12}, {1, 13, 13}} {
			for k := 2; k <= 16; k++ {
				maxPad := k - 1
				if kind != nn.KindConv {
					maxPad = k / 2
				}
				for p := 0; p <= maxPad; p++ {
					err := resolve(kind, in, k, p)
					if err == nil {
						continue
					}
					m := suggestion.FindStringSubmatch(err.Error())
					if m == nil {
						t.Fatalf("%s %d padding %d on %s: %v, no fix suggested", kind, k, p, in, err)
					}
					kernel, _ := strconv.Atoi(m[1])
					padding, _ := strconv.Atoi(m[2])
					if err := resolve(kind, in, kernel, p); err != nil {
						t.Errorf("%s %d padding %d on %s: the suggested kernel %d is refused: %v", kind, k, p, in, kernel, err)
					}
					if err := resolve(kind, in, kernel+1, p); err == nil {
						t.Errorf("%s %d padding %d on %s: kernel %d fits too, so %d is not the largest", kind, k, p, in, kernel+1, kernel)
					}
					if err := resolve(kind, in, k, padding); err != nil {
						t.Errorf("%s %d padding %d on %s: the suggested padding %d is refused: %v", kind, k, p, in, padding, err)
					}
					if err := resolve(kind, in, k, padding-1); err == nil {
						t.Errorf("%s %d padding %d on %s: padding %d fits too, so %d is not the smallest", kind, k, p, in, padding-1, padding)
					}
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no window was too large; the cases test nothing")
	}
}

func TestFits(t *testing.T) {
	a, err := blockCNN().Resolve()
	must(t, err)
	for _, c := range []struct {
		features, classes int
		want              string
	}{
		{784, 5, "model.layers: layers[6] (linear): the model ends in [10] but the dataset has 5 classes, so it must end in [5]; give the last layer out: 5"},
		{64, 10, "model.input: [1, 28, 28] holds 784 values per example but the dataset has 64 features"},
	} {
		if err := a.Fits(c.features, c.classes); err == nil || err.Error() != c.want {
			t.Errorf("Fits(%d, %d) = %v, want %s", c.features, c.classes, err, c.want)
		}
	}
}

// The MLP written as layers is today's MLP: the same layout and the same
// initial bits.
func TestMLPAsLayersIsBitIdentical(t *testing.T) {
	for _, s := range []nn.Spec{
		{Inputs: 784, Hidden: []int{256, 128}, Outputs: 10, Act: device.ActGELU, Loss: nn.LossCrossEntropy}, // the default
		{Inputs: 64, Hidden: []int{32}, Outputs: 10, Act: device.ActReLU, Loss: nn.LossMSE},
		{Inputs: 64, Hidden: []int{32, 16, 8}, Outputs: 3, Act: device.ActNone, Loss: nn.LossCrossEntropy},
		{Inputs: 5, Outputs: 2, Act: device.ActNone, Loss: nn.LossCrossEntropy},
	} {
		t.Run(s.String(), func(t *testing.T) {
			net := s.Net()
			a, err := net.Resolve()
			must(t, err)
			if a.Params != s.ParamCount() || a.State != 0 {
				t.Fatalf("Params %d State %d, want %d and 0", a.Params, a.State, s.ParamCount())
			}
			var linear []nn.Layer
			a.Walk(func(nd nn.Node) {
				if nd.Layer.Kind == nn.KindLinear {
					linear = append(linear, nn.Layer{In: nd.In.Size(), Out: nd.Out.Size(), WeightAt: nd.WeightAt, BiasAt: nd.BiasAt})
				}
			})
			if !slices.Equal(linear, s.Layers()) {
				t.Errorf("layout %v, want %v", linear, s.Layers())
			}
			for _, seed := range []uint64{0, 1, 42} {
				got, want := a.InitParams(seed), nn.InitParams(s, seed)
				if !slices.EqualFunc(got, want, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }) {
					t.Fatalf("seed %d: InitParams differs from the MLP's", seed)
				}
			}
			back, err := net.MLP()
			must(t, err)
			if back.String() != s.String() || net.String() != s.String() {
				t.Errorf("MLP() = %s, String() = %s, want %s", back, net, s)
			}
		})
	}
}

func TestMLPOfLayers(t *testing.T) {
	img := nn.Shape{1, 28, 28}
	for _, c := range []struct {
		name string
		net  nn.Net
		want string // the Spec's String, or the refusal
	}{
		{"flatten first", nn.Net{Input: img, Layers: []nn.LayerSpec{nn.Flatten(), nn.Linear(256), nn.GELU(), nn.Linear(128), nn.GELU(), nn.Linear(10)}},
			"784-256-128-10 gelu cross_entropy"},
		{"no activation", nn.Net{Input: nn.Shape{64}, Layers: []nn.LayerSpec{nn.Linear(8), nn.Linear(10)}},
			"64-8-10 none cross_entropy"},
		{"a CNN", blockCNN(),
			"model.layers: layers[0] (conv): conv is not a linear layer; the MLP step runs only linear layers with one activation between them (not an MLP)"},
		{"mixed activations", nn.Net{Input: nn.Shape{64}, Layers: []nn.LayerSpec{nn.Linear(8), nn.ReLU(), nn.Linear(8), nn.GELU(), nn.Linear(10)}},
			"model.layers: layers[3] (gelu): the activations differ (relu, then gelu); the MLP step runs only linear layers with one activation between them (not an MLP)"},
		{"ends with an activation", nn.Net{Input: nn.Shape{64}, Layers: []nn.LayerSpec{nn.Linear(8), nn.ReLU()}},
			"model.layers: layers[1] (relu): the model must end with linear; the MLP step runs only linear layers with one activation between them (not an MLP)"},
		{"dropout", nn.Net{Input: nn.Shape{64}, Layers: []nn.LayerSpec{nn.Linear(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(10)}},
			"model.layers: layers[2] (dropout): dropout is not a linear layer; the MLP step runs only linear layers with one activation between them (not an MLP)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.net.Loss = nn.LossCrossEntropy
			must(t, c.net.Validate())
			s, err := c.net.MLP()
			got := s.String()
			if err != nil {
				got = err.Error()
				if !errors.Is(err, nn.ErrNotMLP) {
					t.Errorf("%v is not ErrNotMLP", err)
				}
			}
			if got != c.want {
				t.Errorf("MLP()\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestNetString(t *testing.T) {
	want := "[1,28,28] conv(out=32,kernel=3,stride=1,padding=1) batchnorm(eps=1e-05,momentum=0.1) relu maxpool(kernel=2,stride=2,padding=0) " +
		"residual(conv(out=32,kernel=3,stride=1,padding=1) batchnorm(eps=1e-05,momentum=0.1) relu) flatten linear(out=10) cross_entropy"
	if got := blockCNN().String(); got != want {
		t.Errorf("String()\n got %s\nwant %s", got, want)
	}
	other := blockCNN()
	other.Layers[4] = nn.Residual(nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.GELU())
	if other.String() == want {
		t.Error("two architectures share a name")
	}
}

func TestCNNInitialisation(t *testing.T) {
	a, err := blockCNN().Resolve()
	must(t, err)
	p, q := a.InitParams(7), a.InitParams(7)
	if !slices.Equal(p, q) {
		t.Fatal("InitParams is not deterministic")
	}
	if slices.Equal(p, a.InitParams(8)) {
		t.Fatal("the seed changes nothing")
	}
	std := func(at, n int) float64 {
		var s float64
		for _, v := range p[at : at+n] {
			s += float64(v) * float64(v)
		}
		return math.Sqrt(s / float64(n))
	}
	res := a.Layers[4].Body[0]
	last := a.Layers[6]
	for _, c := range []struct {
		name      string
		at, n     int
		want, tol float64
	}{
		{"residual conv (Kaiming, fan_in 288)", res.WeightAt, res.WeightLen, math.Sqrt(2.0 / 288), 0.03},
		{"output linear (Xavier, 6272+10)", last.WeightAt, last.WeightLen, math.Sqrt(2.0 / 6282), 0.03},
	} {
		if got := std(c.at, c.n); math.Abs(got/c.want-1) > c.tol {
			t.Errorf("%s: std %g, want %g", c.name, got, c.want)
		}
	}
	bn := a.Layers[1]
	for j := range 32 {
		if p[bn.WeightAt+j] != 1 || p[bn.BiasAt+j] != 0 || p[a.Layers[0].BiasAt+j] != 0 {
			t.Fatal("batchnorm gamma must start at 1, beta and biases at 0")
		}
	}
	s := a.InitState()
	if len(s) != 128 || s[0] != 0 || s[31] != 0 || s[32] != 1 || s[63] != 1 || s[64] != 0 || s[96] != 1 {
		t.Errorf("running statistics must start at mean 0, variance 1: %v", s)
	}
}

package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Net is the spec's MLP written as layers: input [Inputs], then for each
// hidden width a linear layer and the activation (none for ActNone), then
// a linear layer of Outputs. Its Arch lays out the parameters as Layers
// does and initialises them as InitParams does.
func (s Spec) Net() Net {
	var layers []LayerSpec
	act := LayerKind(s.Act.String())
	for _, h := range s.Hidden {
		layers = append(layers, Linear(h))
		if s.Act != device.ActNone {
			layers = append(layers, LayerSpec{Kind: act})
		}
	}
	return Net{Input: Shape{s.Inputs}, Layers: append(layers, Linear(s.Outputs)), Loss: s.Loss}
}

// MLP is the Spec of a net that the MLP step (Step) runs: after an
// optional flatten, linear layers, each but the last followed by the same
// activation (or each by none). Any other net (which NetStep runs) is
// refused with ErrNotMLP, naming the first layer that does not fit; n must
// have passed Validate.
func (n Net) MLP() (Spec, error) {
	s := Spec{Inputs: n.Input.Size(), Act: device.ActNone, Loss: n.Loss}
	refuse := func(i int, why string) (Spec, error) {
		return Spec{}, field.Errorf("model.layers", "layers[%d] (%s): %s; the MLP step runs only linear layers with one activation between them (%w)",
			i, n.Layers[i].Kind, why, ErrNotMLP)
	}
	ls := n.Layers
	i := 0
	if len(ls) > 0 && ls[0].Kind == KindFlatten {
		i = 1
	}
	first := true
	for ; i < len(ls); i++ {
		if ls[i].Kind != KindLinear {
			return refuse(i, fmt.Sprintf("%s is not a linear layer", ls[i].Kind))
		}
		if i == len(ls)-1 {
			s.Outputs = ls[i].Out
			return s, nil
		}
		s.Hidden = append(s.Hidden, ls[i].Out)
		act := device.ActNone
		if next := ls[i+1]; next.Kind.Activation() {
			a, err := ParseActivation(string(next.Kind))
			if err != nil {
				return refuse(i+1, fmt.Sprintf("%s is not an activation", next.Kind))
			}
			act = a
			i++
		}
		if !first && act != s.Act {
			return refuse(i, fmt.Sprintf("the activations differ (%s, then %s)", s.Act, act))
		}
		s.Act, first = act, false
	}
	return refuse(len(ls)-1, "the model must end with linear")
}

// ErrNotMLP marks a net that the MLP step cannot run (NetStep runs it).
var ErrNotMLP = errors.New("not an MLP")

// InitParams returns the net's initial parameters for seed, drawn with
// the generator and in the order of the MLP's InitParams, so an MLP
// described as layers starts from the same bits as its Spec. Every linear
// and conv weight but the last is Kaiming-normal (std sqrt(2/fan_in), as
// torch.nn.init.kaiming_normal_ with mode fan_in and the ReLU gain); the
// last linear or conv layer's is Xavier-normal (std sqrt(2/(fan_in +
// fan_out)), as xavier_normal_); fan_in is In for linear and kh·kw·c_in
// for conv, fan_out Out and kh·kw·Out. Weights are drawn in their storage
// order, one layer after another. Biases and batchnorm's and layernorm's
// beta are 0, their gamma 1. Embedding and positional tables are normal
// with standard deviation EmbeddingStd (0.02), drawn in their place in
// that order; lm_head and the linear projections inside attention and
// transformer_block are linear layers (the last weighted layer of a
// sequence model is its lm_head or final linear, Xavier-normal).
func (a Arch) InitParams(seed uint64) []float32 {
	p := make([]float32, a.Params)
	rng := rand.New(rand.NewPCG(seed, 0x746f6c61726961)) // "tolaria", as InitParams
	var weighted []Node
	last := -1 // the last linear, conv or lm_head in weighted
	a.Walk(func(nd Node) {
		switch nd.Layer.Kind {
		case KindLinear, KindConv, KindLMHead:
			last = len(weighted)
			weighted = append(weighted, nd)
		case KindEmbedding, KindPositional:
			weighted = append(weighted, nd)
		case KindBatchNorm, KindLayerNorm:
			for j := range nd.WeightLen {
				p[nd.WeightAt+j] = 1
			}
		}
	})
	for i, nd := range weighted {
		if k := nd.Layer.Kind; k == KindEmbedding || k == KindPositional {
			for j := range nd.WeightLen {
				p[nd.WeightAt+j] = float32(rng.NormFloat64() * EmbeddingStd)
			}
			continue
		}
		fanIn := nd.WeightLen / nd.BiasLen
		std := math.Sqrt(2 / float64(fanIn))
		if i == last {
			fanOut := nd.BiasLen
			if nd.Layer.Kind == KindConv {
				fanOut *= nd.Layer.Kernel * nd.Layer.Kernel
			}
			std = math.Sqrt(2 / float64(fanIn+fanOut))
		}
		for j := range nd.WeightLen {
			p[nd.WeightAt+j] = float32(rng.NormFloat64() * std)
		}
	}
	return p
}

// InitState returns the initial state that is not trained: each
// batchnorm's running means 0 and running variances 1, as PyTorch starts
// them.
func (a Arch) InitState() []float32 {
	s := make([]float32, a.State)
	a.Walk(func(nd Node) {
		if nd.Layer.Kind == KindBatchNorm {
			c := nd.StateLen / 2
			for j := range c {
				s[nd.StateAt+c+j] = 1
			}
		}
	})
	return s
}

// Outline is the Spec that lays out a batch for the net: its inputs per
// example, its classes and its loss (no hidden layers: it names no MLP).
// A net that ends in a sequence [T, V] is outlined with V outputs and T
// positions, each with its own label.
func (a Arch) Outline() Spec {
	if a.Out.Sequence() {
		return Spec{Inputs: a.Net.Input.Size(), Outputs: a.Out[1], Positions: a.Out[0], Act: device.ActNone, Loss: a.Net.Loss}
	}
	return Spec{Inputs: a.Net.Input.Size(), Outputs: a.Out.Size(), Act: device.ActNone, Loss: a.Net.Loss}
}

// HasDropout reports whether the net draws dropout masks: a dropout
// layer, or attention with dropout on its probabilities.
func (a Arch) HasDropout() bool {
	found := false
	a.Walk(func(nd Node) {
		found = found || nd.Layer.Kind == KindDropout || (nd.Layer.Kind == KindAttentionCore && nd.Layer.P > 0)
	})
	return found
}

// RunningLen is the length of the net's running state: the batchnorm
// statistics (State values), then device.RNGLen words of the dropout
// generator when the net has dropout.
func (a Arch) RunningLen() int {
	if a.HasDropout() {
		return a.State + device.RNGLen
	}
	return a.State
}

// InitRunning returns the initial running state: InitState, then, with
// dropout, the generator keyed by a function of seed at offset 0. The
// generator's words are uint32 bit patterns (device.RNGSeedLo ...), not
// numbers.
func (a Arch) InitRunning(seed uint64) []float32 {
	v := a.InitState()
	if !a.HasDropout() {
		return v
	}
	key := seed ^ 0x64726f706f7574 // "dropout": not the initialisation's stream
	rng := make([]float32, device.RNGLen)
	rng[device.RNGSeedLo] = math.Float32frombits(uint32(key))
	rng[device.RNGSeedHi] = math.Float32frombits(uint32(key >> 32))
	return append(v, rng...)
}

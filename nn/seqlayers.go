package nn

import (
	"fmt"
	"strconv"

	"github.com/tolaria-ml/tolaria/internal/field"
)

// A sequence model reads T token ids per example: a net whose first layer
// is embedding takes model.input [T] as token ids, and every layer after
// it sees a sequence [T, D], T positions of D features, stored row-major
// (batch, T, D) as device/sequence.go lays it out. A position's vector is
// a row, so linear, layernorm, the activations and dropout work on
// (batch·T)×D matrices; a net that ends in [T, V] is trained on the
// token-level cross-entropy, one label per position.

// KindAttentionCore is the parameter-free middle of a resolved attention
// layer: Q, K and V of its [T, 3D] input split into heads, the causal
// softmax of the scaled scores, and the context merged back into [T, D].
// It appears only in an attention node's Body, between the Q, K, V
// projection and the output projection; it is not a layer one writes.
const KindAttentionCore LayerKind = "attention_core"

// DefaultLayerNormEps is layernorm's eps, as PyTorch's LayerNorm has it.
const DefaultLayerNormEps = 1e-5

// EmbeddingStd is the standard deviation of the normal draws that
// initialise embedding and positional tables (as GPT-2 initialises both).
const EmbeddingStd = 0.02

// Embedding maps token ids 0..vocab-1 to learned vectors of dim features.
func Embedding(vocab, dim int) LayerSpec {
	return LayerSpec{Kind: KindEmbedding, Vocab: vocab, Dim: dim}
}

// Positional adds a learned vector per position to every sequence.
func Positional() LayerSpec { return LayerSpec{Kind: KindPositional} }

// LayerNorm normalises each position over its features (eps 1e-5).
func LayerNorm() LayerSpec { return LayerSpec{Kind: KindLayerNorm, Eps: DefaultLayerNormEps} }

// Attention is causal multi-head self-attention of heads heads, without
// dropout (see WithDropout).
func Attention(heads int) LayerSpec { return LayerSpec{Kind: KindAttention, Heads: heads} }

// TransformerBlock is a pre-norm transformer block of heads attention
// heads and an MLP of mlp hidden units, without dropout (see
// WithDropout): x + attention(layernorm(x)), then y + mlp(layernorm(y)),
// the MLP linear mlp, gelu, linear D.
func TransformerBlock(heads, mlp int) LayerSpec {
	return LayerSpec{Kind: KindTransformerBlock, Heads: heads, MLP: mlp}
}

// LMHead gives, per position, logits over the embedding's vocabulary: a
// linear layer of out = the embedding's vocab.
func LMHead() LayerSpec { return LayerSpec{Kind: KindLMHead} }

// WithDropout returns l with dropout p (attention, transformer_block).
func (l LayerSpec) WithDropout(p float64) LayerSpec { l.P = p; return l }

// seqString is a sequence layer's canonical form.
func (l LayerSpec) seqString() string {
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch l.Kind {
	case KindEmbedding:
		return fmt.Sprintf("embedding(vocab=%d,dim=%d)", l.Vocab, l.Dim)
	case KindLayerNorm:
		return fmt.Sprintf("layernorm(eps=%s)", g(l.Eps))
	case KindAttention, KindAttentionCore:
		return fmt.Sprintf("%s(heads=%d,dropout=%s)", l.Kind, l.Heads, g(l.P))
	case KindTransformerBlock:
		return fmt.Sprintf("transformer_block(heads=%d,mlp=%d,dropout=%s)", l.Heads, l.MLP, g(l.P))
	}
	return string(l.Kind)
}

// validateSeq checks a sequence layer's own settings.
func (l LayerSpec) validateSeq(bad func(string, ...any) error, inRange func(string, int, int, int) error) error {
	dropout := func() error {
		if !(l.P >= 0 && l.P < 1) {
			return bad("dropout must be in [0, 1), got %g", l.P)
		}
		return nil
	}
	switch l.Kind {
	case KindEmbedding:
		return firstErr(inRange("vocab", l.Vocab, 1, MaxWidth), inRange("dim", l.Dim, 1, MaxWidth))
	case KindLayerNorm:
		if !(l.Eps > 0 && l.Eps < 1) {
			return bad("eps must be in (0, 1), got %g", l.Eps)
		}
	case KindAttention:
		return firstErr(inRange("heads", l.Heads, 1, MaxWidth), dropout())
	case KindTransformerBlock:
		return firstErr(inRange("heads", l.Heads, 1, MaxWidth), inRange("mlp", l.MLP, 1, MaxWidth), dropout())
	}
	return nil
}

// Sequence reports whether s is a sequence, [T, D].
func (s Shape) Sequence() bool { return len(s) == 2 }

// describe names s with its kind, e.g. "the sequence [5, 8]".
func (s Shape) describe() string {
	switch {
	case s.Image():
		return "the image " + s.String()
	case s.Sequence():
		return "the sequence " + s.String()
	}
	return "the vector " + s.String()
}

// seqLayer resolves a sequence layer on in, filling nd's output shape,
// parameters and, for the composites (attention, transformer_block),
// their body.
func (r *resolver) seqLayer(nd *Node, path string, in Shape) error {
	l := nd.Layer
	bad := func(format string, args ...any) error { return shapeErr(path, l.Kind, format, args...) }
	wantSeq := func() error {
		if in.Sequence() {
			return nil
		}
		msg := fmt.Sprintf("takes a sequence [T, D], got %s; a sequence model starts with embedding", in.describe())
		if l.Kind == KindLMHead {
			msg += classifierEnd(in)
		}
		return bad("%s", msg)
	}
	heads := func() error {
		if err := wantSeq(); err != nil {
			return err
		}
		if in[1]%l.Heads != 0 {
			return bad("its input %s has %d features per position, which %d heads cannot split evenly; give heads dividing %d",
				in, in[1], l.Heads, in[1])
		}
		if scores := l.Heads * in[0] * in[0]; scores > MaxShapeSize {
			return bad("its %d heads' %d×%d score matrices hold %d values per example, more than %d", l.Heads, in[0], in[0], scores, MaxShapeSize)
		}
		return nil
	}
	switch l.Kind {
	case KindEmbedding:
		if path != "layers[0]" {
			return bad("reads token ids, so it must be the model's first layer; here its input would be %s", in.describe())
		}
		if len(in) != 1 {
			return bad("reads T token ids per example, got %s; give model.input as [T]", in.describe())
		}
		nd.Out = Shape{in[0], l.Dim}
		r.place(nd, l.Vocab*l.Dim, 0)
		r.vocab = l.Vocab
	case KindPositional:
		if err := wantSeq(); err != nil {
			return err
		}
		nd.Out = in
		r.place(nd, in.Size(), 0)
	case KindLayerNorm:
		if in.Image() {
			return bad("normalises the features of a sequence's positions or of a vector, got %s", in.describe())
		}
		nd.Out = in
		f := in[len(in)-1]
		r.place(nd, f, f)
	case KindAttention:
		if err := heads(); err != nil {
			return err
		}
		d := in[1]
		body := []LayerSpec{Linear(3 * d), {Kind: KindAttentionCore, Heads: l.Heads, P: l.P}, Linear(d)}
		nodes, out, err := r.layers(body, path+".attention", in)
		if err != nil {
			return err
		}
		nd.Body, nd.Out = nodes, out
	case KindAttentionCore:
		nd.Out = Shape{in[0], in[1] / 3}
	case KindTransformerBlock:
		if err := heads(); err != nil {
			return err
		}
		drop := func(ls ...LayerSpec) []LayerSpec {
			if l.P > 0 {
				ls = append(ls, Dropout(l.P))
			}
			return ls
		}
		body := []LayerSpec{
			Residual(drop(LayerNorm(), Attention(l.Heads).WithDropout(l.P))...),
			Residual(drop(LayerNorm(), Linear(l.MLP), GELU(), Linear(in[1]))...),
		}
		nodes, out, err := r.layers(body, path+".transformer_block", in)
		if err != nil {
			return err
		}
		nd.Body, nd.Out = nodes, out
	case KindLMHead:
		if err := wantSeq(); err != nil {
			return err
		}
		if r.vocab == 0 {
			return bad("gives logits over the embedding's vocabulary, but no embedding comes before it; use linear: {out: V}")
		}
		nd.Layer.Out = r.vocab
		nd.Out = Shape{in[0], r.vocab}
		r.place(nd, in[1]*r.vocab, r.vocab)
	}
	return nil
}

// classifierEnd is how a model of in, not a sequence, ends instead of in
// lm_head: in one value per class.
func classifierEnd(in Shape) string {
	if in.Image() {
		return "; an image classifier ends with flatten and linear: {out: N}, N its classes, instead"
	}
	return "; a classifier ends with linear: {out: N}, N its classes, instead"
}

// FitsTokens checks the resolved net against a token dataset: context
// token ids per example, vocab token ids, one target per position. The
// net must start with embedding on [context] and end in [context, vocab].
func (a Arch) FitsTokens(context, vocab int) error {
	if !a.Tokens {
		return shapeErr(a.Layers[0].Path, a.Layers[0].Layer.Kind, "a token dataset wants a model that reads token ids: start it with embedding")
	}
	if a.Net.Input[0] != context {
		return field.Errorf("model.input", "%s token ids per example, but the dataset's windows hold %d; give model.input as [%d]", a.Net.Input, context, context)
	}
	if want := (Shape{context, vocab}); !a.Out.Equal(want) {
		last := a.Layers[len(a.Layers)-1]
		return shapeErr(last.Path, last.Layer.Kind, "the model ends in %s but the dataset has %d tokens, so it must end in %s, logits per position", a.Out, vocab, want)
	}
	return nil
}

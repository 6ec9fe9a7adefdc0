package nn

import (
	"fmt"
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// The attention core's workspace, per example of T positions, D features
// and H heads of size S = D/H, in its op's scratch order:
//
//	heads   3·T·D  Q, K and V split into heads: SplitHeads of the [T, 3D]
//	               projection as one sequence of batch·T positions and 3H
//	               heads, so Q, K and V are each (H, batch, T, S) and the
//	               (head, example) pairs are H·batch matrices T×S apart
//	probs   H·T·T  the scores Q·Kᵀ, then in place their causal softmax
//	ctx     T·D    the context P·V in heads; in backward its gradient
//	dprobs  H·T·T  the gradient of the probabilities, then of the scores
//	dheads  3·T·D  the gradients of Q, K and V, merged into the projection's
//	and with dropout on the probabilities:
//	dropped H·T·T  the probabilities after dropout, which the context reads
//	mask    H·T·T  dropout's mask
const (
	attnHeads = iota
	attnProbs
	attnCtx
	attnDProbs
	attnDHeads
	attnDropped
	attnMask
)

// seqOp plans a sequence layer on the value in and returns the value it
// gives.
func (p *netPlan) seqOp(nd Node, in int) int {
	o := op{nd: nd, in: in}
	switch nd.Layer.Kind {
	case KindEmbedding:
		o.kind = opEmbedding // token ids have no gradient
	case KindPositional:
		o.kind = opPositional
		p.needGrad(in)
	case KindLayerNorm:
		o.kind = opLayerNorm
		p.needGrad(in)
		rows, _ := rowsCols(nd.In)
		o.scratch = []int{p.place(nd.In.Size()), p.place(2 * rows)}
	case KindAttentionCore:
		o.kind = opAttention
		p.needGrad(in)
		t, d, h := nd.Out[0], nd.Out[1], nd.Layer.Heads
		o.scratch = []int{p.place(3 * t * d), p.place(h * t * t), p.place(t * d), p.place(h * t * t), p.place(3 * t * d)}
		if nd.Layer.P > 0 {
			o.scratch = append(o.scratch, p.place(h*t*t), p.place(h*t*t))
		}
	}
	o.out = p.newValue(nd.Out, true)
	p.ops = append(p.ops, o)
	return o.out
}

// LayerWorkspace is one layer's share of a net's workspace at a batch
// size: the float32 values of the buffers its step places (activations,
// gradients and scratch; an activation fused into a linear or conv layer
// counts as that layer's).
type LayerWorkspace struct {
	Path   string    // the node's path, e.g. "layers[2].transformer_block[0].residual[1].attention[1]"; "loss" for the token-level loss's mask
	Kind   LayerKind // the node's kind ("" for the loss)
	Values int
}

// NetWorkspaceByLayer splits NetWorkspaceSizes(a, b) after its head
// among the nodes that place them, in the order of their first buffer;
// the values sum to those of the sizes after NetWorkspaceHead.
func NetWorkspaceByLayer(a Arch, b int) ([]LayerWorkspace, error) {
	p, err := planNet(a, b)
	if err != nil {
		return nil, err
	}
	var out []LayerWorkspace
	at := map[string]int{}
	for i, nd := range p.owners {
		j, ok := at[nd.Path]
		if !ok {
			j = len(out)
			at[nd.Path] = j
			out = append(out, LayerWorkspace{Path: nd.Path, Kind: nd.Layer.Kind})
		}
		out[j].Values += p.sizes[netWorkspaceHead+i]
	}
	return out, nil
}

// seqForward enqueues a sequence op's forward pass.
func (p *pass) seqForward(o *op) error {
	nd, s, n := o.nd, p.s, p.n
	x, y := p.act(o.in), p.act(o.out)
	switch o.kind {
	case opEmbedding:
		t, d := nd.Out[0], nd.Out[1]
		return s.Embedding(n*t, nd.Layer.Vocab, d, x, p.st.M.Params.Slice(nd.WeightAt, nd.WeightLen), y)
	case opPositional:
		if err := s.CopyDtoD(y, x); err != nil {
			return err
		}
		return s.BiasAct(device.ActNone, n, nd.In.Size(), y, p.st.M.Params.Slice(nd.WeightAt, nd.WeightLen), y)
	case opLayerNorm:
		rows, cols := rowsCols(nd.In)
		params := p.st.M.Params.Slice(nd.WeightAt, 2*cols)
		xhat, stats := p.scratch(o.scratch[0], x.Len()), p.scratch(o.scratch[1], 2*n*rows)
		return s.LayerNorm(n*rows, cols, float32(nd.Layer.Eps), x, params, stats, xhat, y)
	case opAttention:
		return p.attention(o, x, y)
	}
	return fmt.Errorf("nn: unknown op %d", o.kind)
}

// attentionDims are an attention core's sizes on a pass of n examples:
// positions, features, heads, head size, (head, example) groups, and the
// scale of its scores, 1/sqrt(head size).
func attentionDims(nd Node, n int) (t, d, h, hs, groups int, scale float32) {
	t, d, h = nd.Out[0], nd.Out[1], nd.Layer.Heads
	hs = d / h
	return t, d, h, hs, h * n, float32(1 / math.Sqrt(float64(hs)))
}

// qkv are the views of Q, K and V in an attention core's heads buffer
// (or of their gradients in dheads), each n·T·D values.
func qkv(b device.Buffer, ntd int) (q, k, v device.Buffer) {
	return b.Slice(0, ntd), b.Slice(ntd, ntd), b.Slice(2*ntd, ntd)
}

// attention is the core's forward: x is the [T, 3D] projection, y the
// [T, D] context merged from its heads.
func (p *pass) attention(o *op, x, y device.Buffer) error {
	s, n := p.s, p.n
	t, d, h, hs, g, scale := attentionDims(o.nd, n)
	ntd := n * t * d
	heads := p.scratch(o.scratch[attnHeads], 3*ntd)
	probs := p.scratch(o.scratch[attnProbs], g*t*t)
	ctx := p.scratch(o.scratch[attnCtx], ntd)
	q, k, v := qkv(heads, ntd)
	if err := s.SplitHeads(1, n*t, 3*h, hs, x, heads); err != nil {
		return err
	}
	if err := s.BatchedGemm(false, true, g, t, t, hs, 1, q, t*hs, k, t*hs, 0, probs, t*t); err != nil {
		return err
	}
	if err := s.CausalSoftmax(g, t, scale, probs, probs); err != nil {
		return err
	}
	read := probs
	if p.train && o.nd.Layer.P > 0 {
		read = p.scratch(o.scratch[attnDropped], g*t*t)
		rng := p.st.M.rng()
		if err := s.Dropout(float32(o.nd.Layer.P), rng, probs, read, p.scratch(o.scratch[attnMask], g*t*t)); err != nil {
			return err
		}
		if err := s.AdvanceRNG(rng, (g*t*t+3)/4); err != nil {
			return err
		}
	}
	if err := s.BatchedGemm(false, false, g, t, hs, t, 1, read, t*t, v, t*hs, 0, ctx, t*hs); err != nil {
		return err
	}
	return s.MergeHeads(1, n*t, h, hs, ctx, y)
}

// seqBackward enqueues a sequence op's backward pass.
func (p *pass) seqBackward(o *op) error {
	nd, s, n := o.nd, p.s, p.n
	x := p.act(o.in)
	dx, hasDx := p.grad(o.in)
	dy, _ := p.grad(o.out)
	switch o.kind {
	case opEmbedding:
		t, d := nd.Out[0], nd.Out[1]
		return s.EmbeddingGrad(n*t, nd.Layer.Vocab, d, x, dy, p.st.W.Grads.Slice(nd.WeightAt, nd.WeightLen))
	case opPositional:
		if err := s.ColSum(n, nd.In.Size(), dy, 0, p.st.W.Grads.Slice(nd.WeightAt, nd.WeightLen)); err != nil {
			return err
		}
		return s.CopyDtoD(dx, dy)
	case opLayerNorm:
		rows, cols := rowsCols(nd.In)
		params := p.st.M.Params.Slice(nd.WeightAt, 2*cols)
		dparams := p.st.W.Grads.Slice(nd.WeightAt, 2*cols)
		xhat, stats := p.scratch(o.scratch[0], x.Len()), p.scratch(o.scratch[1], 2*n*rows)
		return s.LayerNormGrad(n*rows, cols, dy, xhat, params, stats, dx, dparams)
	case opAttention:
		if !hasDx {
			return fmt.Errorf("nn: attention's input has no gradient")
		}
		return p.attentionGrad(o, dy, dx)
	}
	return fmt.Errorf("nn: unknown op %d", o.kind)
}

// attentionGrad is the core's backward: from dy, the context's gradient
// ([T, D]), it writes dx, the projection's ([T, 3D]).
func (p *pass) attentionGrad(o *op, dy, dx device.Buffer) error {
	s, n := p.s, p.n
	t, d, h, hs, g, scale := attentionDims(o.nd, n)
	ntd := n * t * d
	q, k, v := qkv(p.scratch(o.scratch[attnHeads], 3*ntd), ntd)
	probs := p.scratch(o.scratch[attnProbs], g*t*t)
	dctx := p.scratch(o.scratch[attnCtx], ntd) // the context is read by nothing after the forward
	dprobs := p.scratch(o.scratch[attnDProbs], g*t*t)
	dheads := p.scratch(o.scratch[attnDHeads], 3*ntd)
	dq, dk, dv := qkv(dheads, ntd)
	read := probs
	dropout := o.nd.Layer.P > 0
	if dropout {
		read = p.scratch(o.scratch[attnDropped], g*t*t)
	}
	if err := s.SplitHeads(1, n*t, h, hs, dy, dctx); err != nil {
		return err
	}
	if err := s.BatchedGemm(false, true, g, t, t, hs, 1, dctx, t*hs, v, t*hs, 0, dprobs, t*t); err != nil {
		return err
	}
	if err := s.BatchedGemm(true, false, g, t, hs, t, 1, read, t*t, dctx, t*hs, 0, dv, t*hs); err != nil {
		return err
	}
	if dropout {
		if err := s.Mul(dprobs, p.scratch(o.scratch[attnMask], g*t*t), dprobs); err != nil {
			return err
		}
	}
	if err := s.CausalSoftmaxGrad(g, t, scale, probs, dprobs, dprobs); err != nil {
		return err
	}
	if err := s.BatchedGemm(false, false, g, t, hs, t, 1, dprobs, t*t, k, t*hs, 0, dq, t*hs); err != nil {
		return err
	}
	if err := s.BatchedGemm(true, false, g, t, hs, t, 1, dprobs, t*t, q, t*hs, 0, dk, t*hs); err != nil {
		return err
	}
	return s.MergeHeads(1, n*t, 3*h, hs, dheads, dx)
}

// tokenMask spreads the batch's mask (one value per example) over the
// positions of a net that ends in a sequence, for a loss over n·T rows:
// rowMask = mask·onesᵀ, one exact product per element.
func (p *pass) tokenMask(mask device.Buffer, t int) (device.Buffer, error) {
	plan := p.st.plan
	ones, rows := p.scratch(plan.ones, t), p.scratch(plan.rowMask, p.n*t)
	if err := p.s.Fill(ones, 1); err != nil {
		return device.Buffer{}, err
	}
	return rows, p.s.Gemm(false, false, p.n, t, 1, 1, mask, ones, 0, rows)
}

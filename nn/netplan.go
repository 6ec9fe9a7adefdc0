package nn

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
)

// A net's step runs a plan: the layers flattened into a list of ops over
// values (an activation and its gradient), each value's buffers placed in
// the workspace once, at the batch size the workspace is sized for. The
// plan is a function of the Arch alone, so NetWorkspaceSizes and
// NewNetStep lay out the same buffers.
//
// Values are written once per step, by the op that makes them, with two
// exceptions that keep memory down and change nothing: a residual block
// adds its input into its body's output in place (no op's backward reads
// its own output), and an activation layer's BiasAct adds a zero bias to
// its input in place (x + 0 == x). Gradients are written once per step
// with beta 0 (overwritten, never zeroed first), except a residual block's
// input's, which its body's first op overwrites and the block then adds
// its output's gradient to; no backward writes its output's gradient, so
// a block's output gradient is still whole when the block adds it.

// opKind is one step of a plan.
type opKind int

const (
	opLinear    opKind = iota // Gemm + BiasAct (a following activation fused)
	opConv                    // Im2Col + Gemm + BiasAct (a following activation fused)
	opMaxPool                 // MaxPool, keeping the arg-max
	opAvgPool                 // AvgPool (global_avgpool too)
	opBatchNorm               // BatchNormTrain / BatchNormEval
	opAct                     // BiasAct with a zero bias
	opDropout                 // Dropout + AdvanceRNG; a copy in evaluation
	opResStart                // a residual block's start: its backward adds the block's output gradient to its input's
	opResAdd                  // a residual block's end: its input added into its body's output
	opCopy                    // a copy (a residual body that only reshapes)
	opSigmoid                 // 0.5 + 0.5·tanh(x/2), from Scale, BiasAct and ActGrad

	// Sequence ops (nn/seqstep.go).
	opEmbedding  // Embedding / EmbeddingGrad
	opPositional // a copy and the positions' table added per example
	opLayerNorm  // LayerNorm / LayerNormGrad
	opAttention  // the attention core: heads, scores, causal softmax, context
)

// value is an activation: per values per example, and where it and its
// gradient lie in the workspace.
type value struct {
	per       int
	buf, grad int // workspace indices; -1: the net's input (buf), none (grad)
}

// rowsCols is shape s as the kernels see one example: rows of a column per
// channel, H·W×C for an image, 1×F for a vector, T×D for a sequence.
func rowsCols(s Shape) (rows, cols int) {
	switch {
	case s.Image():
		return s.H() * s.W(), s.C()
	case s.Sequence():
		return s[0], s[1]
	}
	return 1, s[0]
}

// op is one step of a plan. in and out are value indices; z is a linear
// or conv layer's pre-activation when an activation is fused (else out).
type op struct {
	kind    opKind
	nd      Node
	act     device.Activation
	in, out int
	z       int
	scratch []int // conv: im2col columns; maxpool: arg-max; batchnorm, layernorm: xhat, stats; dropout: mask; sigmoid: x/2, a row of 0.5; attention: see seqstep.go
}

// netPlan is a net's ops and values, and the workspace sizes at batch.
type netPlan struct {
	arch    Arch
	batch   int
	ops     []op
	vals    []value
	sizes   []int // every workspace buffer, netWorkspaceHead first
	zeroLen int   // the zero bias of activation layers: the widest cols
	acts    bool  // some op is an activation layer (reads the zero bias)

	// owners names, for every workspace buffer after the head, the node
	// that placed it (see NetWorkspaceByLayer); cur is the node being
	// planned.
	owners []Node
	cur    Node
	// ones and rowMask are the token-level loss's buffers (a net that ends
	// in a sequence): T ones, and the batch's mask spread over its
	// positions. -1 for any other net.
	ones, rowMask int
}

// The head of a net's workspace: the gradients, the gradient norm, the
// training and evaluation accumulators, the activation layers' zero bias.
const netWorkspaceHead = 5

// planNet lays out a's step at batch b.
func planNet(a Arch, b int) (*netPlan, error) {
	if b < 1 {
		return nil, fmt.Errorf("nn: batch size must be positive, got %d", b)
	}
	p := &netPlan{arch: a, batch: b, zeroLen: 1, ones: -1, rowMask: -1}
	p.sizes = []int{a.Params, 1, device.StatsLen, device.StatsLen, 0}
	in := p.newValue(a.Net.Input, false)
	out := p.layers(a.Layers, in)
	if p.vals[out].buf < 0 {
		return nil, fmt.Errorf("nn: the net %s computes nothing: its output is its input", a.Net)
	}
	if a.Out.Sequence() {
		p.cur = Node{Path: "loss"}
		p.ones = p.placeFixed(a.Out[0])
		p.rowMask = p.place(a.Out[0])
	}
	p.sizes[4] = p.zeroLen
	return p, nil
}

// newValue adds a value of shape s; its buffers are placed now, its
// gradient's only when grad (the net's input gets one only when an op
// that cannot skip it reads the input, see needGrad).
func (p *netPlan) newValue(s Shape, grad bool) int {
	v := value{per: s.Size(), buf: -1, grad: -1}
	if len(p.vals) > 0 {
		v.buf = p.place(v.per)
	}
	if grad {
		v.grad = p.place(v.per)
	}
	p.vals = append(p.vals, v)
	return len(p.vals) - 1
}

// place adds a workspace buffer of per values per example.
func (p *netPlan) place(per int) int {
	return p.placeFixed(p.batch * per)
}

// placeFixed adds a workspace buffer of n values, whatever the batch.
func (p *netPlan) placeFixed(n int) int {
	p.sizes = append(p.sizes, n)
	p.owners = append(p.owners, p.cur)
	return len(p.sizes) - 1
}

// needGrad gives value i a gradient buffer, for an op whose backward
// writes its input's gradient whether or not anything reads it.
func (p *netPlan) needGrad(i int) {
	if p.vals[i].grad < 0 {
		p.vals[i].grad = p.place(p.vals[i].per)
	}
}

// layers plans nodes on the value in and returns the value they give.
func (p *netPlan) layers(nodes []Node, in int) int {
	for i := 0; i < len(nodes); i++ {
		nd := nodes[i]
		p.cur = nd
		switch nd.Layer.Kind {
		case KindLinear, KindConv, KindLMHead:
			o := op{kind: opLinear, nd: nd, in: in, act: device.ActNone}
			if nd.Layer.Kind == KindConv {
				o.kind = opConv
				cs := nd.Conv(1)
				o.scratch = []int{p.place(cs.Rows() * cs.Cols())}
			}
			o.z = p.newValue(nd.Out, true)
			o.out = o.z
			if i+1 < len(nodes) && nodes[i+1].Layer.Kind.Activation() {
				o.act, _ = ParseActivation(string(nodes[i+1].Layer.Kind))
				o.out = p.newValue(nd.Out, true)
				i++
			}
			p.ops = append(p.ops, o)
			in = o.out
		case KindMaxPool, KindAvgPool, KindGlobalAvgPool:
			p.needGrad(in)
			o := op{kind: opAvgPool, nd: nd, in: in, out: p.newValue(nd.Out, true)}
			if nd.Layer.Kind == KindMaxPool {
				o.kind = opMaxPool
				o.scratch = []int{p.place(nd.Out.Size())}
			}
			p.ops = append(p.ops, o)
			in = o.out
		case KindBatchNorm:
			p.needGrad(in)
			o := op{kind: opBatchNorm, nd: nd, in: in, out: p.newValue(nd.Out, true)}
			o.scratch = []int{p.place(nd.In.Size()), p.placeFixed(2 * nd.In.Channels())} // stats: per step, not per example
			p.ops = append(p.ops, o)
			in = o.out
		case KindReLU, KindGELU, KindTanh:
			p.needGrad(in)
			o := op{kind: opAct, nd: nd, in: in, out: p.newValue(nd.Out, true)}
			o.act, _ = ParseActivation(string(nd.Layer.Kind))
			_, cols := rowsCols(nd.In)
			p.zeroLen, p.acts = max(p.zeroLen, cols), true
			p.ops = append(p.ops, o)
			in = o.out
		case KindSigmoid:
			p.needGrad(in)
			o := op{kind: opSigmoid, nd: nd, in: in, out: p.newValue(nd.Out, true)}
			_, cols := rowsCols(nd.In)
			o.scratch = []int{p.place(nd.In.Size()), p.placeFixed(cols)} // x/2; the bias 0.5
			p.zeroLen, p.acts = max(p.zeroLen, cols), true
			p.ops = append(p.ops, o)
			in = o.out
		case KindDropout:
			p.needGrad(in)
			o := op{kind: opDropout, nd: nd, in: in, out: p.newValue(nd.Out, true)}
			o.scratch = []int{p.place(nd.In.Size())}
			p.ops = append(p.ops, o)
			in = o.out
		case KindFlatten:
			// (h, w, c) order is the memory's: the same value, seen as a
			// vector.
		case KindResidual:
			start := len(p.ops)
			p.ops = append(p.ops, op{kind: opResStart, nd: nd, in: in})
			body := p.layers(nd.Body, in)
			p.cur = nd
			if body == in {
				// The body only reshapes: its output needs its own buffer.
				p.needGrad(in)
				body = p.newValue(nd.Out, true)
				p.ops = append(p.ops, op{kind: opCopy, nd: nd, in: in, out: body})
			}
			p.ops[start].out = body
			p.ops = append(p.ops, op{kind: opResAdd, nd: nd, in: in, out: body})
			in = body
		case KindAttention, KindTransformerBlock:
			in = p.layers(nd.Body, in)
		case KindEmbedding, KindPositional, KindLayerNorm, KindAttentionCore:
			in = p.seqOp(nd, in)
		}
	}
	return in
}

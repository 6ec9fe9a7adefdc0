package nn_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// Tiny transformer sizes: vocabulary, positions, features, heads, MLP.
const (
	tinyV, tinyT, tinyD, tinyH, tinyM = 11, 5, 8, 2, 16
)

// tinyTransformer is a character-level transformer of one block:
// embedding, positions, a pre-norm block, a final layernorm and the
// logits per position.
func tinyTransformer(dropout float64) nn.Net {
	return nn.Net{Input: nn.Shape{tinyT}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Embedding(tinyV, tinyD), nn.Positional(),
		nn.TransformerBlock(tinyH, tinyM).WithDropout(dropout),
		nn.LayerNorm(), nn.LMHead(),
	}}
}

// newTokenRig is newNetRig with a batch of token ids: b windows of T ids,
// a label per position, and mask 0 for the examples from valid on.
func newTokenRig(t *testing.T, net nn.Net, opt nn.Optimizer, b, valid int, seed uint64) *netRig {
	t.Helper()
	r := newNetRig(t, nil, net, opt, b, seed)
	T, V := r.arch.Out[0], r.arch.Out[1]
	ids, labels, mask := make([]float32, b*T), make([]float32, b*T), make([]float32, b)
	r.y = r.y[:0]
	for i := range ids {
		ids[i] = float32((i*7 + 3) % V)
		r.y = append(r.y, (i*5+2)%V)
		labels[i] = float32(r.y[i])
	}
	for e := range valid {
		mask[e] = 1
	}
	must(t, r.dev.Upload(r.in.X, ids))
	must(t, r.dev.Upload(r.in.Y, labels))
	must(t, r.dev.Upload(r.in.Mask, mask))
	r.x = ids
	return r
}

// TestTransformerGradientsMatchFiniteDifferences: every parameter's
// gradient of a tiny transformer (vocab 11, T 5, D 8, 2 heads, one block)
// against central differences of the loss computed on the host in
// float64 (seqLoss64, from the layers' definitions), as
// TestNetGradientsMatchFiniteDifferences does for the image layers. The
// batch's last example is padding (mask 0), so the token-level loss's
// mask is checked too.
func TestTransformerGradientsMatchFiniteDifferences(t *testing.T) {
	const b, valid = 3, 2
	opt := nn.DefaultOptimizer()
	opt.ClipNorm = 0
	r := newTokenRig(t, tinyTransformer(0), opt, b, valid, 11)
	must(t, r.s.Fill(r.st.W.Grads, float32(math.NaN())))
	must(t, r.st.Train(r.s, r.in))
	grads := r.download(t, r.st.W.Grads)
	stats := r.download(t, r.st.W.TrainStats)
	params, _, err := r.m.Snapshot()
	must(t, err)
	p64, x64 := toFloat64(params), toFloat64(r.x)
	loss := func() float64 { return seqLoss64(r.arch, p64, x64, r.y, b, valid) }

	want := loss()
	if n := stats[device.StatCount]; n != valid*tinyT {
		t.Fatalf("the loss counted %v positions, want %d", n, valid*tinyT)
	}
	if got := float64(stats[device.StatLossSum]) / float64(valid*tinyT); math.Abs(got-want) > 1e-5*math.Max(1, want) {
		t.Fatalf("the step's loss %.8g, the host's %.8g", got, want)
	}
	const h = 1e-6
	fd := make([]float64, len(params))
	scale := 0.0
	for i := range params {
		keep := p64[i]
		p64[i] = keep + h
		up := loss()
		p64[i] = keep - h
		down := loss()
		p64[i] = keep
		fd[i] = (up - down) / (2 * h)
		scale = math.Max(scale, math.Abs(fd[i]))
	}
	bad, worst := 0, 0.0
	for i, g := range grads {
		if math.IsNaN(float64(g)) {
			t.Fatalf("gradient %d was not written", i)
		}
		tol := 1e-4*scale + 1e-3*math.Abs(fd[i])
		worst = math.Max(worst, math.Abs(float64(g)-fd[i])/tol)
		if math.Abs(float64(g)-fd[i]) > tol {
			if bad++; bad <= 5 {
				t.Errorf("parameter %d (%s): gradient %.7g, central difference %.7g", i, paramOwner(r.arch, i), g, fd[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d gradients differ (largest %.3g)", bad, len(grads), scale)
	}
	t.Logf("%d gradients, largest %.3g; the worst difference is %.2f of the tolerance", len(grads), scale, worst)
}

// paramOwner names the node whose parameters hold index i.
func paramOwner(a nn.Arch, i int) string {
	name := "?"
	a.Walk(func(nd nn.Node) {
		if i >= nd.WeightAt && i < nd.BiasAt+nd.BiasLen && nd.WeightLen+nd.BiasLen > 0 {
			name = nd.Path + " " + string(nd.Layer.Kind)
		}
	})
	return name
}

// seqLoss64 is the mean token-level cross-entropy of arch on the first
// valid of n examples of token ids x with a label per position, in
// float64.
func seqLoss64(a nn.Arch, p, x []float64, y []int, n, valid int) float64 {
	out := forward64(a.Layers, p, x, n)
	T, V := a.Out[0], a.Out[1]
	loss := 0.0
	for r := range valid * T {
		row := out[r*V : (r+1)*V]
		m := slices.Max(row)
		s := 0.0
		for _, v := range row {
			s += math.Exp(v - m)
		}
		loss += m + math.Log(s) - row[y[r]]
	}
	return loss / float64(valid*T)
}

// seqLayer64 is layer64 for the sequence layers and for linear on a
// sequence (per position); ok is false for any other layer.
func seqLayer64(nd nn.Node, p, x []float64, n int) (y []float64, ok bool) {
	in, out := nd.In, nd.Out
	switch nd.Layer.Kind {
	case nn.KindLinear, nn.KindLMHead:
		if !in.Sequence() {
			return nil, false
		}
		rows, fi, fo := n*in[0], in[1], out[1]
		y = make([]float64, rows*fo)
		for r := range rows {
			for o := range fo {
				s := p[nd.BiasAt+o]
				for i := range fi {
					s += x[r*fi+i] * p[nd.WeightAt+i*fo+o]
				}
				y[r*fo+o] = s
			}
		}
	case nn.KindEmbedding:
		D := out[1]
		y = make([]float64, len(x)*D)
		for i, id := range x {
			copy(y[i*D:(i+1)*D], p[nd.WeightAt+int(id)*D:])
		}
	case nn.KindPositional:
		y = slices.Clone(x)
		per := in.Size()
		for i := range y {
			y[i] += p[nd.WeightAt+i%per]
		}
	case nn.KindLayerNorm:
		D := in[len(in)-1]
		y = make([]float64, len(x))
		eps := float64(float32(nd.Layer.Eps))
		for r := range len(x) / D {
			row := x[r*D : (r+1)*D]
			mean, v := 0.0, 0.0
			for _, e := range row {
				mean += e
			}
			mean /= float64(D)
			for _, e := range row {
				v += (e - mean) * (e - mean)
			}
			inv := 1 / math.Sqrt(v/float64(D)+eps)
			for c, e := range row {
				y[r*D+c] = p[nd.WeightAt+c]*(e-mean)*inv + p[nd.BiasAt+c]
			}
		}
	case nn.KindAttention, nn.KindTransformerBlock:
		y = forward64(nd.Body, p, x, n)
	case nn.KindAttentionCore:
		y = attention64(x, n, out[0], out[1], nd.Layer.Heads)
	default:
		return nil, false
	}
	return y, true
}

// attention64 is causal multi-head self-attention of the [T, 3D]
// projections x (q, then k, then v, each D features split into heads of
// D/H), giving the [T, D] context.
func attention64(x []float64, n, T, D, H int) []float64 {
	S := D / H
	y := make([]float64, n*T*D)
	scale := 1 / math.Sqrt(float64(S))
	at := func(b, t, part, h, d int) float64 { return x[(b*T+t)*3*D+part*D+h*S+d] }
	for b := range n {
		for h := range H {
			for t := range T {
				w := make([]float64, t+1)
				m := math.Inf(-1)
				for j := range t + 1 {
					for d := range S {
						w[j] += at(b, t, 0, h, d) * at(b, j, 1, h, d)
					}
					w[j] *= scale
					m = math.Max(m, w[j])
				}
				sum := 0.0
				for j := range w {
					w[j] = math.Exp(w[j] - m)
					sum += w[j]
				}
				for j := range w {
					for d := range S {
						y[(b*T+t)*D+h*S+d] += w[j] / sum * at(b, j, 2, h, d)
					}
				}
			}
		}
	}
	return y
}

// TestTransformerReplayEqualsEager: a transformer with dropout (on the
// attention's probabilities and after each residual branch) trained and
// evaluated from captured graphs ends every step with the bits of the
// same steps run eagerly.
func TestTransformerReplayEqualsEager(t *testing.T) {
	opt := nn.DefaultOptimizer()
	opt.TotalSteps = 10
	hyper := make([]float32, device.HyperLen)
	opt.Hyper(1, hyper)
	eager := newTokenRig(t, tinyTransformer(0.1), opt, 4, 3, 3)
	graph := newTokenRig(t, tinyTransformer(0.1), opt, 4, 3, 3)
	for _, r := range []*netRig{eager, graph} {
		must(t, r.dev.Upload(r.in.Hyper, hyper))
	}
	if !sameBits(netState(t, eager), netState(t, graph)) {
		t.Fatal("the two models start apart")
	}
	train := capture(t, graph.dev, graph.s, func(s device.Stream) error { return graph.st.Train(s, graph.in) })
	eval := capture(t, graph.dev, graph.s, func(s device.Stream) error { return graph.st.Eval(s, graph.in) })
	for step := range 3 {
		must(t, eager.st.Train(eager.s, eager.in))
		must(t, graph.s.Launch(train))
		if step%2 == 1 {
			must(t, eager.st.Eval(eager.s, eager.in))
			must(t, graph.s.Launch(eval))
		}
		if !sameBits(netState(t, eager), netState(t, graph)) {
			t.Fatalf("step %d: the replayed step differs from the eager one", step+1)
		}
	}
	running, err := graph.m.SnapshotRunning()
	must(t, err)
	if off := math.Float32bits(running[device.RNGOffsetLo]); off == 0 {
		t.Error("three steps with dropout did not advance the generator")
	}
	stats := eager.download(t, eager.st.W.TrainStats)
	if stats[device.StatCount] != 3*3*tinyT {
		t.Errorf("three steps counted %v positions, want %d", stats[device.StatCount], 3*3*tinyT)
	}
}

// TestTransformerResolves: the tiny transformer's shapes, its parameters
// by hand, its name, its outline and its initialisation.
func TestTransformerResolves(t *testing.T) {
	a, err := tinyTransformer(0).Resolve()
	must(t, err)
	const D, M, V, T = tinyD, tinyM, tinyV, tinyT
	want := V*D + T*D + // embedding, positional
		2*D + (D*3*D + 3*D) + (D*D + D) + // layernorm, attention's projections
		2*D + (D*M + M) + (M*D + D) + // layernorm, the MLP
		2*D + (D*V + V) // the final layernorm, lm_head
	if a.Params != want || a.State != 0 || !a.Tokens {
		t.Errorf("%d parameters, %d state, tokens %v; want %d, 0, true", a.Params, a.State, a.Tokens, want)
	}
	if !a.Out.Equal(nn.Shape{T, V}) || !a.Layers[0].In.Equal(nn.Shape{T}) || !a.Layers[0].Out.Equal(nn.Shape{T, D}) {
		t.Errorf("embedding %s -> %s, out %s", a.Layers[0].In, a.Layers[0].Out, a.Out)
	}
	var paths []string
	a.Walk(func(nd nn.Node) { paths = append(paths, nd.Path+" "+string(nd.Layer.Kind)) })
	if p := "layers[2].transformer_block[0].residual[1].attention[1] attention_core"; !slices.Contains(paths, p) {
		t.Errorf("no %s among %v", p, paths)
	}
	name := "[5] embedding(vocab=11,dim=8) positional transformer_block(heads=2,mlp=16,dropout=0) layernorm(eps=1e-05) lm_head cross_entropy"
	if got := a.Net.String(); got != name {
		t.Errorf("name %q, want %q", got, name)
	}
	if o := a.Outline(); o.Inputs != T || o.Outputs != V || o.Positions != T || o.LabelLen() != T {
		t.Errorf("outline %+v", o)
	}
	if l := nn.NewLayout(a.Outline(), 4); l.XLen != 4*T || l.YLen != 4*T || l.MaskLen != 4 {
		t.Errorf("layout %+v", l)
	}
	if err := a.Fits(T, V); err == nil {
		t.Error("a model of logits per position fits a dataset of one class per example")
	}
	must(t, a.FitsTokens(T, V))
	if err := a.FitsTokens(T+1, V); err == nil {
		t.Error("FitsTokens accepted another context")
	}

	p := a.InitParams(7)
	if !slices.Equal(p, a.InitParams(7)) {
		t.Error("the initialisation is not a function of the seed")
	}
	a.Walk(func(nd nn.Node) {
		w, b := p[nd.WeightAt:nd.WeightAt+nd.WeightLen], p[nd.BiasAt:nd.BiasAt+nd.BiasLen]
		switch nd.Layer.Kind {
		case nn.KindLayerNorm:
			if slices.ContainsFunc(w, func(v float32) bool { return v != 1 }) || slices.ContainsFunc(b, func(v float32) bool { return v != 0 }) {
				t.Errorf("%s: gamma %v beta %v, want 1 and 0", nd.Path, w, b)
			}
		case nn.KindEmbedding, nn.KindPositional:
			if s := std(w); s < 0.012 || s > 0.03 {
				t.Errorf("%s: std %.4f, want about %g", nd.Path, s, nn.EmbeddingStd)
			}
		case nn.KindLinear, nn.KindLMHead:
			if slices.ContainsFunc(b, func(v float32) bool { return v != 0 }) {
				t.Errorf("%s: biases not 0", nd.Path)
			}
		}
	})
}

func std(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s / float64(len(v)))
}

// TestSequenceShapeErrors: misfit sequence models are refused before
// anything is allocated, naming the layer and its shapes.
func TestSequenceShapeErrors(t *testing.T) {
	tok := nn.Shape{5}
	for _, c := range []struct {
		name string
		net  nn.Net
		want string
	}{
		{"heads do not divide dim", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Embedding(11, 8), nn.Attention(3), nn.LMHead()}},
			"model.layers: layers[1] (attention): its input [5, 8] has 8 features per position, which 3 heads cannot split evenly; give heads dividing 8"},
		{"block heads do not divide dim", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Embedding(11, 6), nn.TransformerBlock(4, 16), nn.LMHead()}},
			"model.layers: layers[1] (transformer_block): its input [5, 6] has 6 features per position, which 4 heads cannot split evenly; give heads dividing 6"},
		{"embedding not first", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Linear(5), nn.Embedding(11, 8), nn.LMHead()}},
			"model.layers: layers[1] (embedding): reads token ids, so it must be the model's first layer; here its input would be the vector [5]"},
		{"embedding on an image", nn.Net{Input: nn.Shape{1, 5, 5}, Layers: []nn.LayerSpec{nn.Embedding(11, 8), nn.LMHead()}},
			"model.layers: layers[0] (embedding): reads T token ids per example, got the image [1, 5, 5]; give model.input as [T]"},
		{"attention on a vector", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Attention(1), nn.Linear(2)}},
			"model.layers: layers[0] (attention): takes a sequence [T, D], got the vector [5]; a sequence model starts with embedding"},
		{"attention on a flattened sequence", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Embedding(11, 8), nn.Flatten(), nn.TransformerBlock(2, 8), nn.Linear(2)}},
			"model.layers: layers[2] (transformer_block): takes a sequence [T, D], got the vector [40]; a sequence model starts with embedding"},
		{"positional on a vector", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Positional(), nn.Linear(2)}},
			"model.layers: layers[0] (positional): takes a sequence [T, D], got the vector [5]; a sequence model starts with embedding"},
		{"lm_head without embedding", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Linear(4), nn.LMHead()}},
			"model.layers: layers[1] (lm_head): takes a sequence [T, D], got the vector [4]; a sequence model starts with embedding; a classifier ends with linear: {out: N}, N its classes, instead"},
		{"lm_head on an image", nn.Net{Input: nn.Shape{1, 5, 5}, Layers: []nn.LayerSpec{nn.Conv(4, 3), nn.LMHead()}},
			"model.layers: layers[1] (lm_head): takes a sequence [T, D], got the image [4, 3, 3]; a sequence model starts with embedding; an image classifier ends with flatten and linear: {out: N}, N its classes, instead"},
		{"conv on a sequence", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Embedding(11, 8), nn.Conv(4, 3), nn.Flatten(), nn.Linear(2)}},
			"model.layers: layers[1] (conv): takes an image [C, H, W], got the sequence [5, 8]; give model.input as [C, H, W]"},
		{"layernorm on an image", nn.Net{Input: nn.Shape{1, 4, 4}, Layers: []nn.LayerSpec{nn.LayerNorm(), nn.Flatten(), nn.Linear(2)}},
			"model.layers: layers[0] (layernorm): normalises the features of a sequence's positions or of a vector, got the image [1, 4, 4]"},
		{"inside a block", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Embedding(11, 8), nn.Residual(nn.Attention(16)), nn.LMHead()}},
			"model.layers: layers[1].residual[0] (attention): its input [5, 8] has 8 features per position, which 16 heads cannot split evenly; give heads dividing 8"},
		{"zero heads", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Embedding(11, 8), nn.Attention(0), nn.LMHead()}},
			"model.layers: layers[1] (attention): heads must be in 1..65536, got 0"},
		{"zero vocab", nn.Net{Input: tok, Layers: []nn.LayerSpec{nn.Embedding(0, 8), nn.LMHead()}},
			"model.layers: layers[0] (embedding): vocab must be in 1..65536, got 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.net.Loss == "" {
				c.net.Loss = nn.LossCrossEntropy
			}
			_, err := c.net.Resolve()
			if err == nil || err.Error() != c.want {
				t.Fatalf("error\n got %v\nwant %s", err, c.want)
			}
		})
	}
	var se *nn.ShapeError
	_, err := nn.Net{Input: tok, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{nn.Attention(1), nn.Linear(2)}}.Resolve()
	if !errors.As(err, &se) || se.Path != "layers[0]" || se.Kind != nn.KindAttention {
		t.Errorf("%v is not a ShapeError of layers[0] (attention)", err)
	}
}

// TestTransformerWorkspaceByLayer: the workspace split by layer adds up
// to the planned buffers, and the attention's share is its score
// matrices and the rest of its core, by hand.
func TestTransformerWorkspaceByLayer(t *testing.T) {
	for _, dropout := range []float64{0, 0.1} {
		a, err := tinyTransformer(dropout).Resolve()
		must(t, err)
		const b, T, D, H = 4, tinyT, tinyD, tinyH
		sizes, err := nn.NetWorkspaceSizes(a, b)
		must(t, err)
		layers, err := nn.NetWorkspaceByLayer(a, b)
		must(t, err)
		planned, billed := 0, 0
		for _, n := range sizes[nn.NetWorkspaceHead:] {
			planned += n
		}
		byPath := map[string]int{}
		for _, l := range layers {
			billed += l.Values
			byPath[l.Path] = l.Values
		}
		if billed != planned {
			t.Errorf("dropout %g: the layers' bill is %d values, the plan %d", dropout, billed, planned)
		}
		// Q, K, V in heads and their gradients (3TD each), the scores
		// turned probabilities and their gradient (HTT each), the context
		// (TD), the merged output and its gradient (TD each); with
		// dropout, the dropped probabilities and the mask (HTT each).
		scores := b * H * T * T
		core := b*(3*T*D+T*D+3*T*D+2*T*D) + 2*scores
		if dropout > 0 {
			core += 2 * scores
		}
		if got := byPath["layers[2].transformer_block[0].residual[1].attention[1]"]; got != core {
			t.Errorf("dropout %g: the attention core takes %d values, want %d (%d of them scores)", dropout, got, core, scores)
		}
		if got := byPath["loss"]; got != b*T+T {
			t.Errorf("the loss's mask takes %d values, want %d", got, b*T+T)
		}
		if got, want := byPath["layers[0]"], b*2*T*D; got != want {
			t.Errorf("the embedding takes %d values, want %d (its output and gradient)", got, want)
		}
	}
}

// TestTransformerShortBatch: a step on the first rows of its batch (a
// short last batch run eagerly) lays out heads, scores and the loss's
// mask for those rows only: its loss is the host's on them.
func TestTransformerShortBatch(t *testing.T) {
	const b, n = 4, 2
	r := newTokenRig(t, tinyTransformer(0), nn.DefaultOptimizer(), b, b, 5)
	params, _, err := r.m.Snapshot()
	must(t, err)
	must(t, r.st.WithBatch(n).Eval(r.s, r.in))
	stats := r.download(t, r.st.W.EvalStats)
	want := seqLoss64(r.arch, toFloat64(params), toFloat64(r.x[:n*tinyT]), r.y, n, n)
	if stats[device.StatCount] != n*tinyT {
		t.Fatalf("counted %v positions, want %d", stats[device.StatCount], n*tinyT)
	}
	if got := float64(stats[device.StatLossSum]) / (n * tinyT); math.Abs(got-want) > 1e-5*math.Max(1, want) {
		t.Errorf("loss on %d of %d rows %.8g, the host's %.8g", n, b, got, want)
	}
}

package nn_test

import (
	"math"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// netRig is a net's model, step and one staged batch on the CPU device.
type netRig struct {
	dev  device.Device
	s    device.Stream
	m    *nn.Model
	st   *nn.NetStep
	in   nn.Batch
	x    []float32
	y    []int
	lay  nn.Layout
	arch nn.Arch
}

func newNetRig(t testing.TB, dev device.Device, net nn.Net, opt nn.Optimizer, b int, seed uint64) *netRig {
	t.Helper()
	arch, err := net.Resolve()
	must(t, err)
	if dev == nil {
		d, err := cpu.Open(cpu.Config{})
		must(t, err)
		t.Cleanup(func() { _ = d.Close() })
		dev = d
	}
	s, err := dev.NewStream()
	must(t, err)
	m, err := nn.NewNetModel(dev, arch, opt, seed)
	must(t, err)
	sizes, err := nn.NetWorkspaceSizes(arch, b)
	must(t, err)
	var bufs []device.Buffer
	for _, n := range sizes {
		x, err := dev.Alloc(n)
		must(t, err)
		bufs = append(bufs, x)
	}
	st, err := nn.NewNetStep(m, bufs, b)
	must(t, err)
	lay := nn.NewLayout(m.Spec, b)
	rec := make([]float32, lay.Len)
	r := &netRig{dev: dev, s: s, m: m, st: st, lay: lay, arch: arch}
	for i := range lay.XLen {
		rec[lay.X+i] = float32(math.Sin(float64(i)*0.37+0.1) + 0.3*math.Cos(float64(i)*1.3))
	}
	classes := arch.Out.Size()
	for row := range b {
		r.y = append(r.y, (row*7+1)%classes)
		if net.Loss == nn.LossMSE {
			rec[lay.Y+row*classes+r.y[row]] = 1
		} else {
			rec[lay.Y+row] = float32(r.y[row])
		}
		rec[lay.Mask+row] = 1
	}
	copy(rec[lay.Hyper:], []float32{0, 1, 1})
	r.x = slices.Clone(rec[lay.X : lay.X+lay.XLen])
	batch, err := dev.Alloc(lay.Len)
	must(t, err)
	must(t, dev.Upload(batch, rec))
	r.in = lay.Views(batch)
	must(t, s.Fill(st.W.TrainStats, 0))
	must(t, s.Fill(st.W.EvalStats, 0))
	return r
}

func (r *netRig) download(t *testing.T, b device.Buffer) []float32 {
	t.Helper()
	must(t, r.s.Synchronize())
	v := make([]float32, b.Len())
	must(t, r.dev.Download(v, b))
	return v
}

// smallCNN has every layer the finite-difference test covers: conv,
// batchnorm (of images and of vectors), relu, maxpool, residual blocks
// (one that only reshapes), avgpool, gelu, global_avgpool, tanh, flatten
// and linear.
func smallCNN() nn.Net {
	return nn.Net{Input: nn.Shape{2, 6, 6}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Conv(4, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU(), nn.MaxPool(2),
		nn.Residual(nn.Conv(4, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU()),
		nn.AvgPool(2).WithStride(1), nn.Conv(5, 2).WithPadding(1), nn.GELU(), nn.GlobalAvgPool(), nn.Tanh(),
		nn.Flatten(), nn.Residual(nn.Flatten()), nn.Linear(6), nn.BatchNorm(), nn.Linear(3),
	}}
}

// TestNetGradientsMatchFiniteDifferences: the step's gradients of a small
// net (every parameter) against central differences of the loss, the
// loss computed on the host in float64 by an independent forward pass
// (netLoss64), so the differences carry no float32 rounding: with h =
// 1e-6 their truncation error is O(h²) and their rounding about
// 1e-16/h = 1e-10, far below the float32 step's own error, which is
// relative (about 1e-6 per operation over some hundred terms). Hence the
// tolerance: 1e-4 of the largest gradient plus 1e-3 of each one. The
// host loss checks the forward pass as well (to 1e-5).
func TestNetGradientsMatchFiniteDifferences(t *testing.T) {
	for _, c := range []struct {
		name string
		net  nn.Net
		b    int
	}{
		{"cnn", smallCNN(), 4},
		{"vector", nn.Net{Input: nn.Shape{5}, Loss: nn.LossMSE, Layers: []nn.LayerSpec{
			nn.Linear(7), nn.Tanh(), nn.BatchNorm(), nn.Residual(nn.Linear(7), nn.ReLU()),
			nn.GELU(), nn.Residual(nn.Residual(nn.Linear(7))), nn.Linear(3)}}, 6},
		{"sigmoid", nn.Net{Input: nn.Shape{2, 3, 3}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
			nn.Sigmoid(), nn.Conv(3, 2), nn.Sigmoid(), nn.Residual(nn.Conv(3, 1), nn.Sigmoid()),
			nn.Flatten(), nn.Linear(5), nn.Sigmoid(), nn.Linear(3)}}, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := nn.DefaultOptimizer()
			opt.ClipNorm = 0
			r := newNetRig(t, nil, c.net, opt, c.b, 11)
			must(t, r.s.Fill(r.st.W.Grads, float32(math.NaN())))
			must(t, r.st.Train(r.s, r.in))
			grads := r.download(t, r.st.W.Grads)
			stats := r.download(t, r.st.W.TrainStats)
			params, _, err := r.m.Snapshot()
			must(t, err)
			p64 := toFloat64(params)
			x64 := toFloat64(r.x)

			loss := netLoss64(r.arch, p64, x64, r.y, c.b)
			if got := float64(stats[device.StatLossSum]) / float64(c.b); math.Abs(got-loss) > 1e-5*math.Max(1, loss) {
				t.Fatalf("the step's loss %.8g, the host's %.8g", got, loss)
			}
			const h = 1e-6
			fd := make([]float64, len(params))
			scale := 0.0
			for i := range params {
				keep := p64[i]
				p64[i] = keep + h
				up := netLoss64(r.arch, p64, x64, r.y, c.b)
				p64[i] = keep - h
				down := netLoss64(r.arch, p64, x64, r.y, c.b)
				p64[i] = keep
				fd[i] = (up - down) / (2 * h)
				scale = math.Max(scale, math.Abs(fd[i]))
			}
			bad, worst := 0, 0.0
			for i, g := range grads {
				worst = math.Max(worst, math.Abs(float64(g)-fd[i])/(1e-4*scale+1e-3*math.Abs(fd[i])))
				if math.IsNaN(float64(g)) {
					t.Fatalf("gradient %d was not written", i)
				}
				if math.Abs(float64(g)-fd[i]) > 1e-4*scale+1e-3*math.Abs(fd[i]) {
					if bad++; bad <= 5 {
						t.Errorf("parameter %d: gradient %.7g, central difference %.7g", i, g, fd[i])
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d gradients differ (largest %.3g)", bad, len(grads), scale)
			}
			t.Logf("%d gradients, largest %.3g; the worst difference is %.2f of the tolerance", len(grads), scale, worst)
		})
	}
}

// netLoss64 is the mean loss of arch on n examples x with labels y, in
// float64, batchnorm with batch statistics (training mode), written from
// the layer definitions in docs/models.md, independently of the step.
func netLoss64(a nn.Arch, p, x []float64, y []int, n int) float64 {
	out := forward64(a.Layers, p, x, n)
	k := a.Out.Size()
	loss := 0.0
	for r := range n {
		row := out[r*k : (r+1)*k]
		if a.Net.Loss == nn.LossMSE {
			for j, v := range row {
				t := 0.0
				if j == y[r] {
					t = 1
				}
				loss += (v - t) * (v - t) / float64(k)
			}
			continue
		}
		m := slices.Max(row)
		s := 0.0
		for _, v := range row {
			s += math.Exp(v - m)
		}
		loss += m + math.Log(s) - row[y[r]]
	}
	return loss / float64(n)
}

func forward64(nodes []nn.Node, p, x []float64, n int) []float64 {
	for _, nd := range nodes {
		x = layer64(nd, p, x, n)
	}
	return x
}

func layer64(nd nn.Node, p, x []float64, n int) []float64 {
	if y, ok := seqLayer64(nd, p, x, n); ok {
		return y
	}
	in, out := nd.In, nd.Out
	act := func(f func(float64) float64) []float64 {
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = f(v)
		}
		return y
	}
	switch nd.Layer.Kind {
	case nn.KindLinear:
		fi, fo := in.Size(), out.Size()
		y := make([]float64, n*fo)
		for r := range n {
			for o := range fo {
				s := p[nd.BiasAt+o]
				for i := range fi {
					s += x[r*fi+i] * p[nd.WeightAt+i*fo+o]
				}
				y[r*fo+o] = s
			}
		}
		return y
	case nn.KindConv:
		H, W, C, K, st, pad, O := in.H(), in.W(), in.C(), nd.Layer.Kernel, nd.Layer.Stride, nd.Layer.Padding, out.C()
		OH, OW := out.H(), out.W()
		y := make([]float64, n*OH*OW*O)
		for b := range n {
			for oh := range OH {
				for ow := range OW {
					for o := range O {
						s := p[nd.BiasAt+o]
						for kh := range K {
							for kw := range K {
								h, w := oh*st-pad+kh, ow*st-pad+kw
								if h < 0 || h >= H || w < 0 || w >= W {
									continue
								}
								for c := range C {
									s += x[((b*H+h)*W+w)*C+c] * p[nd.WeightAt+((kh*K+kw)*C+c)*O+o]
								}
							}
						}
						y[((b*OH+oh)*OW+ow)*O+o] = s
					}
				}
			}
		}
		return y
	case nn.KindMaxPool, nn.KindAvgPool, nn.KindGlobalAvgPool:
		H, W, C := in.H(), in.W(), in.C()
		K, st, pad := nd.Layer.Kernel, nd.Layer.Stride, nd.Layer.Padding
		if nd.Layer.Kind == nn.KindGlobalAvgPool {
			K, st, pad = H, 1, 0
		}
		OH, OW := out.H(), out.W()
		y := make([]float64, n*OH*OW*C)
		for b := range n {
			for oh := range OH {
				for ow := range OW {
					for c := range C {
						m, s := math.Inf(-1), 0.0
						for kh := range K {
							for kw := range K {
								h, w := oh*st-pad+kh, ow*st-pad+kw
								if h < 0 || h >= H || w < 0 || w >= W {
									continue
								}
								v := x[((b*H+h)*W+w)*C+c]
								m, s = math.Max(m, v), s+v
							}
						}
						if nd.Layer.Kind != nn.KindMaxPool {
							m = s / float64(K*K)
						}
						y[((b*OH+oh)*OW+ow)*C+c] = m
					}
				}
			}
		}
		return y
	case nn.KindBatchNorm:
		C := in.Channels()
		rows := len(x) / C
		y := make([]float64, len(x))
		for c := range C {
			mean, v := 0.0, 0.0
			for r := range rows {
				mean += x[r*C+c]
			}
			mean /= float64(rows)
			for r := range rows {
				d := x[r*C+c] - mean
				v += d * d
			}
			v /= float64(rows)
			inv := 1 / math.Sqrt(v+float64(float32(nd.Layer.Eps)))
			for r := range rows {
				y[r*C+c] = p[nd.WeightAt+c]*(x[r*C+c]-mean)*inv + p[nd.BiasAt+c]
			}
		}
		return y
	case nn.KindReLU:
		return act(func(v float64) float64 { return math.Max(v, 0) })
	case nn.KindTanh:
		return act(math.Tanh)
	case nn.KindSigmoid:
		return act(func(v float64) float64 { return 1 / (1 + math.Exp(-v)) })
	case nn.KindGELU:
		return act(func(v float64) float64 {
			return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
		})
	case nn.KindResidual:
		y := forward64(nd.Body, p, x, n)
		sum := make([]float64, len(x))
		for i := range x {
			sum[i] = x[i] + y[i]
		}
		return sum
	}
	return x // flatten
}

// capture records f on s as one graph and instantiates it.
func capture(t *testing.T, dev device.Device, s device.Stream, f func(device.Stream) error) device.Exec {
	t.Helper()
	must(t, s.BeginCapture(device.CaptureGlobal))
	ferr := f(s)
	g, err := s.EndCapture()
	must(t, ferr)
	must(t, err)
	exec, err := dev.Instantiate(g)
	must(t, err)
	must(t, g.Destroy())
	t.Cleanup(func() { _ = exec.Destroy() })
	return exec
}

// netState is everything a step changes, to compare runs bit for bit.
func netState(t *testing.T, r *netRig) [][]float32 {
	t.Helper()
	must(t, r.s.Synchronize())
	params, state, err := r.m.Snapshot()
	must(t, err)
	running, err := r.m.SnapshotRunning()
	must(t, err)
	out := [][]float32{params, running, r.download(t, r.st.W.TrainStats), r.download(t, r.st.W.EvalStats)}
	return append(out, state...)
}

func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// dropoutCNN is smallCNN with dropout on an image and on a vector.
func dropoutCNN() nn.Net {
	n := smallCNN()
	n.Layers = slices.Insert(n.Layers, 4, nn.Dropout(0.25))
	n.Layers = slices.Insert(n.Layers, len(n.Layers)-1, nn.Dropout(0.5))
	return n
}

// TestNetReplayEqualsEager: training steps and evaluations replayed from
// one captured graph each end with the same bits as the same steps run
// eagerly: parameters, optimizer state, running statistics, the dropout
// generator's offset and the accumulators.
func TestNetReplayEqualsEager(t *testing.T) {
	sigmoid := nn.Net{Input: nn.Shape{2, 4, 4}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Conv(3, 3).WithPadding(1), nn.Sigmoid(), nn.Residual(nn.Sigmoid(), nn.Conv(3, 1)),
		nn.Flatten(), nn.Linear(6), nn.Sigmoid(), nn.Dropout(0.25), nn.Linear(3)}}
	for _, c := range []struct {
		name string
		net  nn.Net
	}{{"cnn", dropoutCNN()}, {"sigmoid", sigmoid}} {
		t.Run(c.name, func(t *testing.T) { replayEqualsEager(t, c.net) })
	}
}

func replayEqualsEager(t *testing.T, net nn.Net) {
	opt := nn.DefaultOptimizer()
	opt.TotalSteps = 10
	hyper := make([]float32, device.HyperLen)
	opt.Hyper(1, hyper)
	eager := newNetRig(t, nil, net, opt, 4, 3)
	graph := newNetRig(t, nil, net, opt, 4, 3)
	for _, r := range []*netRig{eager, graph} {
		must(t, r.dev.Upload(r.in.Hyper, hyper))
	}
	if !sameBits(netState(t, eager), netState(t, graph)) {
		t.Fatal("the two models start apart")
	}
	train := capture(t, graph.dev, graph.s, func(s device.Stream) error { return graph.st.Train(s, graph.in) })
	eval := capture(t, graph.dev, graph.s, func(s device.Stream) error { return graph.st.Eval(s, graph.in) })
	for step := range 4 {
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
	if train.Nodes() < 40 {
		t.Errorf("the training graph has %d nodes; the whole step should be in it", train.Nodes())
	}
}

// TestNetDropout: each step draws a new mask (the generator's offset
// advances inside the step, captured or not), a step from the same
// running state draws the same mask, and evaluation is the identity.
func TestNetDropout(t *testing.T) {
	net := nn.Net{Input: nn.Shape{16}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Linear(32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4)}}
	opt := nn.DefaultOptimizer()
	opt.ClipNorm = 0
	r := newNetRig(t, nil, net, opt, 8, 5)
	start, err := r.m.SnapshotRunning()
	must(t, err)
	if len(start) != device.RNGLen {
		t.Fatalf("running state of %d values, want the generator's %d words", len(start), device.RNGLen)
	}
	// The gradients of the last layer's weights see the mask through its
	// input: rows of dropped units are zero.
	grads := func() []float32 {
		must(t, r.st.Train(r.s, r.in))
		return r.download(t, r.st.W.Grads)
	}
	first := grads()
	second := grads()
	if slices.Equal(first, second) {
		t.Fatal("two steps drew the same dropout mask")
	}
	must(t, r.m.RestoreRunning(start))
	if again := grads(); !slices.Equal(first, again) {
		t.Fatal("a step from the same generator state drew another mask")
	}
	after, err := r.m.SnapshotRunning()
	must(t, err)
	if off := math.Float32bits(after[device.RNGOffsetLo]); off != (8*32+3)/4 {
		t.Errorf("the offset after a step is %d, want one draw of %d counters", off, (8*32+3)/4)
	}

	// Evaluation: the same logits as the net without dropout, whose
	// parameters are laid out and initialised alike.
	plain := net
	plain.Layers = slices.Delete(slices.Clone(net.Layers), 2, 3)
	q := newNetRig(t, r.dev, plain, opt, 8, 5)
	params, _, err := r.m.Snapshot()
	must(t, err)
	must(t, q.dev.Upload(q.m.Params, params))
	got, err := r.st.Forward(r.s, r.in.X)
	must(t, err)
	want, err := q.st.Forward(q.s, q.in.X)
	must(t, err)
	if g, w := r.download(t, got), q.download(t, want); !slices.Equal(g, w) {
		t.Errorf("evaluation with dropout %v differs from without %v", g[:4], w[:4])
	}
	if now, _ := r.m.SnapshotRunning(); !slices.Equal(now, after) {
		t.Error("evaluation advanced the generator")
	}
}

// TestNetBatchNormRunningStatistics: a training step updates the running
// statistics as PyTorch does (momentum 0.1, unbiased variance) and
// evaluation normalises with them, changing nothing.
func TestNetBatchNormRunningStatistics(t *testing.T) {
	net := nn.Net{Input: nn.Shape{3}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{nn.BatchNorm(), nn.Linear(2)}}
	opt := nn.DefaultOptimizer()
	const b = 5
	r := newNetRig(t, nil, net, opt, b, 2)
	must(t, r.st.Train(r.s, r.in))
	running, err := r.m.SnapshotRunning()
	must(t, err)
	for c := range 3 {
		mean, v := 0.0, 0.0
		for row := range b {
			mean += float64(r.x[row*3+c])
		}
		mean /= b
		for row := range b {
			d := float64(r.x[row*3+c]) - mean
			v += d * d
		}
		v /= b - 1
		if wm, wv := 0.1*mean, 0.9+0.1*v; math.Abs(float64(running[c])-wm) > 1e-6 || math.Abs(float64(running[3+c])-wv) > 1e-6 {
			t.Errorf("channel %d: running mean %g variance %g, want %g %g", c, running[c], running[3+c], wm, wv)
		}
	}
	// Evaluation with chosen statistics.
	set := []float32{0.5, -1, 2, 4, 0.25, 1}
	must(t, r.m.RestoreRunning(set))
	params, _, err := r.m.Snapshot()
	must(t, err)
	logits, err := r.st.Forward(r.s, r.in.X)
	must(t, err)
	got := r.download(t, logits)
	for row := range b {
		for o := range 2 {
			nd := r.arch.Layers[1]
			want := float64(params[nd.BiasAt+o])
			for c := range 3 {
				bn := r.arch.Layers[0]
				xh := (float64(r.x[row*3+c]) - float64(set[c])) / math.Sqrt(float64(set[3+c])+1e-5)
				xh = float64(params[bn.WeightAt+c])*xh + float64(params[bn.BiasAt+c])
				want += xh * float64(params[nd.WeightAt+c*2+o])
			}
			if math.Abs(float64(got[row*2+o])-want) > 1e-5*math.Max(1, math.Abs(want)) {
				t.Errorf("row %d logit %d: %g, want %g", row, o, got[row*2+o], want)
			}
		}
	}
	if now, _ := r.m.SnapshotRunning(); !slices.Equal(now, set) {
		t.Errorf("evaluation changed the running statistics: %v", now)
	}
}

// TestNetWorkspaceSizes: a flatten is a view, an activation after a conv
// is fused into it, and the sizes scale with the batch.
func TestNetWorkspaceSizes(t *testing.T) {
	arch, err := smallCNN().Resolve()
	must(t, err)
	one, err := nn.NetWorkspaceSizes(arch, 1)
	must(t, err)
	four, err := nn.NetWorkspaceSizes(arch, 4)
	must(t, err)
	if len(one) != len(four) || one[0] != arch.Params || four[0] != arch.Params {
		t.Fatalf("sizes %v and %v", one, four)
	}
	for i := nn.NetWorkspaceHead; i < len(one); i++ {
		if four[i] != 4*one[i] && four[i] != one[i] {
			t.Errorf("buffer %d: %d at batch 1, %d at batch 4", i, one[i], four[i])
		}
	}
	if _, err := nn.NetWorkspaceSizes(arch, 0); err == nil {
		t.Error("batch 0 accepted")
	}
}

// BenchmarkNetStep is one eager training step of a small CNN (a conv
// block, a residual block and a linear classifier: 72,426 parameters) at
// batch 64 on the CPU device.
func BenchmarkNetStep(b *testing.B) {
	net := nn.Net{Input: nn.Shape{1, 28, 28}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU(), nn.MaxPool(2),
		nn.Residual(nn.Conv(32, 3).WithPadding(1), nn.BatchNorm(), nn.ReLU()),
		nn.Flatten(), nn.Linear(10)}}
	r := newNetRig(b, nil, net, nn.DefaultOptimizer(), 64, 1)
	for b.Loop() {
		if err := r.st.Train(r.s, r.in); err != nil {
			b.Fatal(err)
		}
		if err := r.s.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "samples/s")
}

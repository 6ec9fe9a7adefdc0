package nn_test

import (
	"math"
	"testing"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSchedule(t *testing.T) {
	o := nn.DefaultOptimizer()
	o.LR, o.WarmupSteps, o.TotalSteps, o.MinLRRatio = 0.1, 10, 110, 0.01
	for _, c := range []struct {
		t    int
		want float64
	}{
		{1, 0.01}, {5, 0.05}, {10, 0.1}, {60, 0.001 + 0.099*0.5}, {110, 0.001}, {500, 0.001},
	} {
		if got := o.LRAt(c.t); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("LRAt(%d) = %g, want %g", c.t, got, c.want)
		}
	}
	h := make([]float32, device.HyperLen)
	o.Hyper(3, h)
	if math.Abs(float64(h[device.HyperBias1])-(1-math.Pow(0.9, 3))) > 1e-6 || math.Abs(float64(h[device.HyperBias2])-(1-math.Pow(0.999, 3))) > 1e-6 {
		t.Errorf("bias corrections %v", h)
	}
}

func TestSpecAndLayout(t *testing.T) {
	s := nn.Spec{Inputs: 784, Hidden: []int{256, 128}, Outputs: 10, Act: device.ActGELU, Loss: nn.LossCrossEntropy}
	must(t, s.Validate())
	if n := s.ParamCount(); n != 784*256+256+256*128+128+128*10+10 {
		t.Fatalf("ParamCount = %d", n)
	}
	l := nn.NewLayout(s, 64)
	if l.Len != 64*784+64+64+device.HyperLen || l.Hyper != 64*784+128 {
		t.Fatalf("layout %+v", l)
	}
	for _, bad := range []nn.Spec{
		{Inputs: 0, Outputs: 10, Loss: nn.LossCrossEntropy},
		{Inputs: 4, Outputs: 1, Loss: nn.LossCrossEntropy},
		{Inputs: 4, Hidden: []int{0}, Outputs: 2, Loss: nn.LossCrossEntropy},
		{Inputs: 4, Outputs: 2, Loss: "hinge"},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func TestInitIsSeededAndScaled(t *testing.T) {
	s := nn.Spec{Inputs: 400, Hidden: []int{300}, Outputs: 10, Act: device.ActReLU, Loss: nn.LossCrossEntropy}
	a, b, c := nn.InitParams(s, 1), nn.InitParams(s, 1), nn.InitParams(s, 2)
	if nn.ParamsSHA256(a) != nn.ParamsSHA256(b) || nn.ParamsSHA256(a) == nn.ParamsSHA256(c) {
		t.Fatal("initialisation is not a function of the seed")
	}
	l := s.Layers()[0]
	var sum2 float64
	for _, v := range a[l.WeightAt : l.WeightAt+l.In*l.Out] {
		sum2 += float64(v) * float64(v)
	}
	std := math.Sqrt(sum2 / float64(l.In*l.Out))
	if want := math.Sqrt(2.0 / 400); math.Abs(std-want)/want > 0.05 {
		t.Errorf("Kaiming std = %g, want about %g", std, want)
	}
	for _, v := range a[l.BiasAt : l.BiasAt+l.Out] {
		if v != 0 {
			t.Fatal("biases are not zero")
		}
	}
}

// lossAt runs a forward pass and returns the mean loss over valid rows.
func lossAt(t *testing.T, dev device.Device, s device.Stream, st *nn.Step, in nn.Batch) float64 {
	t.Helper()
	must(t, s.Fill(st.W.EvalStats, 0))
	must(t, st.Eval(s, in))
	must(t, s.Synchronize())
	stats := make([]float32, device.StatsLen)
	must(t, dev.Download(stats, st.W.EvalStats))
	return float64(stats[device.StatLossSum]) / float64(stats[device.StatCount])
}

// TestGradientsMatchFiniteDifferences checks the backward pass of both
// losses and both activations against central differences of the loss.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	for _, c := range []struct {
		act  device.Activation
		loss nn.Loss
	}{
		{device.ActGELU, nn.LossCrossEntropy}, {device.ActReLU, nn.LossCrossEntropy}, {device.ActGELU, nn.LossMSE},
	} {
		t.Run(c.act.String()+"/"+string(c.loss), func(t *testing.T) {
			dev, err := cpu.Open(cpu.Config{})
			must(t, err)
			defer dev.Close()
			s, err := dev.NewStream()
			must(t, err)
			spec := nn.Spec{Inputs: 5, Hidden: []int{7, 6}, Outputs: 3, Act: c.act, Loss: c.loss}
			opt := nn.DefaultOptimizer()
			opt.ClipNorm = 0
			m, err := nn.NewModel(dev, spec, opt, 3)
			must(t, err)
			const b = 4
			var bufs []device.Buffer
			for _, n := range nn.WorkspaceSizes(spec, b) {
				x, err := dev.Alloc(n)
				must(t, err)
				bufs = append(bufs, x)
			}
			ws, err := nn.NewWorkspace(spec, bufs)
			must(t, err)
			st := &nn.Step{M: m, W: ws, Batch: b}
			lay := nn.NewLayout(spec, b)
			rec := make([]float32, lay.Len)
			for i := range lay.XLen {
				rec[lay.X+i] = float32(math.Sin(float64(i)*0.77)) * 1.5
			}
			for r := range b {
				cls := (r * 2) % 3
				if c.loss == nn.LossMSE {
					rec[lay.Y+r*3+cls] = 1
				} else {
					rec[lay.Y+r] = float32(cls)
				}
				rec[lay.Mask+r] = 1
			}
			rec[lay.Mask+b-1] = 0 // one padding row must not contribute
			batch, err := dev.Alloc(lay.Len)
			must(t, err)
			must(t, dev.Upload(batch, rec))
			in := lay.Views(batch)

			// Analytic gradients: forward, loss and backward, without the update.
			must(t, st.Eval(s, in))
			must(t, s.Synchronize())
			grads := gradients(t, dev, s, st, in)

			params, _, err := m.Snapshot()
			must(t, err)
			const h = 1e-2
			checked := 0
			for i := 0; i < len(params); i += 7 {
				p := append([]float32(nil), params...)
				p[i] = params[i] + h
				must(t, dev.Upload(m.Params, p))
				up := lossAt(t, dev, s, st, in)
				p[i] = params[i] - h
				must(t, dev.Upload(m.Params, p))
				down := lossAt(t, dev, s, st, in)
				num := (up - down) / (2 * h)
				if diff := math.Abs(num - float64(grads[i])); diff > 2e-3+0.02*math.Abs(num) {
					t.Errorf("param %d: analytic %g, numeric %g", i, grads[i], num)
				}
				checked++
			}
			if checked < 10 {
				t.Fatalf("checked only %d parameters", checked)
			}
		})
	}
}

// gradients runs one training step with a zero learning rate and returns
// the gradient buffer. The buffer holds NaN before the step: Train does
// not zero it, so every gradient must be written by the backward pass.
func gradients(t *testing.T, dev device.Device, s device.Stream, st *nn.Step, in nn.Batch) []float32 {
	t.Helper()
	hyper := []float32{0, 1, 1}
	must(t, dev.Upload(in.Hyper, hyper))
	must(t, s.Fill(st.W.Grads, float32(math.NaN())))
	before, _, err := st.M.Snapshot()
	must(t, err)
	must(t, st.Train(s, in))
	must(t, s.Synchronize())
	after, _, err := st.M.Snapshot()
	must(t, err)
	g := make([]float32, st.W.Grads.Len())
	must(t, dev.Download(g, st.W.Grads))
	for i, v := range g {
		if math.IsNaN(float64(v)) {
			t.Fatalf("gradient %d of %d was not written by the step (it still holds the NaN put there before)", i, len(g))
		}
	}
	if nn.ParamsSHA256(before) != nn.ParamsSHA256(after) {
		t.Fatal("a zero learning rate changed the parameters")
	}
	return g
}

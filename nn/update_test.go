package nn_test

import (
	"math"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// updateFixture is a model, its step and a staged batch on the CPU device,
// with a twin model without clipping that shares the workspace, for
// reading raw gradients at any parameters.
type updateFixture struct {
	dev  device.Device
	s    device.Stream
	st   *nn.Step // the model under test
	raw  *nn.Step // same spec and optimizer kind, ClipNorm 0
	in   nn.Batch
	spec nn.Spec
}

func newUpdateFixture(t *testing.T, opt nn.Optimizer) *updateFixture {
	t.Helper()
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	s, err := dev.NewStream()
	must(t, err)
	spec := nn.Spec{Inputs: 5, Hidden: []int{7, 6}, Outputs: 3, Act: device.ActGELU, Loss: nn.LossCrossEntropy}
	const b = 4
	m, err := nn.NewModel(dev, spec, opt, 5)
	must(t, err)
	noClip := opt
	noClip.ClipNorm = 0
	twin, err := nn.NewModel(dev, spec, noClip, 5)
	must(t, err)
	var bufs []device.Buffer
	for _, n := range nn.WorkspaceSizes(spec, b) {
		x, err := dev.Alloc(n)
		must(t, err)
		bufs = append(bufs, x)
	}
	ws, err := nn.NewWorkspace(spec, bufs)
	must(t, err)
	lay := nn.NewLayout(spec, b)
	rec := make([]float32, lay.Len)
	for i := range lay.XLen {
		rec[lay.X+i] = float32(math.Sin(float64(i)*0.61+0.3)) * 2
	}
	for r := range b {
		rec[lay.Y+r] = float32((r + 1) % 3)
		rec[lay.Mask+r] = 1
	}
	batch, err := dev.Alloc(lay.Len)
	must(t, err)
	must(t, dev.Upload(batch, rec))
	return &updateFixture{dev: dev, s: s, st: &nn.Step{M: m, W: ws, Batch: b}, raw: &nn.Step{M: twin, W: ws, Batch: b},
		in: lay.Views(batch), spec: spec}
}

// rawGradients returns the unclipped gradients at params, in float64.
func (f *updateFixture) rawGradients(t *testing.T, params []float32) []float64 {
	t.Helper()
	_, state, err := f.raw.M.Snapshot()
	must(t, err)
	must(t, f.raw.M.Restore(params, state))
	g := gradients(t, f.dev, f.s, f.raw, f.in)
	out := make([]float64, len(g))
	for i, v := range g {
		out[i] = float64(v)
	}
	return out
}

// closeTo reports whether got is within float32 rounding (1e-6 relative)
// of want, relative to mag, the magnitude of the terms want was made of.
func closeTo(got float32, want, mag float64) bool {
	return math.Abs(float64(got)-want) <= 1e-6*mag+1e-30
}

// reference is one optimizer step on the host in float64, following the
// update rules documented at device.Kernels (SGDMomentum, AdamW), with
// the learning rate and bias corrections as staged in hyper. It returns
// the new parameters and state, and for each the magnitude of the terms
// (for the tolerance).
func reference(o nn.Optimizer, hyper []float32, p, g []float64, state [][]float64) (np []float64, ns [][]float64, pmag []float64, smag [][]float64) {
	// The kernels take the settings as float32, as the step passes them.
	f32 := func(x float64) float64 { return float64(float32(x)) }
	lr := float64(hyper[device.HyperLR])
	wd, mom, beta1, beta2, eps := f32(o.WeightDecay), f32(o.Momentum), f32(o.Beta1), f32(o.Beta2), f32(o.Eps)
	n := len(p)
	np, pmag = make([]float64, n), make([]float64, n)
	for range state {
		ns, smag = append(ns, make([]float64, n)), append(smag, make([]float64, n))
	}
	for i := range p {
		switch o.Kind {
		case nn.SGD:
			// g' = g + wd*p; vel = momentum*vel + g';
			// p -= lr*(g' + momentum*vel) with Nesterov, else p -= lr*vel.
			gp := g[i] + wd*p[i]
			gmag := math.Abs(g[i]) + wd*math.Abs(p[i])
			vel := mom*state[0][i] + gp
			vmag := mom*math.Abs(state[0][i]) + gmag
			upd, umag := vel, vmag
			if o.Nesterov {
				upd, umag = gp+mom*vel, gmag+mom*vmag
			}
			ns[0][i], smag[0][i] = vel, vmag
			np[i], pmag[i] = p[i]-lr*upd, math.Abs(p[i])+lr*umag
		case nn.AdamW:
			// m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
			// p -= lr*(wd*p + (m/bias1)/(sqrt(v/bias2)+eps)).
			b1, b2 := float64(hyper[device.HyperBias1]), float64(hyper[device.HyperBias2])
			m := beta1*state[0][i] + (1-beta1)*g[i]
			mmag := beta1*math.Abs(state[0][i]) + (1-beta1)*math.Abs(g[i])
			v := beta2*state[1][i] + (1-beta2)*g[i]*g[i]
			den := math.Sqrt(v/b2) + eps
			step := (m / b1) / den
			ns[0][i], smag[0][i] = m, mmag
			ns[1][i], smag[1][i] = v, v
			np[i] = p[i] - lr*(wd*p[i]+step)
			pmag[i] = math.Abs(p[i]) + lr*(wd*math.Abs(p[i])+(mmag/b1)/den)
		}
	}
	return np, ns, pmag, smag
}

func toFloat64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// TestUpdateMatchesHostReference runs three training steps per optimizer
// setting and checks each against the documented rule computed on the
// host: the gradient norm, clipping (when active) to ClipNorm, and the
// SGD (momentum, Nesterov, weight decay) or AdamW (bias correction,
// decoupled weight decay) update of the parameters and the state, with
// the scheduled learning rate.
func TestUpdateMatchesHostReference(t *testing.T) {
	sgd := nn.DefaultOptimizer()
	sgd.Kind, sgd.LR, sgd.Momentum, sgd.WeightDecay, sgd.ClipNorm = nn.SGD, 0.5, 0.9, 0.05, 0
	adamw := nn.DefaultOptimizer()
	adamw.LR, adamw.WeightDecay, adamw.ClipNorm = 0.05, 0.05, 0
	nesterov := sgd
	nesterov.Nesterov = true
	for _, c := range []struct {
		name string
		opt  nn.Optimizer
		clip float64 // ClipNorm as a fraction of the first gradient norm; 0: none
	}{
		{"sgd", sgd, 0},
		{"sgd-nesterov", nesterov, 0},
		{"sgd-clip", sgd, 0.3},
		{"sgd-nesterov-clip", nesterov, 0.3},
		{"adamw", adamw, 0},
		{"adamw-clip", adamw, 0.3},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.opt
			o.WarmupSteps, o.TotalSteps, o.MinLRRatio = 2, 6, 0.1 // steps 1-3: lr/2, lr, cosine
			if c.clip > 0 {
				// The threshold follows from the first step's gradients.
				probe := newUpdateFixture(t, o)
				p0, _, err := probe.st.M.Snapshot()
				must(t, err)
				var ss float64
				for _, g := range probe.rawGradients(t, p0) {
					ss += g * g
				}
				o.ClipNorm = c.clip * math.Sqrt(ss)
			}
			f := newUpdateFixture(t, o)
			clipped := 0
			for step := 1; step <= 3; step++ {
				params, state, err := f.st.M.Snapshot()
				must(t, err)
				g := f.rawGradients(t, params)
				var ss float64
				for _, v := range g {
					ss += v * v
				}
				norm := math.Sqrt(ss)
				if o.ClipNorm > 0 && norm > o.ClipNorm {
					clipped++
					scale := o.ClipNorm / (norm + 1e-6)
					for i := range g {
						g[i] *= scale
					}
				}
				hyper := make([]float32, device.HyperLen)
				o.Hyper(step, hyper)
				st64 := make([][]float64, len(state))
				for i := range state {
					st64[i] = toFloat64(state[i])
				}
				wantP, wantS, pmag, smag := reference(o, hyper, toFloat64(params), g, st64)

				must(t, f.dev.Upload(f.in.Hyper, hyper))
				must(t, f.st.Train(f.s, f.in))
				must(t, f.s.Synchronize())
				gotP, gotS, err := f.st.M.Snapshot()
				must(t, err)

				if o.ClipNorm > 0 {
					got := make([]float32, 1)
					must(t, f.dev.Download(got, f.st.W.Norm))
					if !closeTo(got[0], norm, norm) {
						t.Fatalf("step %d: gradient norm buffer %g, host norm %g", step, got[0], norm)
					}
					grads := make([]float32, f.st.W.Grads.Len())
					must(t, f.dev.Download(grads, f.st.W.Grads))
					for i := range grads {
						if !closeTo(grads[i], g[i], math.Abs(g[i])) {
							t.Fatalf("step %d: clipped gradient %d is %g, want %g (norm %g, clip %g)", step, i, grads[i], g[i], norm, o.ClipNorm)
						}
					}
				}
				bad := 0
				for i := range gotP {
					if !closeTo(gotP[i], wantP[i], pmag[i]) {
						if bad++; bad <= 3 {
							t.Errorf("step %d: param %d is %.9g, want %.9g (was %.9g)", step, i, gotP[i], wantP[i], params[i])
						}
					}
				}
				for k := range gotS {
					for i := range gotS[k] {
						if !closeTo(gotS[k][i], wantS[k][i], smag[k][i]) {
							if bad++; bad <= 3 {
								t.Errorf("step %d: state %d[%d] is %.9g, want %.9g", step, k, i, gotS[k][i], wantS[k][i])
							}
						}
					}
				}
				if bad > 0 {
					t.Fatalf("step %d (lr %g): %d values differ from the documented %s rule", step, hyper[device.HyperLR], bad, o.Kind)
				}
			}
			if c.clip > 0 && clipped == 0 {
				t.Fatal("clipping was never active")
			}
		})
	}
}

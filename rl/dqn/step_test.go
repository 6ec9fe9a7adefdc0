package dqn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hostQ is the MLP's forward pass in float64 on the host: the reference
// the device step's loss is checked against.
func hostQ(spec nn.Spec, params []float32, x []float32) []float64 {
	in := make([]float64, len(x))
	for i, v := range x {
		in[i] = float64(v)
	}
	layers := spec.Layers()
	for li, l := range layers {
		out := make([]float64, l.Out)
		for o := range l.Out {
			s := float64(params[l.BiasAt+o])
			for i := range l.In {
				s += in[i] * float64(params[l.WeightAt+i*l.Out+o])
			}
			if li < len(layers)-1 {
				s = max(s, 0)
			}
			out[o] = s
		}
		in = out
	}
	return in
}

func argmax(v []float64) int {
	best := 0
	for j, x := range v {
		if x > v[best] {
			best = j
		}
	}
	return best
}

type minibatch struct {
	obs, next  []float32
	actions    []int
	rewards    []float32
	terminated []bool
}

func randomBatch(rng *rand.Rand, b, o, a int) minibatch {
	m := minibatch{obs: make([]float32, b*o), next: make([]float32, b*o), actions: make([]int, b),
		rewards: make([]float32, b), terminated: make([]bool, b)}
	for i := range m.obs {
		m.obs[i], m.next[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	for r := range b {
		m.actions[r], m.rewards[r], m.terminated[r] = rng.IntN(a), float32(rng.IntN(3)), rng.IntN(4) == 0
	}
	return m
}

// refLoss is the Double DQN Huber loss of a minibatch, averaged over rows,
// computed on the host in float64.
func refLoss(spec nn.Spec, online, target []float32, m minibatch, gamma, delta float64) float64 {
	o := spec.Inputs
	var sum float64
	for r := range m.actions {
		next := m.next[r*o : (r+1)*o]
		y := float64(m.rewards[r])
		if !m.terminated[r] {
			y += gamma * hostQ(spec, target, next)[argmax(hostQ(spec, online, next))]
		}
		d := hostQ(spec, online, m.obs[r*o:(r+1)*o])[m.actions[r]] - y
		if math.Abs(d) <= delta {
			sum += 0.5 * d * d
		} else {
			sum += delta * (math.Abs(d) - 0.5*delta)
		}
	}
	return sum / float64(len(m.actions))
}

type learnerState struct {
	params, target, stats []float32
	opt                   [][]float32
}

// TestQStepCapturedEqualsEager runs six training steps with two target
// syncs eagerly, then the same from the same start with the step
// captured once and replayed: every parameter, the target, the optimizer
// state and the statistics must have the same bits. The first step's loss
// is checked against the host's float64 Double DQN loss.
func TestQStepCapturedEqualsEager(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()

	cfg := DefaultConfig()
	cfg.Hidden = []int{32, 16}
	spec, err := cfg.Spec()
	must(t, err)
	const b = 16
	const gamma, delta = 0.9, 1.0
	online, err := nn.NewModel(dev, spec, cfg.Optimizer, 3)
	must(t, err)
	defer online.Free()
	target, err := dev.Alloc(spec.ParamCount())
	must(t, err)
	initTarget := nn.InitParams(spec, 4)
	var bufs []device.Buffer
	for _, n := range StepSizes(spec, b) {
		buf, err := dev.Alloc(n)
		must(t, err)
		bufs = append(bufs, buf)
	}
	st, err := NewQStep(dev, online, target, b, gamma, delta, bufs)
	must(t, err)
	layout := NewLayout(spec, b)
	input, err := dev.Alloc(layout.Len)
	must(t, err)
	in := layout.Views(input)

	rng := rand.New(rand.NewPCG(5, 6))
	var batches []minibatch
	var records [][]float32
	for step := 1; step <= 6; step++ {
		m := randomBatch(rng, b, spec.Inputs, spec.Outputs)
		rec := make([]float32, layout.Len)
		must(t, layout.Fill(rec, m.obs, m.next, m.actions, m.rewards, m.terminated))
		cfg.Optimizer.Hyper(step, rec[layout.Hyper:])
		batches, records = append(batches, m), append(records, rec)
	}
	p0, s0, err := online.Snapshot()
	must(t, err)

	run := func(step func() error) learnerState {
		must(t, online.Restore(p0, s0))
		must(t, dev.Upload(target, initTarget))
		must(t, dev.Upload(st.Stats(), make([]float32, device.StatsLen)))
		var firstLoss float32
		for i, rec := range records {
			must(t, dev.Upload(input, rec))
			must(t, step())
			if (i+1)%3 == 0 {
				must(t, st.SyncTarget(s))
			}
			must(t, s.Synchronize())
			if i == 0 {
				stats := make([]float32, device.StatsLen)
				must(t, dev.Download(stats, st.Stats()))
				firstLoss = stats[device.StatLossSum] / stats[device.StatCount]
			}
		}
		var out learnerState
		out.params, out.opt, err = online.Snapshot()
		must(t, err)
		out.target, out.stats = make([]float32, target.Len()), make([]float32, device.StatsLen)
		must(t, dev.Download(out.target, target))
		must(t, dev.Download(out.stats, st.Stats()))
		want := refLoss(spec, p0, initTarget, batches[0], gamma, delta)
		if math.Abs(float64(firstLoss)-want) > 1e-4*want {
			t.Errorf("first step's loss %v, the host's Double DQN loss is %v", firstLoss, want)
		}
		return out
	}
	eager := run(func() error { return st.Train(s, in) })

	must(t, s.BeginCapture(device.CaptureGlobal))
	trainErr := st.Train(s, in)
	g, err := s.EndCapture()
	must(t, trainErr)
	must(t, err)
	defer g.Destroy()
	exec, err := dev.Instantiate(g)
	must(t, err)
	defer exec.Destroy()
	replayed := run(func() error { return s.Launch(exec) })

	same := func(a, b []float32) bool {
		return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
	}
	if !same(eager.params, replayed.params) || !same(eager.target, replayed.target) || !same(eager.stats, replayed.stats) ||
		!same(eager.opt[0], replayed.opt[0]) || !same(eager.opt[1], replayed.opt[1]) {
		t.Fatalf("the replayed steps differ from the eager ones (stats %v and %v)", eager.stats, replayed.stats)
	}
	if same(eager.params, p0) || !same(eager.target, eager.params) {
		t.Fatal("the steps left the parameters as they were, or the last sync left the target unlike them")
	}
	if eager.stats[device.StatCount] != 6*b {
		t.Fatalf("stats count %v, want %d", eager.stats[device.StatCount], 6*b)
	}
	t.Logf("%d nodes captured; mean loss over six steps %.4f", g.Nodes(), eager.stats[0]/eager.stats[2])
}

func TestSoftUpdateTarget(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()
	cfg := DefaultConfig()
	cfg.Hidden = []int{8}
	spec, err := cfg.Spec()
	must(t, err)
	online, err := nn.NewModel(dev, spec, cfg.Optimizer, 1)
	must(t, err)
	defer online.Free()
	target, err := dev.Alloc(spec.ParamCount())
	must(t, err)
	tp := nn.InitParams(spec, 2)
	must(t, dev.Upload(target, tp))
	var bufs []device.Buffer
	for _, n := range StepSizes(spec, 4) {
		b, err := dev.Alloc(n)
		must(t, err)
		bufs = append(bufs, b)
	}
	st, err := NewQStep(dev, online, target, 4, 0.99, 1, bufs)
	must(t, err)
	must(t, st.SoftUpdateTarget(s, 0.25))
	must(t, s.Synchronize())
	got := make([]float32, target.Len())
	must(t, dev.Download(got, target))
	op := nn.InitParams(spec, 1)
	for i := range got {
		if want := float32(0.75)*tp[i] + 0.25*op[i]; math.Abs(float64(got[i]-want)) > 1e-6 {
			t.Fatalf("target[%d] = %v, want 0.75*%v + 0.25*%v", i, got[i], tp[i], op[i])
		}
	}
}

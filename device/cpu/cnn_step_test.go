package cpu_test

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
)

// cnnRig is the example CNN's training step (examples/cnn.yaml,
// nn.ExampleCNN, the default optimizer) on a CPU device, in a step engine
// of one slot, as run_graph_bench runs it.
type cnnRig struct {
	s      device.Stream
	step   *nn.NetStep
	in     nn.Batch
	engine *graphs.Engine
}

func newCNNRig(t testing.TB, threads, batch int) *cnnRig {
	t.Helper()
	d := openWith(t, cpu.Config{Threads: threads})
	arch, err := nn.ExampleCNN().Resolve()
	must(t, err)
	opt := nn.DefaultOptimizer()
	opt.TotalSteps = 100
	model, err := nn.NewNetModel(d, arch, opt, 1)
	must(t, err)
	t.Cleanup(func() { _ = model.Free() })
	sizes, err := nn.NetWorkspaceSizes(arch, batch)
	must(t, err)
	pool := graphs.NewPool()
	t.Cleanup(func() { _ = pool.Close() })
	lease, err := pool.Acquire(d, nn.NetSignature(arch, opt, batch), sizes)
	must(t, err)
	t.Cleanup(func() { _ = lease.Release() })
	step, err := nn.NewNetStep(model, lease.Workspace(), batch)
	must(t, err)

	spec := arch.Outline()
	layout := nn.NewLayout(spec, batch)
	in := uploadBatch(t, d, layout, batch, opt)

	s, err := d.NewStream()
	must(t, err)
	t.Cleanup(func() { _ = s.Destroy() })
	train, _ := step.Accumulators()
	must(t, s.Fill(train, 0))
	engine, err := graphs.NewEngine(graphs.EngineConfig{Lease: lease, Guard: graphs.GuardFunc(func(f func() error) error { return f() }),
		Slots: []graphs.Slot{{ID: 0, Step: func(s device.Stream) error { return step.Train(s, in) }}}})
	must(t, err)
	return &cnnRig{s: s, step: step, in: in, engine: engine}
}

// TestReplayedCNNStepAllocatesNothing: the example CNN's replayed step,
// its image kernels and batch normalisation included, allocates nothing.
func TestReplayedCNNStepAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a CNN step at batch 64 takes tens of milliseconds")
	}
	r := newCNNRig(t, 2, 64)
	_, err := r.engine.Run(r.s, 0)
	must(t, err)
	_, err = r.engine.Capture(r.s)
	must(t, err)
	allocs := testing.AllocsPerRun(3, func() {
		res, err := r.engine.Run(r.s, 0)
		if err != nil || !res.Replayed {
			t.Fatalf("step: %+v, %v; want a replay", res, err)
		}
		must(t, r.s.Synchronize())
	})
	if allocs != 0 {
		t.Errorf("a replayed CNN step allocates %.1f times, want 0", allocs)
	}
}

// BenchmarkReplayedCNNStep times the example CNN's replayed training step
// at batch 64 and 256 on 2 threads, launched and waited for: the tolaria
// side of run_graph_bench --peer-model cnn, for go test -cpuprofile.
func BenchmarkReplayedCNNStep(b *testing.B) {
	for _, batch := range []int{64, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			r := newCNNRig(b, 2, batch)
			for range 2 {
				_, err := r.engine.Run(r.s, 0)
				must(b, err)
			}
			_, err := r.engine.Capture(r.s)
			must(b, err)
			for b.Loop() {
				_, err := r.engine.Run(r.s, 0)
				must(b, err)
				must(b, r.s.Synchronize())
			}
		})
	}
}

// TestCNNKernelProfile prints where an eager CNN step's time goes, kernel
// by kernel, each synchronised on its own (so the total is above a
// replayed step's): set TOLARIA_CNN_PROFILE to the batch size, e.g.
// TOLARIA_CNN_PROFILE=64 go test -run TestCNNKernelProfile -v ./device/cpu/.
// The figures are the median of 10 steps after 2 warm-up steps.
func TestCNNKernelProfile(t *testing.T) {
	batch, err := strconv.Atoi(os.Getenv("TOLARIA_CNN_PROFILE"))
	if err != nil {
		t.Skip("TOLARIA_CNN_PROFILE is not a batch size")
	}
	r := newCNNRig(t, 2, batch)
	ts := &timedStream{Stream: r.s, times: map[string][]time.Duration{}}
	const steps = 12
	for i := range steps {
		ts.record = i >= 2
		must(t, r.step.Train(ts, r.in))
		must(t, r.s.Synchronize())
	}
	type row struct {
		name string
		ms   float64
	}
	var rows []row
	var total float64
	for name, d := range ts.times {
		per := len(d) / (steps - 2)
		// Kernels of one name run per times a step; sum each step's.
		sums := make([]time.Duration, steps-2)
		for i, v := range d {
			sums[i/per] += v
		}
		slices.Sort(sums)
		ms := float64(sums[len(sums)/2]) / 1e6
		rows = append(rows, row{name, ms})
		total += ms
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.ms, a.ms) })
	for _, r := range rows {
		t.Logf("%8.3f ms  %s", r.ms, r.name)
	}
	t.Logf("%8.3f ms  total", total)
}

// timedStream times the kernels of the CNN's step, each on its own.
type timedStream struct {
	device.Stream
	record bool
	times  map[string][]time.Duration
}

func (s *timedStream) time(name string, f func() error) error {
	if err := s.Synchronize(); err != nil {
		return err
	}
	start := time.Now()
	if err := f(); err != nil {
		return err
	}
	if err := s.Synchronize(); err != nil {
		return err
	}
	if s.record {
		s.times[name] = append(s.times[name], time.Since(start))
	}
	return nil
}

func (s *timedStream) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b device.Buffer, beta float32, c device.Buffer) error {
	name := fmt.Sprintf("Gemm %d×%d×%d", m, k, n)
	if transA {
		name += " Aᵀ"
	}
	if transB {
		name += " Bᵀ"
	}
	return s.time(name, func() error { return s.Stream.Gemm(transA, transB, m, n, k, alpha, a, b, beta, c) })
}

func (s *timedStream) BiasAct(act device.Activation, rows, cols int, z, bias, y device.Buffer) error {
	return s.time(fmt.Sprintf("BiasAct %v %d×%d", act, rows, cols), func() error { return s.Stream.BiasAct(act, rows, cols, z, bias, y) })
}

func (s *timedStream) ActGrad(act device.Activation, rows, cols int, z, dy, dz device.Buffer) error {
	return s.time(fmt.Sprintf("ActGrad %v %d×%d", act, rows, cols), func() error { return s.Stream.ActGrad(act, rows, cols, z, dy, dz) })
}

func (s *timedStream) ColSum(rows, cols int, x device.Buffer, beta float32, out device.Buffer) error {
	return s.time(fmt.Sprintf("ColSum %d×%d", rows, cols), func() error { return s.Stream.ColSum(rows, cols, x, beta, out) })
}

func (s *timedStream) Axpy(alpha float32, x, y device.Buffer) error {
	return s.time(fmt.Sprintf("Axpy %d", x.Len()), func() error { return s.Stream.Axpy(alpha, x, y) })
}

func (s *timedStream) AdamW(p, g, m, v, hyper device.Buffer, beta1, beta2, eps, weightDecay float32) error {
	return s.time("AdamW", func() error { return s.Stream.AdamW(p, g, m, v, hyper, beta1, beta2, eps, weightDecay) })
}

func (s *timedStream) Im2Col(cs device.ConvShape, x, cols device.Buffer) error {
	return s.time(fmt.Sprintf("Im2Col %d×%d×%d", cs.H, cs.W, cs.C), func() error { return s.Stream.Im2Col(cs, x, cols) })
}

func (s *timedStream) Col2Im(cs device.ConvShape, dcols, dx device.Buffer) error {
	return s.time(fmt.Sprintf("Col2Im %d×%d×%d", cs.H, cs.W, cs.C), func() error { return s.Stream.Col2Im(cs, dcols, dx) })
}

func (s *timedStream) MaxPool(ps device.PoolShape, x, y, arg device.Buffer) error {
	return s.time(fmt.Sprintf("MaxPool %d×%d×%d", ps.H, ps.W, ps.C), func() error { return s.Stream.MaxPool(ps, x, y, arg) })
}

func (s *timedStream) MaxPoolGrad(ps device.PoolShape, dy, arg, dx device.Buffer) error {
	return s.time(fmt.Sprintf("MaxPoolGrad %d×%d×%d", ps.H, ps.W, ps.C), func() error { return s.Stream.MaxPoolGrad(ps, dy, arg, dx) })
}

func (s *timedStream) BatchNormTrain(rows, cols int, eps, momentum float32, x, params, stats, xhat, y, running device.Buffer) error {
	return s.time(fmt.Sprintf("BatchNormTrain %d×%d", rows, cols), func() error {
		return s.Stream.BatchNormTrain(rows, cols, eps, momentum, x, params, stats, xhat, y, running)
	})
}

func (s *timedStream) BatchNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams device.Buffer) error {
	return s.time(fmt.Sprintf("BatchNormGrad %d×%d", rows, cols), func() error {
		return s.Stream.BatchNormGrad(rows, cols, dy, xhat, params, stats, dx, dparams)
	})
}

func (s *timedStream) Dropout(p float32, rng, x, y, mask device.Buffer) error {
	return s.time("Dropout", func() error { return s.Stream.Dropout(p, rng, x, y, mask) })
}

func (s *timedStream) Mul(x, y, z device.Buffer) error {
	return s.time(fmt.Sprintf("Mul %d", x.Len()), func() error { return s.Stream.Mul(x, y, z) })
}

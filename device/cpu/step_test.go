package cpu_test

import (
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
)

// stepRig is the default MLP's training step (784-256-128-10, GELU,
// AdamW with clipping) at batch 64 on a CPU device, in a step engine of
// one slot, as the trainer runs it.
type stepRig struct {
	d      device.Device
	s      device.Stream
	model  *nn.Model
	engine *graphs.Engine
}

func newStepRig(t testing.TB, threads int) *stepRig {
	t.Helper()
	d := openWith(t, cpu.Config{Threads: threads})
	spec := nn.Spec{Inputs: 784, Hidden: []int{256, 128}, Outputs: 10, Act: device.ActGELU, Loss: nn.LossCrossEntropy}
	opt := nn.DefaultOptimizer()
	opt.TotalSteps = 100
	const batch = 64
	model, err := nn.NewModel(d, spec, opt, 1)
	must(t, err)
	t.Cleanup(func() { _ = model.Free() })
	pool := graphs.NewPool()
	t.Cleanup(func() { _ = pool.Close() })
	lease, err := pool.Acquire(d, nn.Signature(spec, opt, batch), nn.WorkspaceSizes(spec, batch))
	must(t, err)
	t.Cleanup(func() { _ = lease.Release() })
	ws, err := nn.NewWorkspace(spec, lease.Workspace())
	must(t, err)
	step := nn.Step{M: model, W: ws, Batch: batch}

	// One batch record: random inputs, labels 0..9, all rows counted, the
	// hyper-parameters of step 1.
	layout := nn.NewLayout(spec, batch)
	in := uploadBatch(t, d, layout, batch, opt)

	s, err := d.NewStream()
	must(t, err)
	t.Cleanup(func() { _ = s.Destroy() })
	must(t, s.Fill(ws.TrainStats, 0))
	engine, err := graphs.NewEngine(graphs.EngineConfig{Lease: lease, Guard: graphs.GuardFunc(func(f func() error) error { return f() }),
		Slots: []graphs.Slot{{ID: 0, Step: func(s device.Stream) error { return step.Train(s, in) }}}})
	must(t, err)
	return &stepRig{d: d, s: s, model: model, engine: engine}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestReplayedStepAllocatesNothing: once captured, a training step of the
// default MLP, launched and waited for, allocates nothing in Go: not the
// launch, not the stream's queue, not the kernels and their split across
// the device's threads.
func TestReplayedStepAllocatesNothing(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		r := newStepRig(t, threads)
		_, err := r.engine.Run(r.s, 0) // warm-up, eager
		must(t, err)
		_, err = r.engine.Capture(r.s)
		must(t, err)
		allocs := testing.AllocsPerRun(20, func() {
			res, err := r.engine.Run(r.s, 0)
			if err != nil || !res.Replayed {
				t.Fatalf("step: %+v, %v; want a replay", res, err)
			}
			must(t, r.s.Synchronize())
		})
		if allocs != 0 {
			t.Errorf("%d threads: a replayed step allocates %.1f times, want 0", threads, allocs)
		}
	}
}

// TestStepSameBitsEveryRun: the same steps on two devices with the same
// thread count end with the same parameters, bit for bit, however the
// parts of each kernel were scheduled; the kernels other than GEMM give
// the same bits at any thread count.
func TestStepSameBitsEveryRun(t *testing.T) {
	params := func(threads int) []float32 {
		r := newStepRig(t, threads)
		for range 5 {
			_, err := r.engine.Run(r.s, 0)
			must(t, err)
		}
		must(t, r.s.Synchronize())
		p, _, err := r.model.Snapshot()
		must(t, err)
		return p
	}
	for _, threads := range []int{1, 2, 3} {
		a, b := params(threads), params(threads)
		if nn.ParamsSHA256(a) != nn.ParamsSHA256(b) {
			t.Errorf("%d threads: two runs of the same steps end with different parameters", threads)
		}
	}
}

// BenchmarkReplayedStep times a replayed training step of the default MLP
// at batch 64, launched and waited for, at the machine's thread count.
func BenchmarkReplayedStep(b *testing.B) {
	r := newStepRig(b, 0)
	for range 2 {
		if _, err := r.engine.Run(r.s, 0); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := r.engine.Capture(r.s); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := r.engine.Run(r.s, 0); err != nil {
			b.Fatal(err)
		}
		if err := r.s.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}

// uploadBatch uploads one batch record: random inputs, labels 0..9, all
// rows counted, the hyper-parameters of step 1; it returns its views.
func uploadBatch(t testing.TB, d device.Device, layout nn.Layout, batch int, opt nn.Optimizer) nn.Batch {
	t.Helper()
	rec := make([]float32, layout.Len)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range layout.XLen {
		rec[layout.X+i] = rng.Float32()
	}
	for r := range batch {
		rec[layout.Y+r] = float32(r % 10)
		rec[layout.Mask+r] = 1
	}
	opt.Hyper(1, rec[layout.Hyper:])
	buf, err := d.Alloc(layout.Len)
	must(t, err)
	t.Cleanup(func() { _ = d.Free(buf) })
	must(t, d.Upload(buf, rec))
	return layout.Views(buf)
}

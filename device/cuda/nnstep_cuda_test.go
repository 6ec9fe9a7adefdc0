//go:build cuda

package cuda

import (
	"math"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// nnRun is the training step tolaria runs (nn.Step: zero-grad, forward,
// loss, backward, clipping, AdamW) on one device, over fixed batches.
type nnRun struct {
	dev   device.Device
	s     device.Stream
	step  *nn.Step
	lay   nn.Layout
	batch device.Buffer
}

func newNNRun(t *testing.T, dev device.Device, spec nn.Spec, opt nn.Optimizer, b int) *nnRun {
	t.Helper()
	m, err := nn.NewModel(dev, spec, opt, 11)
	check(t, "NewModel", err)
	var bufs []device.Buffer
	for _, n := range nn.WorkspaceSizes(spec, b) {
		x, err := dev.Alloc(n)
		check(t, "workspace Alloc", err)
		bufs = append(bufs, x)
	}
	ws, err := nn.NewWorkspace(spec, bufs)
	check(t, "NewWorkspace", err)
	lay := nn.NewLayout(spec, b)
	batch, err := dev.Alloc(lay.Len)
	check(t, "batch Alloc", err)
	return &nnRun{dev: dev, s: mustStream(t, dev), step: &nn.Step{M: m, W: ws, Batch: b}, lay: lay, batch: batch}
}

// record is batch number i of the test's fixed data, with the optimizer's
// hyper-parameters for step i, in the layout the stager copies.
func record(spec nn.Spec, opt nn.Optimizer, lay nn.Layout, i int) []float32 {
	rec := make([]float32, lay.Len)
	for j := range lay.XLen {
		rec[lay.X+j] = float32(math.Sin(float64(j)*0.37+float64(i))) * 1.2
	}
	for r := range lay.Batch {
		rec[lay.Y+r] = float32((r + i) % spec.Outputs)
		rec[lay.Mask+r] = 1
	}
	opt.Hyper(i+1, rec[lay.Hyper:lay.Hyper+device.HyperLen]) // Hyper counts steps from 1
	return rec
}

// Ten steps of tolaria's real training step (nn.Step, the one the trainer
// captures) on the GPU stay within a relative error of 1e-5 of the CPU
// reference device on the parameters.
func TestTrainingStepMatchesCPUDevice(t *testing.T) {
	const steps, b = 10, 32
	spec := nn.Spec{Inputs: 784, Hidden: []int{256, 128}, Outputs: 10, Act: device.ActGELU, Loss: nn.LossCrossEntropy}
	opt := nn.DefaultOptimizer()
	opt.TotalSteps, opt.WarmupSteps = 100, 2
	gpu := openTest(t)
	ref, err := cpu.Open(cpu.Config{})
	check(t, "cpu.Open", err)
	t.Cleanup(func() { ref.Close() })
	g, c := newNNRun(t, gpu, spec, opt, b), newNNRun(t, ref, spec, opt, b)
	for i := range steps {
		rec := record(spec, opt, g.lay, i)
		for _, r := range []*nnRun{g, c} {
			check(t, "Synchronize", r.s.Synchronize())
			check(t, "Upload batch", r.dev.Upload(r.batch, rec))
			check(t, "Train", r.step.Train(r.s, r.lay.Views(r.batch)))
		}
	}
	check(t, "GPU Synchronize", g.s.Synchronize())
	check(t, "CPU Synchronize", c.s.Synchronize())
	gp, _, err := g.step.M.Snapshot()
	check(t, "GPU Snapshot", err)
	cp, _, err := c.step.M.Snapshot()
	check(t, "CPU Snapshot", err)
	init := nn.InitParams(spec, 11)
	var diff, norm, moved float64
	worst, at := 0.0, 0
	for i := range cp {
		d := float64(gp[i]) - float64(cp[i])
		diff += d * d
		norm += float64(cp[i]) * float64(cp[i])
		m := float64(cp[i]) - float64(init[i])
		moved += m * m
		if a := math.Abs(d); a > worst || math.IsNaN(d) {
			worst, at = a, i
		}
	}
	rel := math.Sqrt(diff / norm)
	t.Logf("relative error of the parameters after %d steps: %.3g (largest difference %.3g at %d: GPU %g, CPU %g); moved %.3g from init",
		steps, rel, worst, at, gp[at], cp[at], math.Sqrt(moved/norm))
	if moved == 0 {
		t.Fatal("the parameters did not move: the comparison proves nothing")
	}
	if !(rel <= 1e-5) {
		t.Errorf("GPU and CPU parameters differ by %.3g relative (||gpu-cpu|| / ||cpu||), want at most 1e-5", rel)
	}
}

package trainer_test

import (
	"context"
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestSGDGraphsMatchEager: with SGD (Nesterov momentum, weight decay) the
// replayed step ends with the parameters of the eager one, and they are
// not AdamW's.
func TestSGDGraphsMatchEager(t *testing.T) {
	adamw := run(t, smallConfig(t)).ParamsSHA256
	for _, nesterov := range []bool{false, true} {
		cfg := smallConfig(t)
		cfg.Optimizer.Kind, cfg.Optimizer.LR, cfg.Optimizer.Momentum = nn.SGD, 0.05, 0.9
		cfg.Optimizer.Nesterov, cfg.Optimizer.WeightDecay = nesterov, 1e-3
		g := run(t, cfg)
		cfg.EnableGraphs = false
		e := run(t, cfg)
		if !g.GraphEnabled || g.GraphReplays != g.Steps-cfg.WarmupBatches || e.GraphReplays != 0 {
			t.Fatalf("nesterov=%t: graphs run replayed %d of %d steps, eager run %d", nesterov, g.GraphReplays, g.Steps, e.GraphReplays)
		}
		if g.ParamsSHA256 != e.ParamsSHA256 {
			t.Errorf("nesterov=%t: SGD params differ: graphs %s eager %s", nesterov, g.ParamsSHA256, e.ParamsSHA256)
		}
		if g.ParamsSHA256 == adamw {
			t.Errorf("nesterov=%t: SGD ended with AdamW's parameters", nesterov)
		}
		if g.TestAccuracy < 0.5 {
			t.Errorf("nesterov=%t: SGD test accuracy %.3f on an easy synthetic set", nesterov, g.TestAccuracy)
		}
	}
}

// hyperSpy is a device whose streams read back, before each AdamW update,
// the hyper-parameters the update is about to use (eager runs only: it
// synchronises the stream).
type hyperSpy struct {
	device.Device
	host device.HostBuffer
	mu   sync.Mutex
	seen [][device.HyperLen]float32
}

type hyperSpyStream struct {
	device.Stream
	dev *hyperSpy
}

func (d *hyperSpy) NewStream() (device.Stream, error) {
	s, err := d.Device.NewStream()
	return hyperSpyStream{s, d}, err
}

func (s hyperSpyStream) AdamW(p, g, m, v, hyper device.Buffer, beta1, beta2, eps, weightDecay float32) error {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.Stream.CopyDtoH(d.host, hyper); err != nil {
		return err
	}
	if err := s.Stream.Synchronize(); err != nil {
		return err
	}
	d.seen = append(d.seen, [device.HyperLen]float32(d.host.Data()))
	return s.Stream.AdamW(p, g, m, v, hyper, beta1, beta2, eps, weightDecay)
}

// TestStagedHyperFollowsTheSchedule: the update of the training step with
// sequence number seq reads the learning rate and bias corrections that
// the optimizer prescribes for step seq+1, in warm-up and in the cosine
// decay alike.
func TestStagedHyperFollowsTheSchedule(t *testing.T) {
	cfg := smallConfig(t)
	cfg.EnableGraphs = false
	dev := &hyperSpy{Device: openCPU(t)}
	h, err := dev.AllocHost(device.HyperLen)
	if err != nil {
		t.Fatal(err)
	}
	dev.host = h
	t.Cleanup(func() { _ = dev.FreeHost(h) })
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if len(dev.seen) != sum.Steps {
		t.Fatalf("%d updates seen for %d steps", len(dev.seen), sum.Steps)
	}
	o := cfg.Optimizer
	if o.WarmupSteps < 2 || o.TotalSteps <= o.WarmupSteps+2 {
		t.Fatalf("schedule %+v has no warm-up or no decay to test", o)
	}
	distinct := map[float32]bool{}
	for seq, got := range dev.seen {
		var want [device.HyperLen]float32
		o.Hyper(seq+1, want[:])
		if got != want {
			t.Fatalf("step %d (seq %d) read hyper-parameters %v, the optimizer prescribes %v (lr %g)", seq+1, seq, got, want, o.LRAt(seq+1))
		}
		distinct[got[device.HyperLR]] = true
	}
	if len(distinct) < sum.Steps/2 {
		t.Fatalf("only %d distinct learning rates over %d steps", len(distinct), sum.Steps)
	}
}

//go:build cuda

package cuda

import (
	"context"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// trainOnGPU runs a short synthetic job through the real trainer: loader
// goroutines, the stager and its capture guard, capture, replay, eval.
func trainOnGPU(t *testing.T, graphsOn bool) trainer.Summary {
	t.Helper()
	s := job.Default()
	s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.EnableGraphs = "cuda", "synthetic", 2048, 3, []int{128, 64}, graphsOn
	s.Loaders = 2
	train, test, err := s.LoadData()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := s.Config(train, test, job.Options{})
	if err != nil {
		t.Fatal(err)
	}
	shared := trainer.NewShared()
	defer shared.Close()
	sum, err := trainer.Run(context.Background(), openTest(t), shared, cfg)
	if err != nil {
		t.Fatalf("training on the GPU: %v", err)
	}
	return sum
}

// TestTrainerCapturesWhileStagingRuns: tolaria's own loader and stager keep
// running through the global-mode capture on the GPU without invalidating
// it, every later step replays, and graphs change no bit of the result.
func TestTrainerCapturesWhileStagingRuns(t *testing.T) {
	g := trainOnGPU(t, true)
	if !g.GraphEnabled || g.Captures == 0 || len(g.Fallbacks) != 0 {
		t.Fatalf("graphs on the GPU: enabled=%v captures=%d fallbacks=%v", g.GraphEnabled, g.Captures, g.Fallbacks)
	}
	if g.GraphReplays != g.Steps-2 {
		t.Fatalf("replays %d of %d steps (2 warm-up)", g.GraphReplays, g.Steps)
	}
	e := trainOnGPU(t, false)
	if g.ParamsSHA256 != e.ParamsSHA256 {
		t.Fatalf("graph replay and eager differ on the GPU: %s vs %s", g.ParamsSHA256, e.ParamsSHA256)
	}
	t.Logf("test accuracy %.4f, capture %.3f ms cold", g.TestAccuracy, g.CaptureColdSeconds*1e3)
}

// TestBillAgainstTheDriver: the bill a worker sends before allocating,
// next to what cuMemGetInfo says set-up took, for the built-in models
// (the default MLP and the bench's tiny preset). On the emulated driver,
// which counts exactly what cuMemAlloc hands out, the bill is within 10%
// above it; a real driver maps memory in pages of megabytes (and other
// processes share the GPU), so on a GPU the figures are only logged.
func TestBillAgainstTheDriver(t *testing.T) {
	emulated := strings.Contains(openTest(t).Description(), "emulated")
	for _, m := range []struct {
		name   string
		hidden []int
		batch  int
	}{{"default hidden layers", []int{256, 128}, 64}, {"tiny", nil, 8}} {
		t.Run(m.name, func(t *testing.T) {
			s := job.Default()
			s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.BatchSize, s.EnableGraphs, s.MaxSteps =
				"cuda", "synthetic", 512, 1, m.hidden, m.batch, true, 3
			train, test, err := s.LoadData()
			if err != nil {
				t.Fatal(err)
			}
			var bill *trainer.MemoryBill
			obs := trainer.ObserverFunc(func(x trainer.Measurement) {
				if b, ok := x.(trainer.MemoryBill); ok {
					bill = &b
				}
			})
			cfg, err := s.Config(train, test, job.Options{Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			shared := trainer.NewShared()
			defer shared.Close()
			if _, err := trainer.Run(context.Background(), openTest(t), shared, cfg); err != nil {
				t.Fatal(err)
			}
			if bill == nil || bill.Source != "driver" {
				t.Fatalf("memory bill %+v, want one measured by the driver", bill)
			}
			est := bill.Estimate.DeviceBytes()
			t.Logf("bill %v; cuMemGetInfo: set-up took %d bytes; pinned %d (estimate %d)", bill.Estimate, bill.ActualDevice, bill.ActualPinned, bill.Estimate.PinnedHost)
			if emulated && (est < bill.ActualDevice || float64(est) > 1.1*float64(bill.ActualDevice)) {
				t.Errorf("estimate %d bytes, the driver counted %d: want the estimate within 10%% above", est, bill.ActualDevice)
			}
		})
	}
}

// parkAt parks a run once, before the step after the given count.
type parkAt struct {
	dev      *Device
	at       int
	steps    int
	parked   bool
	inUse    int64
	released int64
}

func (p *parkAt) Observe(m trainer.Measurement) {
	if _, ok := m.(trainer.Stepped); ok {
		p.steps++
	}
}
func (p *parkAt) ParkRequested() bool { return p.steps == p.at && !p.parked }
func (p *parkAt) Parked(_ context.Context, released int64) error {
	p.parked = true
	p.released, p.inUse = released, p.dev.MemoryStats().DeviceInUse
	return nil
}
func (p *parkAt) Unparked() {}

// TestParkOnTheGPU: a run parked mid-epoch after its graphs were captured
// frees its device memory (the pool's in-use count drops to nothing, and
// the driver's count of used memory drops) and, set up and captured again,
// ends with exactly the parameters of the run never parked: the graphs
// captured after the unpark use only the new buffers (freed blocks the
// emulated driver poisons with NaN would show). The model's weights are
// megabytes: an H100's driver keeps the memory of small allocations (a
// model of 64 hidden units, each buffer well under 2 MiB) after they are
// freed, so that cuMemGetInfo did not move when such a run parked.
func TestParkOnTheGPU(t *testing.T) {
	train := func(p *parkAt) trainer.Summary {
		s := job.Default()
		s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.EnableGraphs = "cuda", "synthetic", 640, 2, []int{1024}, true
		tr, te, err := s.LoadData()
		if err != nil {
			t.Fatal(err)
		}
		opts := job.Options{}
		dev := openTest(t)
		if p != nil {
			p.dev = dev
			opts.Observer, opts.Parker = p, p
		}
		cfg, err := s.Config(tr, te, opts)
		if err != nil {
			t.Fatal(err)
		}
		shared := trainer.NewShared()
		defer shared.Close()
		sum, err := trainer.Run(context.Background(), dev, shared, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	twin := train(nil)
	p := &parkAt{at: 7}
	sum := train(p)
	if !p.parked {
		t.Fatalf("the run never parked (asked to before step %d)", p.at+1)
	}
	if p.released <= 0 || p.inUse != 0 {
		t.Fatalf("parked: the driver counts %d bytes released, the pool %d still in use; want everything released", p.released, p.inUse)
	}
	if sum.ParamsSHA256 != twin.ParamsSHA256 || sum.Captures <= twin.Captures {
		t.Fatalf("parked: params %s after %d captures; never parked: %s after %d", sum.ParamsSHA256, sum.Captures, twin.ParamsSHA256, twin.Captures)
	}
	t.Logf("released %d bytes; %d captures (never parked: %d)", p.released, sum.Captures, twin.Captures)
}

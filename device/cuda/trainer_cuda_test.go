//go:build cuda

package cuda

import (
	"context"
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

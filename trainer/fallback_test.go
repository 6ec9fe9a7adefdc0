package trainer_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

// sabotaged is a device whose first captures are broken the way the
// predecessor's were: another goroutine pins memory while the capture is
// in progress.
type sabotaged struct {
	device.Device
	failures atomic.Int32
}

type sabotagedStream struct {
	device.Stream
	dev *sabotaged
}

func (d *sabotaged) NewStream() (device.Stream, error) {
	s, err := d.Device.NewStream()
	return sabotagedStream{s, d}, err
}

func (s sabotagedStream) BeginCapture(m device.CaptureMode) error {
	if err := s.Stream.BeginCapture(m); err != nil {
		return err
	}
	if s.dev.failures.Add(-1) >= 0 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if h, err := s.dev.AllocHost(16); err == nil {
				_ = s.dev.FreeHost(h)
			}
		}()
		<-done
	}
	return nil
}

func TestCaptureFailureFallsBackAndRetries(t *testing.T) {
	cfg := smallConfig(t)
	eager := cfg
	eager.EnableGraphs = false
	want := run(t, eager).ParamsSHA256

	dev := &sabotaged{Device: openCPU(t)}
	dev.failures.Store(1)
	var failed []trainer.Event
	cfg.Observer = eventSink{f: func(e trainer.Event) {
		if e.Kind == trainer.EventFallback {
			failed = append(failed, e)
		}
	}}
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	steps, _ := trainer.StepsPerEpoch(cfg)
	// Epoch 1 ran eagerly after the failed capture; epoch 2 captured again.
	if !sum.GraphEnabled || sum.GraphReplays != 2*steps {
		t.Fatalf("replays %d, want %d (epochs 2 and 3)", sum.GraphReplays, 2*steps)
	}
	// Epoch 1's evaluation ran eagerly too, each batch counted.
	evalSteps := evalStepsPerEpoch(t, cfg)
	if got := sum.Fallbacks[graphs.ReasonCaptureFailed]; got != 1+steps-cfg.WarmupBatches+evalSteps {
		t.Fatalf("capture_failed fallbacks %d, want the failure plus %d eager steps and %d eager evaluation batches",
			got, steps-cfg.WarmupBatches, evalSteps)
	}
	if sum.EvalEagerBatches != evalSteps || sum.EvalReplays != (cfg.Epochs-1)*evalSteps {
		t.Fatalf("evaluation: %d eager, %d replayed; want epoch 1 eager (%d) and the rest replayed",
			sum.EvalEagerBatches, sum.EvalReplays, evalSteps)
	}
	if len(failed) == 0 || failed[0].Fields["stage"] != "capture" {
		t.Fatalf("no fallback event with stage capture: %v", failed)
	}
	if sum.ParamsSHA256 != want {
		t.Fatal("a run that fell back and recaptured ended with other parameters than an eager run")
	}
}

// eventSink observes only events.
type eventSink struct {
	f func(trainer.Event)
}

func (s eventSink) Observe(m trainer.Measurement) {
	if e, ok := m.(trainer.Event); ok {
		s.f(e)
	}
}

package trainer_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

// evalStepsPerEpoch is the number of evaluation batches per epoch: the
// test set in order, padded, unsharded.
func evalStepsPerEpoch(t *testing.T, cfg trainer.Config) int {
	t.Helper()
	cfg.Train, cfg.Ragged, cfg.Rank, cfg.World = cfg.Test, data.RaggedPad, 0, 1
	n, err := trainer.StepsPerEpoch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEvaluationReplaysTheGraph: once captured (at warm-up, before the
// first evaluation), every evaluation batch replays the evaluation graph;
// an eager run replays none, and neither counts a fallback.
func TestEvaluationReplaysTheGraph(t *testing.T) {
	cfg := smallConfig(t)
	evalSteps := evalStepsPerEpoch(t, cfg)
	all := cfg.Epochs * evalSteps
	g := run(t, cfg)
	cfg.EnableGraphs = false
	e := run(t, cfg)
	if g.EvalReplays != all || g.EvalEagerBatches != 0 {
		t.Errorf("graphs run: %d evaluation replays, %d eager batches; want %d and 0", g.EvalReplays, g.EvalEagerBatches, all)
	}
	if e.EvalReplays != 0 || e.EvalEagerBatches != all {
		t.Errorf("eager run: %d evaluation replays, %d eager batches; want 0 and %d", e.EvalReplays, e.EvalEagerBatches, all)
	}
	for _, s := range []trainer.Summary{g, e} {
		if len(s.Fallbacks) != 0 {
			t.Errorf("fallbacks %v in a run that needed none", s.Fallbacks)
		}
	}
	if g.TestAccuracy != e.TestAccuracy || g.TestLoss != e.TestLoss {
		t.Errorf("evaluation differs: graphs %v/%v, eager %v/%v", g.TestAccuracy, g.TestLoss, e.TestAccuracy, e.TestLoss)
	}
	raw, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	if fields["eval_replays"] != float64(all) || fields["eval_eager_batches"] != float64(0) {
		t.Errorf("summary.json has eval_replays %v, eval_eager_batches %v", fields["eval_replays"], fields["eval_eager_batches"])
	}
}

// failingEval is a device whose first launch of an evaluation executable
// (one with fewer nodes than a training step's) fails.
type failingEval struct {
	device.Device
	mu       sync.Mutex
	maxNodes int
	failed   int
}

type failingEvalStream struct {
	device.Stream
	dev *failingEval
}

func (d *failingEval) NewStream() (device.Stream, error) {
	s, err := d.Device.NewStream()
	return failingEvalStream{s, d}, err
}

var errInjected = errors.New("injected launch failure")

func (s failingEvalStream) Launch(x device.Exec) error {
	d := s.dev
	d.mu.Lock()
	n := x.Nodes()
	fail := d.failed == 0 && d.maxNodes > 0 && n < d.maxNodes
	if fail {
		d.failed++
	}
	d.maxNodes = max(d.maxNodes, n)
	d.mu.Unlock()
	if fail {
		return errInjected
	}
	return s.Stream.Launch(x)
}

// TestEvalReplayErrorFallsBack: a failed evaluation replay does not end
// the run: the batch and the rest of that evaluation run eagerly, counted
// as device_error with a fallback event of stage eval, and the next
// training step captures again, so later evaluations replay. The run ends
// as an eager one does.
func TestEvalReplayErrorFallsBack(t *testing.T) {
	cfg := smallConfig(t)
	eager := cfg
	eager.EnableGraphs = false
	want := run(t, eager)

	dev := &failingEval{Device: openCPU(t)}
	var mu sync.Mutex
	var events []trainer.Event
	cfg.Observer = eventSink{f: func(e trainer.Event) {
		if e.Kind == trainer.EventFallback {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	}}
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatalf("a failed evaluation replay ended the run: %v", err)
	}
	if dev.failed != 1 {
		t.Fatalf("%d launches failed, want 1 (the first evaluation replay)", dev.failed)
	}
	steps, _ := trainer.StepsPerEpoch(cfg)
	evalSteps := evalStepsPerEpoch(t, cfg)
	if got := sum.Fallbacks[graphs.ReasonDeviceError]; got != evalSteps {
		t.Errorf("device_error fallbacks %d, want %d (epoch 1's evaluation batches)", got, evalSteps)
	}
	if len(sum.Fallbacks) != 1 {
		t.Errorf("fallbacks %v, want device_error only", sum.Fallbacks)
	}
	if sum.EvalEagerBatches != evalSteps || sum.EvalReplays != (cfg.Epochs-1)*evalSteps {
		t.Errorf("evaluation: %d eager, %d replayed; want %d eager and %d replayed",
			sum.EvalEagerBatches, sum.EvalReplays, evalSteps, (cfg.Epochs-1)*evalSteps)
	}
	if sum.GraphReplays != cfg.Epochs*steps-cfg.WarmupBatches || sum.EagerSteps != cfg.WarmupBatches {
		t.Errorf("training: %d replays, %d eager; want every step after warm-up replayed", sum.GraphReplays, sum.EagerSteps)
	}
	if sum.Captures != 2*2*2 {
		t.Errorf("%d captures, want 8 (training and evaluation, two buffers, captured twice)", sum.Captures)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || events[0].Fields["stage"] != "eval" || events[0].Fields["reason"] != graphs.ReasonDeviceError {
		t.Errorf("fallback events %v, want the first with stage eval and reason device_error", events)
	}
	if sum.ParamsSHA256 != want.ParamsSHA256 || sum.TestAccuracy != want.TestAccuracy || sum.TestLoss != want.TestLoss {
		t.Error("a run that fell back during evaluation ended otherwise than an eager run")
	}
}

// launchFailing is a device whose launch number failAt (counting from 1)
// fails.
type launchFailing struct {
	device.Device
	mu               sync.Mutex
	launches, failAt int
}

type launchFailingStream struct {
	device.Stream
	dev *launchFailing
}

func (d *launchFailing) NewStream() (device.Stream, error) {
	s, err := d.Device.NewStream()
	return launchFailingStream{s, d}, err
}

func (s launchFailingStream) Launch(x device.Exec) error {
	d := s.dev
	d.mu.Lock()
	d.launches++
	fail := d.launches == d.failAt
	d.mu.Unlock()
	if fail {
		return errInjected
	}
	return s.Stream.Launch(x)
}

// TestReplayErrorOnAnEpochsLastStep: when the replay of an epoch's last
// training step fails, the evaluation that follows runs eagerly before
// anything is captured again, and each of its batches counts device_error:
// graphs are never silently off. The next epoch captures again.
func TestReplayErrorOnAnEpochsLastStep(t *testing.T) {
	cfg := smallConfig(t)
	eager := cfg
	eager.EnableGraphs = false
	want := run(t, eager)

	steps, _ := trainer.StepsPerEpoch(cfg)
	evalSteps := evalStepsPerEpoch(t, cfg)
	// Epoch 1 launches only training steps until its evaluation.
	dev := &launchFailing{Device: openCPU(t), failAt: steps - cfg.WarmupBatches}
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatalf("a failed replay ended the run: %v", err)
	}
	if got := sum.Fallbacks[graphs.ReasonDeviceError]; got != 1+evalSteps || len(sum.Fallbacks) != 1 {
		t.Errorf("fallbacks %v, want device_error only: the failed step and epoch 1's %d evaluation batches", sum.Fallbacks, evalSteps)
	}
	if sum.EvalEagerBatches != evalSteps || sum.EvalReplays != (cfg.Epochs-1)*evalSteps {
		t.Errorf("evaluation: %d eager, %d replayed; want %d eager and %d replayed",
			sum.EvalEagerBatches, sum.EvalReplays, evalSteps, (cfg.Epochs-1)*evalSteps)
	}
	if sum.GraphReplays != cfg.Epochs*steps-cfg.WarmupBatches-1 || sum.EagerSteps != cfg.WarmupBatches+1 {
		t.Errorf("training: %d replays, %d eager; want all but warm-up and the failed step replayed", sum.GraphReplays, sum.EagerSteps)
	}
	if sum.ParamsSHA256 != want.ParamsSHA256 || sum.TestAccuracy != want.TestAccuracy {
		t.Error("a run whose replay failed ended otherwise than an eager run")
	}
}

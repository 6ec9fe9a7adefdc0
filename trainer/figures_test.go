package trainer_test

import (
	"math"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestReportedFiguresAreInRangeAndAddUp: every figure a run reports is in
// its range and agrees with the counts it comes from, so an accumulator
// divided the wrong way or read from the wrong slot cannot pass: accuracies
// in [0, 1]; losses of the 4-class cross-entropy model in (0, 10) (chance
// is ln 4, about 1.39); epochs and steps within the run; and an epoch's
// samples per second times its seconds gives back its 250 training
// samples.
func TestReportedFiguresAreInRangeAndAddUp(t *testing.T) {
	cfg := smallConfig(t)
	var ps []trainer.Progress
	cfg.Progress = func(p trainer.Progress) { ps = append(ps, p) }
	sum := run(t, cfg)

	inRange := func(what string, v, lo, hi float64) {
		t.Helper()
		if !(v >= lo && v <= hi) {
			t.Errorf("%s = %v, want within [%v, %v]", what, v, lo, hi)
		}
	}
	inRange("summary train_accuracy", sum.TrainAccuracy, 0, 1)
	inRange("summary test_accuracy", sum.TestAccuracy, 0, 1)
	inRange("summary train_loss", sum.TrainLoss, 1e-6, 10)
	inRange("summary test_loss", sum.TestLoss, 1e-6, 10)
	// A fresh pool: every capture is cold, so the cold seconds are all of them.
	if sum.Captures == 0 || sum.CapturePooled != 0 || sum.CaptureColdSeconds != sum.CaptureSeconds {
		t.Errorf("%d captures (%d pooled) took %v s, %v s of them cold; want all cold", sum.Captures, sum.CapturePooled, sum.CaptureSeconds, sum.CaptureColdSeconds)
	}

	epochsDone := 0
	for i, p := range ps {
		inRange("progress epoch", float64(p.Epoch), 1, float64(cfg.Epochs))
		inRange("progress step", float64(p.Step), 1, float64(p.StepsPerEpoch))
		inRange("progress loss", p.Loss, 1e-6, 10)
		inRange("progress accuracy", p.Accuracy, 0, 1)
		if p.Epochs != cfg.Epochs || p.StepsPerEpoch != 16 {
			t.Errorf("progress %d: %d epochs of %d steps, want %d of 16", i, p.Epochs, p.StepsPerEpoch, cfg.Epochs)
		}
		if i > 0 && (p.Epoch < ps[i-1].Epoch || p.Epoch == ps[i-1].Epoch && p.Step < ps[i-1].Step) {
			t.Errorf("progress %d (epoch %d step %d) went back from epoch %d step %d", i, p.Epoch, p.Step, ps[i-1].Epoch, ps[i-1].Step)
		}
		if !p.EpochDone {
			if !(p.SamplesPerSecond > 0) || math.IsInf(p.SamplesPerSecond, 0) {
				t.Errorf("progress %d: %v samples/s, want a positive rate", i, p.SamplesPerSecond)
			}
			continue
		}
		epochsDone++
		inRange("progress test accuracy", p.TestAccuracy, 0, 1)
		if samples := p.SamplesPerSecond * p.EpochSeconds; math.Abs(samples-250) > 1e-6 {
			t.Errorf("epoch %d: %v samples/s over %v s is %v samples, want the epoch's 250", p.Epoch, p.SamplesPerSecond, p.EpochSeconds, samples)
		}
	}
	if epochsDone != cfg.Epochs {
		t.Errorf("%d epoch-done reports, want %d", epochsDone, cfg.Epochs)
	}
}

// TestIntervalFiguresAverageToTheEpochs: the loss and accuracy reported for
// each log interval are those of the interval's own steps, so weighted by
// the interval's samples they average to the epoch's figures, and the
// intervals cover the epoch. Intervals may merge when a read is still in
// flight; each interval's steps are read from its Step.
func TestIntervalFiguresAverageToTheEpochs(t *testing.T) {
	cfg := smallConfig(t)
	// Every 5 steps of 16: the epoch's last step ends an interval of its own.
	cfg.LogEvery = 5
	var ps []trainer.Progress
	cfg.Progress = func(p trainer.Progress) { ps = append(ps, p) }
	run(t, cfg)

	// 250 examples in batches of 16: 15 full batches and one of 10.
	samples := func(from, to int) float64 {
		n := float64(16 * (to - from))
		if to == 16 {
			n -= 6
		}
		return n
	}
	var loss, acc, n float64
	last := 0
	for _, p := range ps {
		if !p.EpochDone {
			w := samples(last, p.Step)
			loss, acc, n, last = loss+w*p.Loss, acc+w*p.Accuracy, n+w, p.Step
			continue
		}
		if n != 250 {
			t.Errorf("epoch %d: the intervals cover %v samples, want 250", p.Epoch, n)
		}
		if math.Abs(loss/n-p.Loss) > 1e-4*p.Loss || math.Abs(acc/n-p.Accuracy) > 1e-4 {
			t.Errorf("epoch %d: intervals average to loss %v, accuracy %v; the epoch reports %v, %v", p.Epoch, loss/n, acc/n, p.Loss, p.Accuracy)
		}
		loss, acc, n, last = 0, 0, 0, 0
	}
}

// TestInterruptedRunReportsItsPartialEpoch: a run stopped mid-epoch reports
// the training loss and accuracy of that epoch's steps so far. An
// uninterrupted run of the same configuration reports, for its first log
// interval of that epoch, the same steps' figures.
func TestInterruptedRunReportsItsPartialEpoch(t *testing.T) {
	cfg := smallConfig(t) // LogEvery 5
	var ps []trainer.Progress
	cfg.Progress = func(p trainer.Progress) { ps = append(ps, p) }
	run(t, cfg)
	var first *trainer.Progress
	for i := range ps {
		if ps[i].Epoch == 2 && !ps[i].EpochDone {
			first = &ps[i]
			break
		}
	}
	if first == nil || first.Step >= 16 {
		t.Fatalf("the second epoch's first report: %+v, want one before its last step", first)
	}
	cfg.Progress = nil
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 16+first.Step
	part := run(t, cfg)
	if !part.Interrupted {
		t.Fatal("the run was not interrupted")
	}
	if math.Abs(part.TrainLoss-first.Loss) > 1e-9*first.Loss || math.Abs(part.TrainAccuracy-first.Accuracy) > 1e-9 {
		t.Fatalf("interrupted after %d steps of epoch 2: train loss %v, accuracy %v; those steps: %v, %v",
			first.Step, part.TrainLoss, part.TrainAccuracy, first.Loss, first.Accuracy)
	}
}

// TestResumedEpochFigures: a run resumed mid-epoch starts its metrics at
// that epoch, and the epoch's samples per second counts only the samples
// this invocation trained (the epoch's 250 less the 5 steps before the
// stop), over the time it took.
func TestResumedEpochFigures(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 16+5
	run(t, cfg)
	cfg.MaxSteps, cfg.Resume = 0, true
	rec := &recorder{fallbacks: map[string]int{}, memory: map[string]int64{}}
	var ps []trainer.Progress
	cfg.Observer, cfg.Progress = rec, func(p trainer.Progress) { ps = append(ps, p) }
	run(t, cfg)
	rec.mu.Lock()
	epochs := slices.Clone(rec.epochs)
	rec.mu.Unlock()
	if !slices.Equal(epochs, []int{2, 3}) {
		t.Errorf("epochs observed %v, want [2 3]: the resumed run starts in epoch 2", epochs)
	}
	for _, p := range ps {
		if p.EpochDone && p.Epoch == 2 {
			if samples := p.SamplesPerSecond * p.EpochSeconds; math.Abs(samples-(250-5*16)) > 1e-6 {
				t.Errorf("resumed epoch 2: %v samples/s over %v s is %v samples, want the 170 trained after the resume", p.SamplesPerSecond, p.EpochSeconds, samples)
			}
			return
		}
	}
	t.Fatal("no report of epoch 2's end")
}

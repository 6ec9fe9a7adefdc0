package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// issueStatsRead snapshots the training and evaluation accumulators on
// the compute stream (so later steps can go on adding to them), then
// copies the snapshot to pinned memory on the side stream and records the
// marker after that copy. Nothing waits for it. No read may be in flight:
// its copy would race the new snapshot.
func (r *run) issueStatsRead() error {
	train, eval := r.step.Accumulators()
	n := device.StatsLen
	return errors.Join(
		r.compute.CopyDtoD(r.snap.Slice(0, n), train.Slice(0, n)),
		r.compute.CopyDtoD(r.snap.Slice(n, n), eval.Slice(0, n)),
		r.compute.Record(r.marker),
		r.side.Wait(r.marker),
		r.side.CopyDtoH(r.host, r.snap),
		r.side.Record(r.marker),
	)
}

// hostStats is what the last completed read left in pinned memory.
func (r *run) hostStats() (train, eval [device.StatsLen]float64) {
	h := r.host.Data()
	for i := range device.StatsLen {
		train[i], eval[i] = float64(h[i]), float64(h[device.StatsLen+i])
	}
	return train, eval
}

// readStats reads the accumulators now: it issues a read and waits for
// that copy only (at an epoch's end or a stop). A log-interval read still
// in flight is superseded by it.
func (r *run) readStats() (train, eval [device.StatsLen]float64, err error) {
	if p := r.pending; p != nil {
		// Let the read in flight finish and report its interval first.
		if err := r.marker.Synchronize(); err != nil {
			return train, eval, err
		}
		r.pending = nil
		t, _ := r.hostStats()
		if err := r.reportInterval(p.seq, p.samples, p.start, p.issued, t); err != nil {
			return train, eval, err
		}
	}
	if err := r.issueStatsRead(); err != nil {
		// A copy may still be in flight: do not read the pinned memory.
		return train, eval, err
	}
	if err := r.marker.Synchronize(); err != nil {
		return train, eval, err
	}
	train, eval = r.hostStats()
	return train, eval, nil
}

// statsRead is a log-interval read of the accumulators in flight.
type statsRead struct {
	seq, samples int       // the interval's last step and its samples
	start        time.Time // the interval's start
	issued       time.Time // when the read was issued
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// firstNonFinite is the index of the first NaN or Inf in v, or -1.
func firstNonFinite(v []float32) int {
	for i, x := range v {
		if !finite(float64(x)) {
			return i
		}
	}
	return -1
}

// logInterval starts the read of the interval that ends at step seq: a
// copy on the side stream that the host polls for at the following steps
// (pollStats), so the host never waits for the device. While the previous
// interval's read is still in flight, this interval joins the next one.
func (r *run) logInterval(seq, samples int, start time.Time) (issued bool, err error) {
	if r.pending != nil {
		if err := r.pollStats(); err != nil || r.pending != nil {
			return false, err
		}
	}
	if err := r.issueStatsRead(); err != nil {
		return false, err
	}
	r.pending = &statsRead{seq: seq, samples: samples, start: start, issued: time.Now()}
	return true, nil
}

// pollStats reports the read in flight if its copy is done.
func (r *run) pollStats() error {
	p := r.pending
	if p == nil {
		return nil
	}
	done, err := r.marker.Query()
	if err != nil || !done {
		return err
	}
	r.pending = nil
	train, _ := r.hostStats()
	return r.reportInterval(p.seq, p.samples, p.start, p.issued, train)
}

// reportInterval reports the loss and accuracy of the steps since the last
// reading, from the accumulators read at the end of step seq.
func (r *run) reportInterval(seq, samples int, start, end time.Time, train [device.StatsLen]float64) error {
	r.reportedSeq = seq
	d := [device.StatsLen]float64{}
	for i := range d {
		d[i] = train[i] - r.lastStats[i]
	}
	r.lastStats = train
	if !finite(train[device.StatLossSum]) {
		return fmt.Errorf("training %w at step %d (epoch %d); the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
			ErrNonFinite, seq+1, seq/r.trainSrc.steps+1)
	}
	if d[device.StatCount] == 0 {
		return nil
	}
	loss, acc := d[device.StatLossSum]/d[device.StatCount], d[device.StatCorrect]/d[device.StatCount]
	r.obs.Observe(TrainLoss{Loss: loss})
	if r.cfg.Progress != nil {
		r.cfg.Progress(Progress{Epoch: seq/r.trainSrc.steps + 1, Epochs: r.cfg.Epochs,
			Step: seq%r.trainSrc.steps + 1, StepsPerEpoch: r.trainSrc.steps, Loss: loss, Accuracy: acc,
			SamplesPerSecond: float64(samples) / max(end.Sub(start).Seconds(), 1e-9)})
	}
	return nil
}

// endEpoch evaluates on the test set, checks the loss, checkpoints and
// resets the accumulators for the next epoch.
// samples and intervalStart are those of the steps since the last
// log-interval read, which the epoch's end reports as the last interval.
func (r *run) endEpoch(seq int, epochStart time.Time, samples int, intervalStart time.Time) error {
	epoch := seq/r.trainSrc.steps + 1
	trainEnd := time.Now()
	if err := r.evaluate(); err != nil {
		return fmt.Errorf("trainer: evaluation after epoch %d: %w", epoch, err)
	}
	train, eval, err := r.readStats()
	if err != nil {
		return err
	}
	if !finite(train[device.StatLossSum]) {
		return fmt.Errorf("training %w in epoch %d; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm", ErrNonFinite, epoch)
	}
	// A model can diverge with a training loss still finite (if huge): its
	// outputs overflow on the test set. Its test loss would then go into
	// the checkpoint's header and the summary, which JSON cannot carry, so
	// it stops here as a diverged run does, keeping the last checkpoint.
	if testLoss := eval[device.StatLossSum]; !finite(testLoss) {
		return fmt.Errorf("test %w after epoch %d (%v; training loss %.3g): the model has diverged; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
			ErrNonFinite, epoch, testLoss, train[device.StatLossSum]/max(train[device.StatCount], 1))
	}
	if seq > r.reportedSeq {
		if err := r.reportInterval(seq, samples, intervalStart, trainEnd, train); err != nil {
			return err
		}
	}
	secs := since(epochStart)
	n := max(train[device.StatCount], 1)
	r.sum.TrainLoss = train[device.StatLossSum] / n
	r.sum.TrainAccuracy = train[device.StatCorrect] / n
	r.sum.TestAccuracy = eval[device.StatCorrect] / max(eval[device.StatCount], 1)
	r.sum.TestLoss = eval[device.StatLossSum] / max(eval[device.StatCount], 1)
	r.sum.EpochSeconds = append(r.sum.EpochSeconds, secs)
	r.obs.Observe(TrainLoss{Loss: r.sum.TrainLoss})
	r.obs.Observe(EvalAccuracy{Accuracy: r.sum.TestAccuracy})
	// The epoch's rate counts only the samples this invocation trained: a
	// resumed epoch's accumulators also hold those from before the stop.
	// The accumulators count labels: a sequence model's T per example.
	trained := (train[device.StatCount] - r.carried) / float64(max(1, r.cfg.Spec.Positions))
	r.lastStats, r.carried = [device.StatsLen]float64{}, 0
	trainStats, evalStats := r.step.Accumulators()
	if err := errors.Join(r.compute.Fill(trainStats, 0), r.compute.Fill(evalStats, 0)); err != nil {
		return err
	}
	if err := r.checkpoint(seq+1, nil); err != nil {
		return err
	}
	r.reportMemory()
	r.obs.Observe(Event{Time: time.Now(), Kind: EventEpoch, Fields: map[string]any{
		"epoch": epoch, "train_loss": r.sum.TrainLoss, "test_accuracy": r.sum.TestAccuracy, "seconds": secs}})
	r.log.Debug("epoch done", "epoch", epoch, "train_loss", r.sum.TrainLoss, "test_accuracy", r.sum.TestAccuracy, "seconds", secs)
	if r.cfg.Progress != nil {
		r.cfg.Progress(Progress{Epoch: epoch, Epochs: r.cfg.Epochs, Step: r.trainSrc.steps, StepsPerEpoch: r.trainSrc.steps,
			Loss: r.sum.TrainLoss, Accuracy: r.sum.TrainAccuracy, EpochDone: true, TestAccuracy: r.sum.TestAccuracy,
			EpochSeconds: secs, SamplesPerSecond: trained / secs})
	}
	return nil
}

// evaluate runs the test set through the evaluation graph (or eagerly).
// A failed replay falls back the way a training step does: the executable
// is discarded, the batch runs eagerly with reason device_error, and the
// next training step captures again. With graphs on, an eager batch is
// counted with its reason (device_error after a failed replay, until the
// next capture; capture_failed after a failed capture); with graphs off,
// or before the first capture (warm-up), it is not a fallback.
func (r *run) evaluate() error {
	for range r.evalSrc.steps {
		b, err := r.eval.Next(context.Background())
		if err != nil {
			return err
		}
		if err := r.compute.Wait(b.CopyDone); err != nil {
			return err
		}
		res, err := r.engine.Run(r.compute, evalSlot+b.K)
		r.ran(res, stageEval)
		if res.Replayed {
			r.sum.EvalReplays++
		} else {
			r.sum.EvalEagerBatches++
		}
		if err != nil {
			return err
		}
		if err := r.compute.Record(r.eval.StepDone(b.K)); err != nil {
			return err
		}
		r.eval.Release(b)
		r.advance(StageEvalBatch)
	}
	return nil
}

func (r *run) reportMemory() {
	m := r.dev.MemoryStats()
	r.obs.Observe(DeviceMemory{What: "in_use", Bytes: m.DeviceInUse})
	r.obs.Observe(DeviceMemory{What: "peak", Bytes: m.DevicePeak})
	r.obs.Observe(DeviceMemory{What: "limit", Bytes: m.DeviceLimit})
	r.obs.Observe(DeviceMemory{What: "pinned", Bytes: m.HostPinned})
	r.obs.Observe(PoolReserved{Bytes: r.pool.Stats().ReservedBytes})
}

// checkpoint saves the state after next-1 steps, if a run directory is set;
// trainStats are the training accumulators when it stops mid-epoch.
func (r *run) checkpoint(next int, trainStats []float64) error {
	if r.cfg.RunDir == "" {
		return nil
	}
	if err := r.compute.Synchronize(); err != nil {
		return err
	}
	params, state, err := r.model.Snapshot()
	if err != nil {
		return err
	}
	running, err := r.model.SnapshotRunning()
	if err != nil {
		return err
	}
	return r.saveCheckpoint(next, trainStats, params, state, running)
}

// saveCheckpoint saves params, state and the net's running state as the
// state after next-1 steps.
func (r *run) saveCheckpoint(next int, trainStats []float64, params []float32, state [][]float32, running []float32) error {
	if r.cfg.RunDir == "" {
		return nil
	}
	// A diverged model is never saved: the last good checkpoint stays.
	// The running state's numbers are the batchnorm statistics; the
	// dropout generator's words after them are bit patterns.
	stats := running[:min(len(running), r.cfg.runningStats())]
	for _, v := range append([][]float32{params, stats}, state...) {
		if i := firstNonFinite(v); i >= 0 {
			return fmt.Errorf("training %w: the model holds %v before step %d; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
				ErrNonFinite, v[i], next+1)
		}
	}
	if r.trainPrint == "" {
		// The training set does not change during a run.
		r.trainPrint = data.Fingerprint(r.cfg.Train)
	}
	h := r.cfg.headerFor(r.trainPrint)
	h.Step = next
	h.Totals = r.totals()
	h.TrainStats = trainStats
	if err := SaveCheckpoint(r.cfg.RunDir, h.WithRunning(running), params, state); err != nil {
		return err
	}
	r.advance(StageCheckpoint)
	r.obs.Observe(Event{Time: time.Now(), Kind: EventCheckpoint, Fields: map[string]any{"step": next}})
	return nil
}

// finish waits for the device, flushes timings and fills in the summary.
func (r *run) finish() error {
	params := r.stopped
	if params == nil {
		if r.compute == nil {
			return nil
		}
		if err := r.compute.Synchronize(); err != nil {
			return err
		}
		if err := r.timer.flush(); err != nil {
			return err
		}
		var err error
		if params, _, err = r.model.Snapshot(); err != nil {
			return err
		}
	}
	r.sum.ParamsSHA256 = nn.ParamsSHA256(params)
	r.sum.Device = r.dev.Name()
	r.sum.DeviceDescription = r.dev.Description()
	r.sum.Model = r.cfg.ModelName()
	r.sum.Epochs = r.cfg.Epochs
	r.sum.StageCopies = r.stageCopies()
	r.sum.Finished = time.Now().UTC()
	if r.sum.Fallbacks == nil {
		r.sum.Fallbacks = map[string]int{}
	}
	// Throughput of this invocation, evaluation and checkpoints included,
	// so a resumed or interrupted run reports what it actually did.
	if r.loopSeconds > 0 {
		r.sum.SamplesPerSecond = float64(r.samples) / r.loopSeconds
	}
	r.reportMemory()
	return nil
}

// close releases everything setup made, in reverse order.
func (r *run) close() {
	var errs []error
	if r.train != nil {
		errs = append(errs, r.train.Stop())
	}
	if r.eval != nil {
		errs = append(errs, r.eval.Stop())
	}
	for _, s := range []device.Stream{r.compute, r.side} {
		if s != nil {
			errs = append(errs, s.Synchronize()) // nothing may still use the workspace or r.host
		}
	}
	if r.timer != nil {
		// The replays timed since the last collection are reported, so
		// that a park or a stop loses none of them; the streams are
		// synchronised, so nothing waits. After an error the device's
		// events may not answer, and the error is what matters.
		if errors.Join(errs...) == nil {
			errs = append(errs, r.timer.flush())
		}
		errs = append(errs, r.timer.destroy())
	}
	if r.lease != nil {
		errs = append(errs, r.lease.Release())
	}
	if r.model != nil {
		errs = append(errs, r.model.Free())
	}
	for _, s := range []device.Stream{r.compute, r.side} {
		if s != nil {
			errs = append(errs, s.Destroy())
		}
	}
	if r.marker != nil {
		errs = append(errs, r.marker.Destroy())
	}
	if !r.host.IsZero() {
		errs = append(errs, r.dev.FreeHost(r.host))
	}
	if !r.snap.IsZero() {
		errs = append(errs, r.dev.Free(r.snap))
	}
	// The run's outcome stands; a device that fails to release what it
	// held is worth a warning (its memory may stay allocated).
	if err := errors.Join(errs...); err != nil {
		r.log.Warn("releasing the run's device resources failed", "err", err)
	}
}

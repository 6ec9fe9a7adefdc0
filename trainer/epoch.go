package trainer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// readStats copies the training and evaluation accumulators to pinned
// memory on the side stream, after the compute stream's work so far, and
// waits for that copy only. The compute stream keeps running.
func (r *run) readStats() (train, eval [device.StatsLen]float64, err error) {
	ws := r.step.W
	err = errors.Join(
		r.compute.Record(r.marker),
		r.side.Wait(r.marker),
		r.side.CopyDtoH(r.host.Slice(0, device.StatsLen), ws.TrainStats.Slice(0, device.StatsLen)),
		r.side.CopyDtoH(r.host.Slice(device.StatsLen, device.StatsLen), ws.EvalStats.Slice(0, device.StatsLen)),
		r.side.Record(r.marker),
	)
	if err == nil {
		err = r.marker.Synchronize()
	}
	if err != nil {
		// A copy may still be in flight: do not read the pinned memory.
		return train, eval, err
	}
	h := r.host.Data()
	for i := range device.StatsLen {
		train[i], eval[i] = float64(h[i]), float64(h[device.StatsLen+i])
	}
	return train, eval, err
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

// logInterval reports the loss and accuracy of the steps since the last
// reading. The copy waits only for work already issued, a few steps ago
// at most, never for the step just launched to finish on its own.
func (r *run) logInterval(seq, samples int, start time.Time) error {
	train, _, err := r.readStats()
	if err != nil {
		return err
	}
	d := [device.StatsLen]float64{}
	for i := range d {
		d[i] = train[i] - r.lastStats[i]
	}
	r.lastStats = train
	if !finite(train[device.StatLossSum]) {
		return fmt.Errorf("%w at step %d (epoch %d); the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
			ErrNonFinite, seq+1, seq/r.trainSrc.steps+1)
	}
	if d[device.StatCount] == 0 {
		return nil
	}
	loss, acc := d[device.StatLossSum]/d[device.StatCount], d[device.StatCorrect]/d[device.StatCount]
	r.obs.TrainLoss(loss)
	if r.cfg.Progress != nil {
		r.cfg.Progress(Progress{Epoch: seq/r.trainSrc.steps + 1, Epochs: r.cfg.Epochs,
			Step: seq%r.trainSrc.steps + 1, StepsPerEpoch: r.trainSrc.steps, Loss: loss, Accuracy: acc,
			SamplesPerSecond: float64(samples) / since(start)})
	}
	return nil
}

// endEpoch evaluates on the test set, checks the loss, checkpoints and
// resets the accumulators for the next epoch.
func (r *run) endEpoch(seq int, epochStart time.Time) error {
	epoch := seq/r.trainSrc.steps + 1
	if err := r.evaluate(); err != nil {
		return fmt.Errorf("trainer: evaluation after epoch %d: %w", epoch, err)
	}
	train, eval, err := r.readStats()
	if err != nil {
		return err
	}
	if !finite(train[device.StatLossSum]) {
		return fmt.Errorf("%w in epoch %d; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm", ErrNonFinite, epoch)
	}
	secs := since(epochStart)
	n := max(train[device.StatCount], 1)
	r.sum.TrainLoss = train[device.StatLossSum] / n
	r.sum.TrainAccuracy = train[device.StatCorrect] / n
	r.sum.TestAccuracy = eval[device.StatCorrect] / max(eval[device.StatCount], 1)
	r.sum.TestLoss = eval[device.StatLossSum] / max(eval[device.StatCount], 1)
	r.sum.EpochSeconds = append(r.sum.EpochSeconds, secs)
	r.obs.TrainLoss(r.sum.TrainLoss)
	r.obs.EvalAccuracy(r.sum.TestAccuracy)
	r.lastStats = [device.StatsLen]float64{}
	if err := errors.Join(r.compute.Fill(r.step.W.TrainStats, 0), r.compute.Fill(r.step.W.EvalStats, 0)); err != nil {
		return err
	}
	if err := r.checkpoint(seq + 1); err != nil {
		return err
	}
	r.reportMemory()
	r.obs.Event(Event{Time: time.Now(), Kind: EventEpoch, Fields: map[string]any{
		"epoch": epoch, "train_loss": r.sum.TrainLoss, "test_accuracy": r.sum.TestAccuracy, "seconds": secs}})
	r.log.Debug("epoch done", "epoch", epoch, "train_loss", r.sum.TrainLoss, "test_accuracy", r.sum.TestAccuracy, "seconds", secs)
	if r.cfg.Progress != nil {
		r.cfg.Progress(Progress{Epoch: epoch, Epochs: r.cfg.Epochs, Step: r.trainSrc.steps, StepsPerEpoch: r.trainSrc.steps,
			Loss: r.sum.TrainLoss, Accuracy: r.sum.TrainAccuracy, EpochDone: true, TestAccuracy: r.sum.TestAccuracy,
			EpochSeconds: secs, SamplesPerSecond: n / secs})
	}
	return nil
}

// evaluate runs the test set through the evaluation graph (or eagerly).
func (r *run) evaluate() error {
	for range r.evalSrc.steps {
		b, err := r.eval.Next(context.Background())
		if err != nil {
			return err
		}
		if err := r.compute.Wait(b.CopyDone); err != nil {
			return err
		}
		if r.captured && r.lease.Ready(evalSlot+b.K) {
			if err := r.lease.Replay(r.compute, evalSlot+b.K); err != nil {
				return err
			}
		} else if err := r.step.Eval(r.compute, r.layout.Views(r.eval.Input(b.K))); err != nil {
			return err
		}
		if err := r.compute.Record(r.eval.StepDone(b.K)); err != nil {
			return err
		}
		r.eval.Release(b)
	}
	return nil
}

func (r *run) reportMemory() {
	m := r.dev.MemoryStats()
	r.obs.DeviceMemory("in_use", m.DeviceInUse)
	r.obs.DeviceMemory("peak", m.DevicePeak)
	r.obs.DeviceMemory("limit", m.DeviceLimit)
	r.obs.DeviceMemory("pinned", m.HostPinned)
	r.obs.PoolReserved(r.pool.Stats().ReservedBytes)
}

// checkpoint saves the state after next-1 steps, if a run directory is set.
func (r *run) checkpoint(next int) error {
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
	// A diverged model is never saved: the last good checkpoint stays.
	for _, v := range append([][]float32{params}, state...) {
		if i := firstNonFinite(v); i >= 0 {
			return fmt.Errorf("%w: the model holds %v before step %d; the last good checkpoint, if any, is kept unchanged; lower --lr or set --clip-norm",
				ErrNonFinite, v[i], next+1)
		}
	}
	h := r.cfg.checkpointHeader()
	h.Step = next
	if err := SaveCheckpoint(r.cfg.RunDir, h, params, state); err != nil {
		return err
	}
	r.obs.Event(Event{Time: time.Now(), Kind: EventCheckpoint, Fields: map[string]any{"step": next}})
	return nil
}

// finish waits for the device, flushes timings and fills in the summary.
func (r *run) finish() error {
	if r.compute == nil {
		return nil
	}
	if err := r.compute.Synchronize(); err != nil {
		return err
	}
	if err := r.timer.flush(); err != nil {
		return err
	}
	params, _, err := r.model.Snapshot()
	if err != nil {
		return err
	}
	r.sum.ParamsSHA256 = nn.ParamsSHA256(params)
	r.sum.Device = r.dev.Name()
	r.sum.DeviceDescription = r.dev.Description()
	r.sum.Model = r.cfg.Spec.String()
	r.sum.Epochs = r.cfg.Epochs
	r.sum.StageCopies = r.train.Copies() + r.eval.Copies()
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
	if r.train != nil {
		_ = r.train.Stop()
	}
	if r.eval != nil {
		_ = r.eval.Stop()
	}
	for _, s := range []device.Stream{r.compute, r.side} {
		if s != nil {
			_ = s.Synchronize() // nothing may still use the workspace or r.host
		}
	}
	if r.timer != nil {
		r.timer.destroy()
	}
	if r.lease != nil {
		_ = r.lease.Release()
	}
	if r.model != nil {
		_ = r.model.Free()
	}
	for _, s := range []device.Stream{r.compute, r.side} {
		if s != nil {
			_ = s.Destroy()
		}
	}
	if r.marker != nil {
		_ = r.marker.Destroy()
	}
	if !r.host.IsZero() {
		_ = r.dev.FreeHost(r.host)
	}
}

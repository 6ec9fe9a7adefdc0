package trainer

import (
	"errors"
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// raggedSlot offsets the pool slots of the short batches' training graphs
// (ragged policy graph): one per staging input buffer.
const raggedSlot = 200

// raggedGraphs are the short batches' graphs of the run's lease: per
// input buffer, the rows its graph was captured for (0: none), and
// whether a capture of it failed (it then runs eagerly for good).
type raggedGraphs struct {
	rows   map[int]int
	failed map[int]bool
}

// trainRagged runs an epoch's short last batch under ragged policy graph:
// through a graph of its own, at its true size, captured into the lease's
// slot raggedSlot+k the first time a short batch of these rows comes to
// input buffer k (a later capture of the slot, in this run or another of
// the pool's, updates its executable), and replayed; eagerly, counting
// why, while the training graphs are not captured or when its capture or
// replay failed. Its result is the eager step's, bit for bit.
func (r *run) trainRagged(b staging.Staged, in nn.Batch) error {
	c := &r.cfg
	step := r.step.WithBatch(b.Valid)
	short := nn.Batch{X: in.X.Slice(0, b.Valid*c.Spec.Inputs), Y: in.Y.Slice(0, b.Valid*c.Spec.LabelLen()),
		Mask: in.Mask.Slice(0, b.Valid), Hyper: in.Hyper}
	run := func(s device.Stream) error { return step.Train(s, short) }
	slot := raggedSlot + b.K
	eager := func(reason string, fields map[string]any) error {
		if reason != "" {
			r.fallback(reason, fields)
		}
		r.sum.EagerSteps++
		return run(r.compute)
	}
	if !r.engine.Captured() {
		// Warm-up, or the training graphs' capture failed: as they run.
		reason := ""
		if r.engine.CaptureFailures() > 0 {
			reason = graphs.ReasonCaptureFailed
		}
		return eager(reason, nil)
	}
	if r.ragged.failed[b.K] {
		return eager(graphs.ReasonCaptureFailed, nil)
	}
	if r.ragged.rows[b.K] != b.Valid {
		if err := r.captureRagged(slot, b, run); err != nil {
			var failed *graphs.CaptureError
			if !errors.As(err, &failed) {
				return err
			}
			r.log.Error("the short batch's graph capture failed; it runs eagerly", "err", err, "rows", b.Valid)
			return eager(graphs.ReasonCaptureFailed, map[string]any{"stage": "capture", "rows": b.Valid, "error": err.Error()})
		}
	}
	i, err := r.timer.begin(r.compute)
	if err != nil {
		return err
	}
	if err := r.lease.Replay(r.compute, slot); err != nil {
		r.lease.Discard(slot)
		r.ragged.rows[b.K] = 0
		r.log.Error("the short batch's replay failed; running it eagerly and capturing again", "err", err)
		return eager(graphs.ReasonDeviceError, map[string]any{"stage": stageTrain, "rows": b.Valid, "error": err.Error()})
	}
	r.sum.GraphReplays++
	return r.timer.end(r.compute, i)
}

// captureRagged captures the short batch's step into slot, as the
// engine captures the others: the compute stream drained first, under the
// process's guard. A failure is a *graphs.CaptureError and marks the
// buffer's short batches eager for good.
func (r *run) captureRagged(slot int, b staging.Staged, run graphs.StepFunc) error {
	if r.ragged.rows == nil {
		r.ragged = raggedGraphs{rows: map[int]int{}, failed: map[int]bool{}}
	}
	if err := r.compute.Synchronize(); err != nil {
		return err
	}
	r.advance(StageCapture)
	var res graphs.CaptureResult
	err := r.guardCapture(func() error {
		var err error
		res, err = r.lease.Capture(r.compute, slot, run)
		return err
	})
	r.advance(StageCapture)
	if err != nil {
		r.ragged.failed[b.K] = true
		return &graphs.CaptureError{Err: fmt.Errorf("short batch of %d rows, slot %d: %w", b.Valid, slot, err)}
	}
	r.ragged.rows[b.K] = b.Valid
	r.captured(res)
	r.log.Info("captured the short batch's training graph", "rows", b.Valid, "pooled", res.Pooled, "seconds", res.Seconds)
	return nil
}

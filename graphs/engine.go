package graphs

import (
	"errors"
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
)

// Fallback reasons: why a step ran eagerly although graphs were on. They
// are the keys of the trainer's and the bench's fallback counts and the
// values of the fallback counter's reason label; telemetry and bench take
// them from here.
const (
	// ReasonCaptureFailed: a capture (or instantiation) failed, so steps run
	// eagerly until a later capture succeeds.
	ReasonCaptureFailed = "capture_failed"
	// ReasonRaggedBatch: a short last batch under ragged policy "eager" has
	// a shape no executable was captured for.
	ReasonRaggedBatch = "ragged_batch"
	// ReasonDeviceError: a replay failed to launch; its executable was
	// discarded and steps run eagerly until the next capture.
	ReasonDeviceError = "device_error"
)

// Reasons returns every fallback reason, in a fixed order.
func Reasons() []string {
	return []string{ReasonCaptureFailed, ReasonRaggedBatch, ReasonDeviceError}
}

// Guard keeps other device work out of a capture: Capture runs capture
// while nothing that could break a global-mode capture is issued.
// staging.Guard is one.
type Guard interface {
	Capture(capture func() error) error
}

// GuardFunc adapts a function to Guard.
type GuardFunc func(capture func() error) error

// Capture calls f(capture).
func (f GuardFunc) Capture(capture func() error) error { return f(capture) }

// Slot is one executable of an Engine: the step that reads one static
// input buffer, captured into the lease's slot ID.
type Slot struct {
	ID   int      // the lease slot the step is captured into
	Step StepFunc // the step, replayed once captured and run eagerly otherwise
}

// EngineConfig is what an Engine runs.
type EngineConfig struct {
	// Lease holds the workspace the steps use and their executables.
	Lease *Lease
	// Guard is held for the whole of a capture of every slot.
	Guard Guard
	// Slots are captured in this order, all of them or none.
	Slots []Slot
	// MaxCaptureFailures is the number of failed captures after which Due
	// reports false for good and steps stay eager; 0 means no limit.
	MaxCaptureFailures int
}

// Validate reports the first invalid field.
func (c EngineConfig) Validate() error {
	switch {
	case c.Lease == nil:
		return errors.New("graphs: engine Lease is nil; acquire one from a Pool")
	case c.Guard == nil:
		return errors.New("graphs: engine Guard is nil; pass the stagers' capture guard")
	case len(c.Slots) == 0:
		return errors.New("graphs: engine has no Slots; give one per static input buffer")
	case c.MaxCaptureFailures < 0:
		return fmt.Errorf("graphs: engine MaxCaptureFailures must be >= 0 (0: no limit), got %d", c.MaxCaptureFailures)
	}
	seen := make(map[int]bool, len(c.Slots))
	for i, s := range c.Slots {
		if s.Step == nil {
			return fmt.Errorf("graphs: engine slot %d (index %d) has no Step", s.ID, i)
		}
		if seen[s.ID] {
			return fmt.Errorf("graphs: engine slot %d is given twice; slot IDs must be distinct", s.ID)
		}
		seen[s.ID] = true
	}
	return nil
}

// Engine is the step engine: k steps, one per static input buffer,
// captured together under a guard, then each step replayed with one
// launch, or run eagerly when there is no executable for it. A replay
// that fails to launch discards its executable and runs the step eagerly
// instead. Every eager step while graphs are on carries the reason, for
// the caller to count; the engine keeps no counts of its own.
//
// An Engine that is never captured runs every step eagerly with no
// reason: that is a run with graphs off, or warm-up. An Engine is used
// from one goroutine, the one that issues the steps.
type Engine struct {
	cfg   EngineConfig
	steps map[int]StepFunc

	captured     bool // every slot has an executable from the last capture
	failures     int  // failed captures
	replayFailed bool // a replay failed since the last capture attempt
}

// NewEngine returns an engine with nothing captured.
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, steps: make(map[int]StepFunc, len(cfg.Slots))}
	for _, s := range cfg.Slots {
		e.steps[s.ID] = s.Step
	}
	return e, nil
}

// Result says how one step ran.
type Result struct {
	// Replayed is true when the slot's executable was launched.
	Replayed bool
	// Reason is why the step ran eagerly although graphs are on: a
	// capture failed, or a replay did. It is "" for a replayed step and
	// for one run before any capture was tried (graphs off, warm-up).
	Reason string
	// ReplayErr is the launch error of this step's replay, which made it
	// run eagerly (Reason is then ReasonDeviceError).
	ReplayErr error
}

// CaptureError is a failed capture of an engine's slots: the device
// refused the capture, its instantiation or its upload. The engine counted
// it and runs steps eagerly; the run can go on.
type CaptureError struct{ Err error }

func (e *CaptureError) Error() string { return e.Err.Error() }

func (e *CaptureError) Unwrap() error { return e.Err }

// Captured reports whether every slot has an executable to replay.
func (e *Engine) Captured() bool { return e.captured }

// CaptureFailures is the number of failed captures so far.
func (e *Engine) CaptureFailures() int { return e.failures }

// Due reports whether a capture should be tried now: nothing is
// captured, fewer than MaxCaptureFailures captures have failed, and, once
// one has failed, retry is true (the caller's retry point, for example an
// epoch's start).
func (e *Engine) Due(retry bool) bool {
	if e.captured {
		return false
	}
	if m := e.cfg.MaxCaptureFailures; m > 0 && e.failures >= m {
		return false
	}
	return e.failures == 0 || retry
}

// Capture waits for s, so that the warm-up work is complete and every
// buffer the steps touch exists, then captures every slot's step on s
// through the lease, in slot order, under the guard. The results are in
// slot order. If the wait fails, that error is returned and nothing is
// counted. If a capture fails, the engine counts the failure, stays
// uncaptured (steps run eagerly with ReasonCaptureFailed) and returns a
// *CaptureError naming the slot.
func (e *Engine) Capture(s device.Stream) ([]CaptureResult, error) {
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	e.captured, e.replayFailed = false, false
	var results []CaptureResult
	err := e.cfg.Guard.Capture(func() error {
		for _, sl := range e.cfg.Slots {
			res, err := e.cfg.Lease.Capture(s, sl.ID, sl.Step)
			if err != nil {
				return fmt.Errorf("slot %d: %w", sl.ID, err)
			}
			results = append(results, res)
		}
		return nil
	})
	if err != nil {
		e.failures++
		return nil, &CaptureError{Err: err}
	}
	e.captured = true
	return results, nil
}

// Replays reports whether Run(slot) would launch the slot's executable
// rather than run the step eagerly, so a caller can bracket the launch
// (with timing events, for example).
func (e *Engine) Replays(slot int) bool {
	return e.captured && e.cfg.Lease.Ready(slot)
}

// Run issues slot's step on s: a launch of its executable when the engine
// is captured, else the step eagerly. A failed launch discards the slot's
// executable, leaves the engine uncaptured and runs the step eagerly; the
// result then carries ReasonDeviceError and the launch error, and later
// eager steps carry ReasonDeviceError until the next Capture. Otherwise
// an eager step carries ReasonCaptureFailed after a failed capture, and
// no reason before any capture. The error is that of the eager step.
func (e *Engine) Run(s device.Stream, slot int) (Result, error) {
	step, err := e.step(slot)
	if err != nil {
		return Result{}, err
	}
	if e.Replays(slot) {
		err := e.cfg.Lease.Replay(s, slot)
		if err == nil {
			return Result{Replayed: true}, nil
		}
		e.cfg.Lease.Discard(slot)
		e.captured, e.replayFailed = false, true
		return Result{Reason: ReasonDeviceError, ReplayErr: err}, step(s)
	}
	return Result{Reason: e.eagerReason()}, step(s)
}

// RunEager issues slot's step on s eagerly by the caller's choice, for
// example to compare it with replay: it is not a fallback.
func (e *Engine) RunEager(s device.Stream, slot int) error {
	step, err := e.step(slot)
	if err != nil {
		return err
	}
	return step(s)
}

func (e *Engine) step(slot int) (StepFunc, error) {
	step, ok := e.steps[slot]
	if !ok {
		return nil, fmt.Errorf("graphs: the engine has no slot %d", slot)
	}
	return step, nil
}

// eagerReason is why a step runs eagerly when the engine is not captured.
func (e *Engine) eagerReason() string {
	switch {
	case e.replayFailed:
		return ReasonDeviceError
	case e.failures > 0:
		return ReasonCaptureFailed
	}
	return ""
}

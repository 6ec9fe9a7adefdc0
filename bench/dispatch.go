package bench

import (
	"errors"
	"runtime"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
)

// Dispatch compares eager dispatch with replay of the same training step
// outside the pipeline: Steps steps issued back to back on the compute
// stream from one static batch, then a stream synchronisation, timed on
// the host; medians over Repeats, per step. Without staging in the way
// this is what graphs save on issuing the step alone.
type Dispatch struct {
	Steps   int     `json:"steps"`
	Repeats int     `json:"repeats"`
	EagerMS float64 `json:"eager_step_ms"`
	// EagerIssueMS is the host time to issue one eager step (the
	// synchronisation excluded).
	EagerIssueMS  float64 `json:"eager_issue_ms"`
	ReplayMS      float64 `json:"replay_step_ms"`
	ReplayIssueMS float64 `json:"replay_issue_ms"`
	// EagerHostCPUMS and ReplayHostCPUMS are the issuing thread's CPU time
	// (user + system, CLOCK_THREAD_CPUTIME_ID) per step while it issues: what issuing
	// costs the host. 0 where the thread CPU clock is unavailable.
	EagerHostCPUMS  float64 `json:"eager_host_cpu_ms"`
	ReplayHostCPUMS float64 `json:"replay_host_cpu_ms"`
	// Speedup is EagerMS / ReplayMS.
	Speedup float64 `json:"speedup"`
}

// dispatch measures Dispatch on the setup's model and compute stream. It
// uses a batch buffer of its own, so that the stager's copies (which may
// still be issued into the staging input buffers) never race with it,
// and an executable of its own, outside the pool.
func (s *setup) dispatch(steps, repeats int) (d Dispatch, err error) {
	buf, err := s.dev.Alloc(s.layout.Len)
	if err != nil {
		return d, err
	}
	defer func() { err = errors.Join(err, s.compute.Synchronize(), s.dev.Free(buf)) }()
	batch := make([]float32, s.layout.Len)
	if _, err := s.src.Fill(0, batch); err != nil {
		return d, err
	}
	if err := s.dev.Upload(buf, batch); err != nil {
		return d, err
	}
	in := s.layout.Views(buf)
	train := func(st device.Stream) error { return s.step.Train(st, in) }
	if err := graphs.WarmUp(s.compute, 1, train); err != nil {
		return d, err
	}
	var g device.Graph
	err = s.stager.GuardCapture(prefetchReason, func() error {
		var err error
		g, err = graphs.Capture(s.compute, train)
		return err
	})
	if err != nil {
		return d, err
	}
	x, err := s.dev.Instantiate(g)
	_ = g.Destroy()
	if err != nil {
		return d, err
	}
	defer func() { err = errors.Join(err, x.Destroy()) }()
	if err := x.Upload(s.compute); err != nil {
		return d, err
	}
	replay := func(st device.Stream) error { return st.Launch(x) }
	if err := graphs.WarmUp(s.compute, 1, replay); err != nil {
		return d, err
	}
	// Issuing never blocks, so locking the goroutine to its thread costs
	// nothing and makes the thread's CPU time the issuing's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var eager, replayed issueTimes
	for range repeats {
		for _, m := range []struct {
			step graphs.StepFunc
			into *issueTimes
		}{{train, &eager}, {replay, &replayed}} {
			if err := timeIssue(s.compute, steps, m.step, m.into); err != nil {
				return d, err
			}
		}
	}
	return dispatchFigures(steps, repeats, eager, replayed), nil
}

// issueTimes are the dispatch comparison's timings of one mode, one value
// per repeat, each per step in milliseconds.
type issueTimes struct {
	total   []float64 // issue to completion (the synchronisation included)
	issue   []float64 // issuing alone
	hostCPU []float64 // the issuing thread's CPU while issuing; empty where unreadable
}

// dispatchFigures turns the timings of the eager and the replayed runs
// into the comparison's figures: medians over the repeats, and the speedup
// of the step issued to completion (eager over replay). The issue times
// are reported, never the speedup's divisor: a replay is issued in a
// fraction of the time it takes to run.
func dispatchFigures(steps, repeats int, eager, replayed issueTimes) Dispatch {
	d := Dispatch{Steps: steps, Repeats: repeats}
	d.EagerMS, d.EagerIssueMS = Median(eager.total), Median(eager.issue)
	d.ReplayMS, d.ReplayIssueMS = Median(replayed.total), Median(replayed.issue)
	if len(eager.hostCPU) > 0 && len(replayed.hostCPU) > 0 {
		d.EagerHostCPUMS, d.ReplayHostCPUMS = Median(eager.hostCPU), Median(replayed.hostCPU)
	}
	d.Speedup = ratio(d.EagerMS, d.ReplayMS)
	return d
}

// timeIssue issues n steps on st and waits for them. It adds to into, per
// step in milliseconds, the time to completion, the time to issue and the
// issuing thread's CPU time while issuing (the last only where the
// thread's CPU time can be read).
func timeIssue(st device.Stream, n int, step graphs.StepFunc, into *issueTimes) error {
	// Each batch starts from a collected heap, so neither mode pays for
	// the other's garbage (eager issuing allocates; replay hardly does).
	runtime.GC()
	cpu0, ok0 := threadCPU()
	t0 := time.Now()
	for range n {
		if err := step(st); err != nil {
			return err
		}
	}
	t1 := time.Now()
	cpu1, ok1 := threadCPU()
	if err := st.Synchronize(); err != nil {
		return err
	}
	t2 := time.Now()
	k := float64(n)
	into.total = append(into.total, ms(t2.Sub(t0))/k)
	into.issue = append(into.issue, ms(t1.Sub(t0))/k)
	if ok0 && ok1 {
		into.hostCPU = append(into.hostCPU, ms(cpu1-cpu0)/k)
	}
	return nil
}

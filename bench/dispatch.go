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
	d = Dispatch{Steps: steps, Repeats: repeats}
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
	var eager, replayed [3][]float64 // per step: total, issue, issuing thread CPU
	for range repeats {
		for _, m := range []struct {
			step graphs.StepFunc
			into *[3][]float64
		}{{train, &eager}, {replay, &replayed}} {
			t, err := s.timeSteps(steps, m.step)
			if err != nil {
				return d, err
			}
			for i, v := range t {
				m.into[i] = append(m.into[i], v)
			}
		}
	}
	d.EagerMS, d.EagerIssueMS = Median(eager[0]), Median(eager[1])
	d.ReplayMS, d.ReplayIssueMS = Median(replayed[0]), Median(replayed[1])
	if len(eager[2]) > 0 && len(replayed[2]) > 0 {
		d.EagerHostCPUMS, d.ReplayHostCPUMS = Median(eager[2]), Median(replayed[2])
	}
	d.Speedup = ratio(d.EagerMS, d.ReplayMS)
	return d, nil
}

// timeSteps issues n steps and waits for them. It returns, per step in
// milliseconds, the time to completion, the time to issue and the issuing
// thread's CPU time while issuing (the last only where the thread's CPU
// time can be read).
func (s *setup) timeSteps(n int, step graphs.StepFunc) ([]float64, error) {
	// Each batch starts from a collected heap, so neither mode pays for
	// the other's garbage (eager issuing allocates; replay hardly does).
	runtime.GC()
	cpu0, ok0 := threadCPU()
	t0 := time.Now()
	for range n {
		if err := step(s.compute); err != nil {
			return nil, err
		}
	}
	t1 := time.Now()
	cpu1, ok1 := threadCPU()
	if err := s.compute.Synchronize(); err != nil {
		return nil, err
	}
	t2 := time.Now()
	k := float64(n)
	out := []float64{ms(t2.Sub(t0)) / k, ms(t1.Sub(t0)) / k}
	if ok0 && ok1 {
		out = append(out, ms(cpu1-cpu0)/k)
	}
	return out, nil
}

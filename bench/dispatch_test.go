package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
)

// TestRunMeasuresDispatch: a run's dispatch comparison holds measured
// figures that obey what the measurement means: each mode's issuing is part
// of its time to completion, the issuing thread cannot use more CPU than
// the wall time it issues for, and the speedup is eager over replay. (The
// arithmetic from timings to figures is pinned by TestDispatchFigures.)
func TestRunMeasuresDispatch(t *testing.T) {
	rep := runQuick(t, quick(PresetTiny), openCPU)
	d := rep.Summary.Dispatch
	if d == nil {
		t.Fatal("no dispatch comparison")
	}
	cfg := quick(PresetTiny)
	if want := max(StepWindow, cfg.Steps/dispatchRepeats); d.Steps != want || d.Repeats != dispatchRepeats {
		t.Fatalf("dispatch of %d steps x %d repeats; want %d x %d", d.Steps, d.Repeats, want, dispatchRepeats)
	}
	for _, m := range []struct {
		mode              string
		total, issue, cpu float64
	}{{"eager", d.EagerMS, d.EagerIssueMS, d.EagerHostCPUMS}, {"replay", d.ReplayMS, d.ReplayIssueMS, d.ReplayHostCPUMS}} {
		if !(m.issue > 0 && m.issue <= m.total) {
			t.Errorf("%s: issuing %g ms a step, to completion %g ms; want 0 < issue <= total", m.mode, m.issue, m.total)
		}
		// Thread CPU time is read just outside the issuing's wall-clock
		// span, and those reads cost microseconds (more under -race): half
		// as much again and 20 µs a step leave room for them, and a
		// figure off by a factor of the step count still fails.
		if !(m.cpu >= 0 && m.cpu <= 1.5*m.issue+0.02) {
			t.Errorf("%s: %g ms of thread CPU a step while issuing for %g ms", m.mode, m.cpu, m.issue)
		}
	}
	if d.EagerHostCPUMS <= 0 {
		t.Errorf("eager issuing used %g ms of thread CPU a step, want some", d.EagerHostCPUMS)
	}
	if d.Speedup != d.EagerMS/d.ReplayMS {
		t.Errorf("speedup %g, want eager %g / replay %g", d.Speedup, d.EagerMS, d.ReplayMS)
	}
}

// TestRunMeasuresTheLaunchProbe: the run's launch probe holds measured
// figures: positive times, issuing within issue-to-completion, the launch
// cost eager minus replay, and all of it within the run's own wall time.
// (probeFigures' arithmetic is pinned by TestProbeFigures.)
func TestRunMeasuresTheLaunchProbe(t *testing.T) {
	cfg := quick(PresetTiny)
	start := time.Now()
	rep := runQuick(t, cfg, openCPU)
	wallUS := float64(time.Since(start)) / float64(time.Microsecond)
	p := rep.LaunchProbe
	if p == nil {
		t.Fatal("no launch probe")
	}
	if p.Kernels != cfg.ProbeKernels || p.Repeats != cfg.ProbeRepeats {
		t.Fatalf("probe of %d kernels x %d repeats, want %d x %d", p.Kernels, p.Repeats, cfg.ProbeKernels, cfg.ProbeRepeats)
	}
	if !(p.EagerUS > 0 && p.ReplayUS > 0 && p.IssueUS > 0 && p.IssueUS <= p.EagerUS) {
		t.Errorf("probe: eager %g µs, issue %g µs, replay %g µs a kernel; want positive, issue <= eager", p.EagerUS, p.IssueUS, p.ReplayUS)
	}
	if p.LaunchCostUS != p.EagerUS-p.ReplayUS {
		t.Errorf("launch cost %g µs, want eager %g - replay %g", p.LaunchCostUS, p.EagerUS, p.ReplayUS)
	}
	// Each figure is a median of per-repeat times, every one of them
	// measured inside Run.
	if spent := (p.EagerUS + p.ReplayUS) * float64(p.Kernels); spent > wallUS {
		t.Errorf("one repeat took %g µs by the figures; the whole run took %g µs", spent, wallUS)
	}
}

// TestRunMeasuresProcessCPU: each record's process CPU per step is a
// measurement: positive, and over the record's steps no more than every
// core busy for the whole run; and its steps, in milliseconds, took no
// longer than the run.
func TestRunMeasuresProcessCPU(t *testing.T) {
	start := time.Now()
	rep := runQuick(t, quick(PresetTiny), openCPU)
	wallMS := float64(time.Since(start)) / float64(time.Millisecond)
	for i, r := range rep.Records {
		if spent := r.ProcessCPUMS * float64(r.Steps); !(r.ProcessCPUMS > 0) || spent > wallMS*float64(runtime.NumCPU()) {
			t.Errorf("record %d: %g ms of process CPU a step over %d steps; the run took %g ms on %d cores",
				i, r.ProcessCPUMS, r.Steps, wallMS, runtime.NumCPU())
		}
		if spent := r.StepMS * float64(r.Steps); !(r.StepMS > 0) || spent > wallMS {
			t.Errorf("record %d: %d steps of %g ms; the whole run took %g ms", i, r.Steps, r.StepMS, wallMS)
		}
	}
}

// TestStepLaunchCostMeasured: the step launch cost counts as measured only
// with kernels counted and both step times positive.
func TestStepLaunchCostMeasured(t *testing.T) {
	full := Summary{KernelsPerStep: 9, EagerStepMS: 2, GraphStepMS: 1}
	if !full.StepLaunchCostMeasured() {
		t.Error("a summary with every figure: not measured")
	}
	for name, s := range map[string]Summary{
		"no kernels":    {EagerStepMS: 2, GraphStepMS: 1},
		"no eager time": {KernelsPerStep: 9, GraphStepMS: 1},
		"no graph time": {KernelsPerStep: 9, EagerStepMS: 2},
	} {
		if s.StepLaunchCostMeasured() {
			t.Errorf("%s: measured", name)
		}
	}
}

// TestKernelsCountedOverOneStep: the kernels per step are counted on one
// settle step, however many settle steps there are.
func TestKernelsCountedOverOneStep(t *testing.T) {
	cfg := quick(PresetTiny)
	cfg.SettleSteps = 3
	if got := runQuick(t, cfg, openCPU).Summary.KernelsPerStep; got != 8 {
		t.Fatalf("%d kernels per step with 3 settle steps, want 8", got)
	}
}

// TestRunFallbacksSumOverEpochs: the summary's fallback steps add up the
// graph phases of every epoch.
func TestRunFallbacksSumOverEpochs(t *testing.T) {
	cfg := quick(PresetTiny)
	cfg.Epochs, cfg.ProbeKernels = 2, -1
	rep := runQuick(t, cfg, func() (device.Device, error) {
		d, err := cpu.Open(cpu.Config{})
		return failingInstantiate{d}, err
	})
	if got := rep.Summary.Fallbacks[graphs.ReasonCaptureFailed]; got != 2*16 {
		t.Errorf("summary fallbacks %v; want 32 capture_failed (16 a graph phase, 2 epochs)", rep.Summary.Fallbacks)
	}
}

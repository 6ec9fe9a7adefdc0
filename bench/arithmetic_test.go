package bench

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/tolaria-ml/tolaria/graphs"
)

// These tests feed known timings into the pure functions that turn a
// run's measurements into its reported figures (summarise,
// dispatchFigures, probeFigures, Targets, Comparisons) and check every
// derived figure against a value worked out by hand. The inputs are
// chosen so that medians, means and p90s differ, and so that a figure
// computed from the wrong operand, or inverted, gives another number.

// sameFloat reports whether got and want agree to 1e-12 relative: exact
// up to the rounding of the arithmetic that produced got.
func sameFloat(got, want float64) bool {
	if got == want {
		return true
	}
	return math.Abs(got-want) <= 1e-12*math.Max(math.Abs(got), math.Abs(want))
}

// diffValues lists every field, however deeply nested, where got and want
// differ (floats by sameFloat), so that a new figure nobody checks shows
// up as a difference from its expected zero.
func diffValues(path string, got, want reflect.Value) []string {
	switch got.Kind() {
	case reflect.Float64:
		if !sameFloat(got.Float(), want.Float()) {
			return []string{fmt.Sprintf("%s = %v, want %v", path, got.Float(), want.Float())}
		}
	case reflect.Struct:
		var out []string
		for i := range got.NumField() {
			out = append(out, diffValues(path+"."+got.Type().Field(i).Name, got.Field(i), want.Field(i))...)
		}
		return out
	case reflect.Slice:
		if got.Len() != want.Len() {
			return []string{fmt.Sprintf("%s: %d elements, want %d", path, got.Len(), want.Len())}
		}
		var out []string
		for i := range got.Len() {
			out = append(out, diffValues(fmt.Sprintf("%s[%d]", path, i), got.Index(i), want.Index(i))...)
		}
		return out
	case reflect.Pointer:
		if got.IsNil() != want.IsNil() {
			return []string{fmt.Sprintf("%s: nil %v, want nil %v", path, got.IsNil(), want.IsNil())}
		}
		if !got.IsNil() {
			return diffValues(path, got.Elem(), want.Elem())
		}
	default:
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			return []string{fmt.Sprintf("%s = %v, want %v", path, got.Interface(), want.Interface())}
		}
	}
	return nil
}

func checkFigures[T any](t *testing.T, name string, got, want T) {
	t.Helper()
	for _, d := range diffValues(name, reflect.ValueOf(got), reflect.ValueOf(want)) {
		t.Error(d)
	}
}

// threeEpochs is a run of three epochs: a cold capture, then two pooled
// ones, the last of whose graph phase fell back (device_error) and is left
// out of the graph-mode statistics. Times in ms.
func threeEpochs() []epochResult {
	return []epochResult{
		{
			eager: phase{wall: []float64{3, 5, 10}, deviceStep: []float64{4, 6}, busy: []float64{1, 3},
				exposed: []float64{0, 0}, copies: []float64{0.5}, processCPU: 7, kernels: 10, steps: 3},
			graph: phase{graph: true, wall: []float64{2, 2.5}, deviceStep: []float64{2, 3}, busy: []float64{1.5, 1},
				exposed: []float64{0.125, 0.375}, copies: []float64{0.25}, processCPU: 4, nodes: 10, steps: 2},
			capture: captureResult{ms: 0.8, graphs: 2}, captureKind: CaptureCold,
		},
		{
			eager: phase{wall: []float64{6}, deviceStep: []float64{8}, busy: []float64{2},
				copies: []float64{0.75}, processCPU: 9, kernels: 10, steps: 1},
			graph: phase{graph: true, wall: []float64{4}, deviceStep: []float64{3}, busy: []float64{2},
				exposed: []float64{1}, copies: []float64{1}, processCPU: 5, nodes: 10, steps: 1},
			capture: captureResult{ms: 0.25, pooled: true, graphs: 2}, captureKind: CapturePooled,
		},
		{
			eager: phase{wall: []float64{4}, copies: []float64{0.125}, processCPU: 8, kernels: 10, steps: 1},
			graph: phase{wall: []float64{100}, deviceStep: []float64{100}, busy: []float64{100}, exposed: []float64{100},
				copies: []float64{2}, processCPU: 100, fallback: graphs.ReasonDeviceError, fallbackSteps: 3, nodes: 10, steps: 1},
			capture: captureResult{ms: 0.75, pooled: true, graphs: 2}, captureKind: CapturePooled,
		},
	}
}

func TestSummariseDerivedFigures(t *testing.T) {
	probe := &Probe{LaunchCostUS: 0.125}
	tests := []struct {
		name   string
		batch  int
		epochs func() []epochResult
		probe  *Probe
		want   Summary
	}{
		{
			// Eager walls pooled: 3 4 5 6 10; graph walls (epoch 3 fell
			// back): 2 2.5 4. Eager device steps 4 6 8, graph 2 3 3.
			name: "three epochs, one fallen back", batch: 8, epochs: threeEpochs, probe: probe,
			want: Summary{
				BatchSize:   8,
				EagerStepMS: 5, EagerStepP90MS: 8.4, EagerStepMeanMS: 5.6,
				GraphStepMS: 2.5, GraphStepP90MS: 3.7, GraphStepMeanMS: 8.5 / 3,
				Speedup:           2, // 5 / 2.5
				EagerDeviceStepMS: 6, GraphDeviceStepMS: 3,
				DeviceSpeedup: 2, // 6 / 3
				DeviceBusyMS:  1.5, DeviceBusyP90MS: 1.9, EagerDeviceBusyMS: 2, EagerDeviceBusyP90MS: 2.8,
				EagerProcessCPUMS: 8, GraphProcessCPUMS: 4.5,
				// Copies of every phase, the fallen-back one's included:
				// 0.125 0.25 0.5 0.75 1 2.
				StageCopyMS: 0.625, StageCopyP90MS: 1.5,
				ReplayMS: 1.5,
				// Exposed: 0.125 0.375 1.
				ExposedStageMS: 0.375, ExposedStageP90MS: 0.875,
				// Mean exposed 0.5 over mean graph device step 8/3.
				ExposedStageFraction: 0.1875,
				CaptureColdMS:        0.8, CapturePooledMS: 0.5, Captures: 3, PooledCaptures: 2, GraphsPerSetup: 2,
				KernelsPerStep: 10, GraphNodes: 10,
				LaunchCostUS:     0.125,
				StepLaunchCostUS: 250, // (5 - 2.5) ms * 1000 / 10 kernels
				PoolBytes:        4096,
				// Batch over the mean step: 8 * 1000 / 5.6 and 8 * 1000 / (8.5/3).
				EagerSamplesPerSecond: 8000 / 5.6, GraphSamplesPerSecond: 24000 / 8.5,
				Fallbacks: map[string]int{graphs.ReasonDeviceError: 3},
			},
		},
		{
			// The cold capture is the first epoch's; the pooled capture
			// time is the median of the later ones (1, 1.25, 4).
			name: "captures", batch: 1, probe: nil,
			epochs: func() []epochResult {
				var out []epochResult
				for i, c := range []float64{3, 4, 1.25, 1} {
					e := epochResult{
						eager:       phase{wall: []float64{2}, kernels: 3, steps: 1},
						graph:       phase{graph: true, wall: []float64{1}, nodes: 3, steps: 1},
						capture:     captureResult{ms: c, pooled: i > 0, graphs: 2},
						captureKind: CapturePooled,
					}
					if i == 0 {
						e.captureKind = CaptureCold
					}
					out = append(out, e)
				}
				return out
			},
			want: Summary{
				BatchSize:   1,
				EagerStepMS: 2, EagerStepP90MS: 2, EagerStepMeanMS: 2,
				GraphStepMS: 1, GraphStepP90MS: 1, GraphStepMeanMS: 1,
				Speedup:       2,
				CaptureColdMS: 3, CapturePooledMS: 1.25, Captures: 4, PooledCaptures: 3, GraphsPerSetup: 2,
				KernelsPerStep: 3, GraphNodes: 3,
				StepLaunchCostUS:      1000.0 / 3,
				PoolBytes:             4096,
				EagerSamplesPerSecond: 500, GraphSamplesPerSecond: 1000,
				Fallbacks: map[string]int{},
			},
		},
		{
			// Every graph phase fell back: nothing of graph mode was
			// measured, so every ratio that needs it is 0, never Inf.
			name: "no graph step measured", batch: 4, probe: nil,
			epochs: func() []epochResult {
				e := threeEpochs()[2]
				e.captureKind, e.capture = "", captureResult{}
				return []epochResult{e}
			},
			want: Summary{
				BatchSize:   4,
				EagerStepMS: 4, EagerStepP90MS: 4, EagerStepMeanMS: 4,
				EagerProcessCPUMS: 8,
				StageCopyMS:       1.0625, StageCopyP90MS: 1.8125,
				KernelsPerStep: 10, GraphNodes: 10,
				PoolBytes:             4096,
				EagerSamplesPerSecond: 1000,
				Fallbacks:             map[string]int{graphs.ReasonDeviceError: 3},
			},
		},
		{
			// Graph steps slower than eager ones: the launch cost estimated
			// from the step times is negative, stored as 0; the speedup is
			// below 1. One cold capture, nothing pooled.
			name: "graphs slower, one capture", batch: 2, probe: probe,
			epochs: func() []epochResult {
				return []epochResult{{
					eager:       phase{wall: []float64{2}, kernels: 4, steps: 1},
					graph:       phase{graph: true, wall: []float64{2.5}, nodes: 4, steps: 1},
					capture:     captureResult{ms: 0.5, graphs: 2},
					captureKind: CaptureCold,
				}}
			},
			want: Summary{
				BatchSize:   2,
				EagerStepMS: 2, EagerStepP90MS: 2, EagerStepMeanMS: 2,
				GraphStepMS: 2.5, GraphStepP90MS: 2.5, GraphStepMeanMS: 2.5,
				Speedup:       0.8,
				CaptureColdMS: 0.5, Captures: 1, GraphsPerSetup: 2,
				KernelsPerStep: 4, GraphNodes: 4,
				LaunchCostUS:          0.125,
				PoolBytes:             4096,
				EagerSamplesPerSecond: 1000, GraphSamplesPerSecond: 800,
				Fallbacks: map[string]int{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarise(tt.batch, tt.epochs(), 4096, tt.probe)
			checkFigures(t, "summary", got, tt.want)
		})
	}
}

// TestStepLaunchCostClamp checks the launch cost estimated from the step
// times at and around its clamp to 0: (eager - graph) ms * 1000 / kernels.
func TestStepLaunchCostClamp(t *testing.T) {
	tests := []struct {
		name         string
		eager, graph float64
		kernels      int
		want         float64
	}{
		{"graphs faster", 5, 2.5, 10, 250},
		{"graphs just faster", 2.5 + 1.0/1024, 2.5, 1, 1000.0 / 1024},
		{"equal", 2.5, 2.5, 10, 0},
		{"graphs just slower: clamped", 2.5 - 1.0/1024, 2.5, 1, 0},
		{"graphs slower: clamped", 2, 2.5, 4, 0},
		{"no kernels counted", 5, 2.5, 0, 0},
		{"no graph step", 5, 0, 10, 0},
		{"no eager step", 0, 2.5, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Summary{EagerStepMS: tt.eager, GraphStepMS: tt.graph, KernelsPerStep: tt.kernels}
			if got := stepLaunchCostUS(s); !sameFloat(got, tt.want) {
				t.Errorf("step launch cost of eager %g ms, graph %g ms, %d kernels = %g µs, want %g",
					tt.eager, tt.graph, tt.kernels, got, tt.want)
			}
		})
	}
}

func TestDispatchFigures(t *testing.T) {
	tests := []struct {
		name            string
		eager, replayed issueTimes
		want            Dispatch
	}{
		{
			// A replay is issued in a fraction of its run time: the speedup
			// is of the step run to completion (3.25 / 1.625), not of the
			// issue (3.25 / 0.09375 = 34.7).
			name: "replay twice as fast",
			eager: issueTimes{total: []float64{3.5, 3.25, 3}, issue: []float64{1.5, 2, 1.75},
				hostCPU: []float64{2.5, 1.75, 1.8125}},
			replayed: issueTimes{total: []float64{1.75, 1.5, 1.625}, issue: []float64{0.125, 0.0625, 0.09375},
				hostCPU: []float64{0.078125, 0.0625, 0.5}},
			want: Dispatch{Steps: 1000, Repeats: 3, EagerMS: 3.25, EagerIssueMS: 1.75, ReplayMS: 1.625,
				ReplayIssueMS: 0.09375, EagerHostCPUMS: 1.8125, ReplayHostCPUMS: 0.078125, Speedup: 2},
		},
		{
			// Medians, not means: one slow repeat does not move them.
			name:     "medians of the repeats",
			eager:    issueTimes{total: []float64{3, 30, 3.25, 3.5, 3.125}, issue: []float64{1, 10, 1, 1, 1}},
			replayed: issueTimes{total: []float64{2, 2, 20, 2, 2}, issue: []float64{0.5, 0.5, 0.5, 5, 0.5}},
			want: Dispatch{Steps: 1000, Repeats: 5, EagerMS: 3.25, EagerIssueMS: 1, ReplayMS: 2,
				ReplayIssueMS: 0.5, Speedup: 1.625},
		},
		{
			// Where one mode's thread CPU could not be read, neither is
			// reported.
			name:     "thread CPU unreadable",
			eager:    issueTimes{total: []float64{3}, issue: []float64{1}, hostCPU: []float64{1}},
			replayed: issueTimes{total: []float64{1.5}, issue: []float64{0.25}},
			want:     Dispatch{Steps: 1000, Repeats: 1, EagerMS: 3, EagerIssueMS: 1, ReplayMS: 1.5, ReplayIssueMS: 0.25, Speedup: 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := dispatchFigures(1000, len(tt.eager.total), tt.eager, tt.replayed)
			checkFigures(t, "dispatch", got, tt.want)
		})
	}
}

// TestDispatchSpeedupJudgesTheTarget follows a dispatch comparison that
// falls short of the tiny preset's 2x target through to the target: the
// replay is issued 40 times faster than an eager step, but runs only 1.875
// times faster, and the target must read not met.
func TestDispatchSpeedupJudgesTheTarget(t *testing.T) {
	d := dispatchFigures(1000, 1,
		issueTimes{total: []float64{3.75}, issue: []float64{2.5}},
		issueTimes{total: []float64{2}, issue: []float64{0.0625}})
	rep := tinyReport(t)
	rep.Summary.Dispatch = &d
	got := Targets(rep)
	if len(got) != 1 || got[0].Value != 1.875 || got[0].Met {
		t.Fatalf("targets %+v, want one, 1.875x, not met", got)
	}
}

func TestProbeFigures(t *testing.T) {
	tests := []struct {
		name                    string
		eager, issued, replayed []float64 // µs for all kernels, per repeat
		want                    Probe
		wantErr                 bool
	}{
		{
			name: "launch cost is eager minus replay, per kernel", eager: []float64{150, 115, 120},
			issued: []float64{100, 125, 103}, replayed: []float64{3, 5, 3.5},
			want: Probe{Kernels: 1000, Repeats: 3, EagerUS: 0.12, IssueUS: 0.103, ReplayUS: 0.0035, LaunchCostUS: 0.1165},
		},
		{
			// Inside the noise the difference is negative, and shown so.
			name: "replay slower than eager", eager: []float64{4}, issued: []float64{2}, replayed: []float64{5},
			want: Probe{Kernels: 1000, Repeats: 1, EagerUS: 0.004, IssueUS: 0.002, ReplayUS: 0.005, LaunchCostUS: -0.001},
		},
		{
			name: "nothing measured", eager: []float64{0}, issued: []float64{0}, replayed: []float64{1},
			want:    Probe{Kernels: 1000, Repeats: 1, ReplayUS: 0.001, LaunchCostUS: -0.001},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := probeFigures(1000, len(tt.eager), tt.eager, tt.issued, tt.replayed)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want an error: %v", err, tt.wantErr)
			}
			checkFigures(t, "probe", got, tt.want)
		})
	}
}

func TestTargetOperators(t *testing.T) {
	below, above := math.Nextafter(2, 0), math.Nextafter(2, 3)
	tests := []struct {
		op    string
		value float64
		met   bool
	}{
		{">=", below, false}, {">=", 2, true}, {">=", above, true},
		{"<=", below, true}, {"<=", 2, true}, {"<=", above, false},
		{"<", below, true}, {"<", 2, false}, {"<", above, false},
	}
	for _, tt := range tests {
		got := target("x", tt.value, tt.op, 2)
		want := Target{Name: "x", Value: tt.value, Op: tt.op, Bound: 2, Met: tt.met}
		if got != want {
			t.Errorf("target(%v %s 2) = %+v, want %+v", tt.value, tt.op, got, want)
		}
	}
}

func tinyReport(t *testing.T) *Report {
	t.Helper()
	model, batch := presetModel(t, PresetTiny)
	return &Report{Device: "cpu", Preset: string(PresetTiny), Model: model, BatchSize: batch}
}

func mlpCUDAReport(t *testing.T) *Report {
	t.Helper()
	model, batch := presetModel(t, PresetMLP)
	return &Report{Device: "cuda:0", Preset: string(PresetMLP), Model: model, BatchSize: batch}
}

// TestTargetBoundaries puts the figure of every target exactly on its
// bound, just below and just above, through Targets, and checks the
// figure it reports and the verdict.
func TestTargetBoundaries(t *testing.T) {
	type side int
	const (
		justBelow side = iota
		atBound
		justAbove
	)
	tests := []struct {
		name  string
		op    string
		bound float64
		// report returns a report whose figure for the target is v.
		report func(t *testing.T, v float64) *Report
		met    [3]bool // just below, at, just above
	}{
		{
			name: "replay vs eager dispatch, issuing alone (x)", op: ">=", bound: 2, met: [3]bool{false, true, true},
			report: func(t *testing.T, v float64) *Report {
				r := tinyReport(t)
				r.Summary.Dispatch = &Dispatch{Speedup: v}
				return r
			},
		},
		{
			name: "graph step over device-busy time (x)", op: "<=", bound: 1.1, met: [3]bool{true, true, false},
			report: func(t *testing.T, v float64) *Report {
				r := mlpCUDAReport(t)
				r.Summary.GraphStepMS, r.Summary.DeviceBusyMS = v, 1
				return r
			},
		},
		{
			name: "graphs vs eager step, default MLP at batch 64 (x)", op: ">=", bound: 3, met: [3]bool{false, true, true},
			report: func(t *testing.T, v float64) *Report {
				r := mlpCUDAReport(t)
				r.Summary.Speedup = v
				return r
			},
		},
		{
			name: "cold capture with instantiation (ms)", op: "<", bound: 5, met: [3]bool{true, false, false},
			report: func(t *testing.T, v float64) *Report {
				r := mlpCUDAReport(t)
				r.Summary.CaptureColdMS, r.Summary.Captures = v, 1
				return r
			},
		},
		{
			name: "pooled capture (ms)", op: "<", bound: 0.5, met: [3]bool{true, false, false},
			report: func(t *testing.T, v float64) *Report {
				r := mlpCUDAReport(t)
				r.Summary.CapturePooledMS, r.Summary.PooledCaptures = v, 2
				return r
			},
		},
		{
			name: "exposed stage time over the step (%)", op: "<", bound: 2, met: [3]bool{true, false, false},
			report: func(t *testing.T, v float64) *Report {
				r := mlpCUDAReport(t)
				r.Summary.ExposedStageFraction, r.Summary.GraphDeviceStepMS = v/100, 1
				return r
			},
		},
	}
	for _, tt := range tests {
		for s, v := range map[side]float64{
			justBelow: tt.bound * (1 - 1e-9),
			atBound:   tt.bound,
			justAbove: tt.bound * (1 + 1e-9),
		} {
			t.Run(fmt.Sprintf("%s at %v", tt.name, v), func(t *testing.T) {
				var got *Target
				for _, tg := range Targets(tt.report(t, v)) {
					if tg.Name == tt.name {
						got = &tg
					}
				}
				if got == nil {
					t.Fatalf("no target %q", tt.name)
				}
				if got.Op != tt.op || got.Bound != tt.bound || !sameFloat(got.Value, v) {
					t.Fatalf("target %+v, want value %v %s %v", *got, v, tt.op, tt.bound)
				}
				// The figure sits where the case says: on the bound exactly,
				// or on its side.
				if on := map[side]bool{justBelow: got.Value < tt.bound, atBound: got.Value == tt.bound,
					justAbove: got.Value > tt.bound}[s]; !on {
					t.Fatalf("figure %v is not on the intended side of %v", got.Value, tt.bound)
				}
				if got.Met != tt.met[s] {
					t.Errorf("%v %s %v: met %v, want %v", got.Value, tt.op, tt.bound, got.Met, tt.met[s])
				}
			})
		}
	}
}

func TestComparisons(t *testing.T) {
	s := Summary{
		EagerStepMS: 5, GraphStepMS: 2.5, EagerStepP90MS: 9, GraphStepP90MS: 3,
		EagerDeviceStepMS: 6, GraphDeviceStepMS: 4, EagerDeviceBusyMS: 2, DeviceBusyMS: 1.6,
		EagerProcessCPUMS: 7, GraphProcessCPUMS: 0,
	}
	want := []Comparison{
		{"wall, median", 5, 2.5, 2},
		{"wall, p90", 9, 3, 3},
		{"device step, median", 6, 4, 1.5},
		{"device busy, median", 2, 1.6, 1.25},
		{"CPU, whole process", 7, 0, 0}, // not measured: no ratio
	}
	checkFigures(t, "comparisons", Comparisons(s), want)

	s.Dispatch = &Dispatch{EagerMS: 3.25, ReplayMS: 1.625, EagerHostCPUMS: 1.75, ReplayHostCPUMS: 0.0625}
	want = append(want,
		Comparison{"issuing alone (no staging)", 3.25, 1.625, 2},
		Comparison{"  host CPU of the issuing thread", 1.75, 0.0625, 28})
	checkFigures(t, "comparisons with dispatch", Comparisons(s), want)
}

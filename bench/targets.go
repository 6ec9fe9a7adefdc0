package bench

import (
	"fmt"
	"strings"
)

// Target is one performance target checked against a run's figures. The
// bench reports targets; it never fails a run on them.
type Target struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Op    string  `json:"op"` // "<=", ">=" or "<"
	Bound float64 `json:"bound"`
	Met   bool    `json:"met"`
}

func target(name string, value float64, op string, bound float64) Target {
	t := Target{Name: name, Value: value, Op: op, Bound: bound}
	switch op {
	case ">=":
		t.Met = value >= bound
	case "<=":
		t.Met = value <= bound
	case "<":
		t.Met = value < bound
	default:
		panic("bench: unknown target operator " + op)
	}
	return t
}

// Targets returns the targets that apply to the report's device and
// workload, with the figure each is judged on:
//
//   - CPU device, the tiny preset's own workload (its model at batch 8,
//     no --hidden or --batch-size override): replay at least 2x faster
//     than eager dispatch of the same step (the dispatch comparison, where
//     one launch replaces a queue hand-off per kernel);
//   - CUDA: the graph step within 1.1x of the device-busy time of the same
//     step, capture with instantiation under 5 ms cold and under 0.5 ms
//     pooled, exposed stage time under 2% of the step, and for the default
//     MLP at batch 64, graphs at least 3x faster than eager.
func Targets(rep *Report) []Target {
	s := rep.Summary
	var out []Target
	switch {
	case rep.Device == "cpu":
		if isPresetWorkload(rep, PresetTiny) && s.Dispatch != nil && s.Dispatch.Speedup > 0 {
			out = append(out, target("replay vs eager dispatch, issuing alone (x)", s.Dispatch.Speedup, ">=", 2))
		}
	case strings.HasPrefix(rep.Device, "cuda"): // cuda:<ordinal>
		// A figure that was not measured (0) is left out, never "met".
		if s.GraphStepMS > 0 && s.DeviceBusyMS > 0 {
			out = append(out, target("graph step over device-busy time (x)", ratio(s.GraphStepMS, s.DeviceBusyMS), "<=", 1.1))
		}
		if isPresetWorkload(rep, PresetMLP) && s.Speedup > 0 {
			out = append(out, target("graphs vs eager step, default MLP at batch 64 (x)", s.Speedup, ">=", 3))
		}
		if s.Captures > 0 && s.CaptureColdMS > 0 {
			out = append(out, target("cold capture with instantiation (ms)", s.CaptureColdMS, "<", 5))
		}
		if s.PooledCaptures > 0 && s.CapturePooledMS > 0 {
			out = append(out, target("pooled capture (ms)", s.CapturePooledMS, "<", 0.5))
		}
		if s.GraphDeviceStepMS > 0 {
			out = append(out, target("exposed stage time over the step (%)", 100*s.ExposedStageFraction, "<", 2))
		}
	}
	return out
}

// isPresetWorkload reports whether rep measured preset p's own workload:
// its model at its batch size, with no --hidden or --batch-size override.
func isPresetWorkload(rep *Report, p Preset) bool {
	w, err := p.Workload()
	if err != nil {
		panic(fmt.Sprintf("bench: the %s preset: %v", p, err))
	}
	return rep.Preset == string(p) && rep.Model == w.Spec.String() && rep.BatchSize == w.BatchSize
}

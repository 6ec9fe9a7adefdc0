package bench

import "testing"

// TestTargetsLeaveOutUnmeasuredFigures: a target whose figure, or the
// figure it is judged against, was not measured (0) is left out, never
// judged "met".
func TestTargetsLeaveOutUnmeasuredFigures(t *testing.T) {
	tests := []struct {
		target string
		report func(t *testing.T) *Report
	}{
		{"replay vs eager dispatch, issuing alone (x)", func(t *testing.T) *Report {
			r := tinyReport(t)
			r.Summary.Dispatch = &Dispatch{}
			return r
		}},
		{"graph step over device-busy time (x)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.GraphStepMS, r.Summary.DeviceBusyMS = 1, 0
			return r
		}},
		{"graph step over device-busy time (x)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.GraphStepMS, r.Summary.DeviceBusyMS = 0, 1
			return r
		}},
		{"graphs vs eager step, default MLP at batch 64 (x)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.Speedup = 0
			return r
		}},
		{"cold capture with instantiation (ms)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.Captures, r.Summary.CaptureColdMS = 1, 0
			return r
		}},
		{"cold capture with instantiation (ms)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.Captures, r.Summary.CaptureColdMS = 0, 1
			return r
		}},
		{"pooled capture (ms)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.PooledCaptures, r.Summary.CapturePooledMS = 1, 0
			return r
		}},
		{"pooled capture (ms)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.PooledCaptures, r.Summary.CapturePooledMS = 0, 0.1
			return r
		}},
		{"exposed stage time over the step (%)", func(t *testing.T) *Report {
			r := mlpCUDAReport(t)
			r.Summary.GraphDeviceStepMS, r.Summary.ExposedStageFraction = 0, 0.01
			return r
		}},
	}
	for i, tt := range tests {
		rep := tt.report(t)
		for _, tg := range Targets(rep) {
			if tg.Name == tt.target {
				t.Errorf("case %d: target %q listed (%+v) from an unmeasured figure", i, tt.target, tg)
			}
		}
	}
}

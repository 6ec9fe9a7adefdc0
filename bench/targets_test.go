package bench

import "testing"

func TestTargets(t *testing.T) {
	tiny := &Report{Device: "cpu", Preset: string(PresetTiny),
		Summary: Summary{Dispatch: &Dispatch{Speedup: 2.4}}}
	got := Targets(tiny)
	if len(got) != 1 || !got[0].Met || got[0].Value != 2.4 || got[0].Bound != 2 {
		t.Fatalf("cpu tiny at 2.4x: %+v, want one met target of 2x", got)
	}
	tiny.Summary.Dispatch.Speedup = 1.9
	if got := Targets(tiny); got[0].Met {
		t.Fatalf("cpu tiny at 1.9x: %+v, want the 2x target not met", got)
	}
	if got := Targets(&Report{Device: "cpu", Preset: string(PresetMLP), Summary: Summary{Dispatch: &Dispatch{Speedup: 1}}}); len(got) != 0 {
		t.Fatalf("cpu mlp: %+v, want no target (the ratio is reported)", got)
	}

	mlp := &Report{Device: "cuda:0", Preset: string(PresetMLP), BatchSize: 64, Model: defaultMLPModel(),
		Summary: Summary{GraphStepMS: 0.105, DeviceBusyMS: 0.1, Speedup: 3.5, CaptureColdMS: 4, Captures: 3,
			CapturePooledMS: 0.4, PooledCaptures: 2, ExposedStageFraction: 0.01, GraphDeviceStepMS: 0.11}}
	want := map[string]bool{
		"graph step over device-busy time (x)":              true,
		"graphs vs eager step, default MLP at batch 64 (x)": true,
		"cold capture with instantiation (ms)":              true,
		"pooled capture (ms)":                               true,
		"exposed stage time over the step (%)":              true,
	}
	check := func(got []Target, want map[string]bool) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("targets %+v, want %v", got, want)
		}
		for _, tg := range got {
			if met, ok := want[tg.Name]; !ok || met != tg.Met {
				t.Errorf("%s: met %v (value %g %s %g), want %v", tg.Name, tg.Met, tg.Value, tg.Op, tg.Bound, met)
			}
		}
	}
	check(Targets(mlp), want)

	mlp.Summary = Summary{GraphStepMS: 0.2, DeviceBusyMS: 0.1, Speedup: 2, CaptureColdMS: 6, Captures: 3,
		CapturePooledMS: 0.6, PooledCaptures: 2, ExposedStageFraction: 0.05, GraphDeviceStepMS: 0.2}
	for k := range want {
		want[k] = false
	}
	check(Targets(mlp), want)

	// Figures that were not measured are left out, not met.
	if got := Targets(&Report{Device: "cuda:0", Preset: string(PresetTiny)}); len(got) != 0 {
		t.Fatalf("a report with nothing measured: %+v, want no targets", got)
	}

	// Another model at batch 64 is not the default MLP: no 3x target.
	mlp.Model = "784-512-10 gelu"
	delete(want, "graphs vs eager step, default MLP at batch 64 (x)")
	check(Targets(mlp), want)
}

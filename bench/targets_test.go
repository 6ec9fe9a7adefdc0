package bench

import "testing"

// presetModel is preset p's own model string and batch size.
func presetModel(t *testing.T, p Preset) (string, int) {
	t.Helper()
	w, err := p.Workload()
	if err != nil {
		t.Fatal(err)
	}
	return w.Spec.String(), w.BatchSize
}

func TestTargets(t *testing.T) {
	tinyModel, tinyBatch := presetModel(t, PresetTiny)
	mlpModel, _ := presetModel(t, PresetMLP)
	tiny := &Report{Device: "cpu", Preset: string(PresetTiny), Model: tinyModel, BatchSize: tinyBatch,
		Summary: Summary{Dispatch: &Dispatch{Speedup: 2.4}}}
	got := Targets(tiny)
	if len(got) != 1 || !got[0].Met || got[0].Value != 2.4 || got[0].Bound != 2 {
		t.Fatalf("cpu tiny at 2.4x: %+v, want one met target of 2x", got)
	}
	tiny.Summary.Dispatch.Speedup = 1.9
	if got := Targets(tiny); got[0].Met {
		t.Fatalf("cpu tiny at 1.9x: %+v, want the 2x target not met", got)
	}
	// The 2x target is the tiny preset's own workload's: with --hidden or
	// --batch-size overrides the ratio is reported, not judged.
	for _, o := range []struct {
		name  string
		model string
		batch int
	}{
		{"--hidden 32", "16-32-2 gelu cross_entropy", tinyBatch},
		{"--batch-size 16", tinyModel, 16},
		{"--hidden 32 --batch-size 16", "16-32-2 gelu cross_entropy", 16},
	} {
		r := &Report{Device: "cpu", Preset: string(PresetTiny), Model: o.model, BatchSize: o.batch,
			Summary: Summary{Dispatch: &Dispatch{Speedup: 1.2}}}
		if got := Targets(r); len(got) != 0 {
			t.Errorf("cpu tiny with %s: %+v, want no target", o.name, got)
		}
	}
	if got := Targets(&Report{Device: "cpu", Preset: string(PresetMLP), Model: mlpModel, BatchSize: 64, Summary: Summary{Dispatch: &Dispatch{Speedup: 1}}}); len(got) != 0 {
		t.Fatalf("cpu mlp: %+v, want no target (the ratio is reported)", got)
	}

	mlp := &Report{Device: "cuda:0", Preset: string(PresetMLP), BatchSize: 64, Model: mlpModel,
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

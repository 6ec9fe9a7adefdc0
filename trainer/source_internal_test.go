package trainer

import (
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// TestSourceStagesTheScheduledHyper: the record for sequence number seq
// carries Optimizer.Hyper(seq+1) (the 1-based step it trains), in
// warm-up, at its end, in the cosine decay and at the last step, across
// epochs and out of order (loaders fill in parallel); an evaluation
// record carries zeros.
func TestSourceStagesTheScheduledHyper(t *testing.T) {
	ds, err := data.Synthetic(data.SyntheticConfig{N: 100, Features: 4, Classes: 3, Seed: 2, Noise: 1})
	if err != nil {
		t.Fatal(err)
	}
	spec := nn.Spec{Inputs: 4, Hidden: []int{5}, Outputs: 3, Act: device.ActReLU, Loss: nn.LossCrossEntropy}
	layout := nn.NewLayout(spec, 8)
	const epochs, steps = 4, 13 // 100 examples in padded batches of 8
	total := epochs * steps
	opt := nn.DefaultOptimizer()
	opt.LR, opt.WarmupSteps, opt.TotalSteps = 0.1, 10, total
	src, err := newSource(ds, layout, spec, &opt, 1, true, data.RaggedPad, 0, 1, epochs)
	if err != nil {
		t.Fatal(err)
	}
	if src.steps != steps {
		t.Fatalf("%d steps per epoch, want %d", src.steps, steps)
	}

	rec := make([]float32, layout.Len)
	seen := map[float32]int{}
	for _, seq := range []int{total - 1, 0, 1, 4, 8, 9, 10, 11, 20, 30, 37, 45, 50} {
		clear(rec)
		if _, err := src.Fill(seq, rec); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, device.HyperLen)
		opt.Hyper(seq+1, want)
		got := rec[layout.Hyper : layout.Hyper+device.HyperLen]
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seq %d staged hyper-parameters %v, the optimizer prescribes %v for step %d (lr %g)",
					seq, got, want, seq+1, opt.LRAt(seq+1))
			}
		}
		if prev, ok := seen[got[device.HyperLR]]; ok {
			t.Fatalf("seq %d and %d staged the same learning rate %g", prev, seq, got[device.HyperLR])
		}
		seen[got[device.HyperLR]] = seq
	}

	eval, err := newSource(ds, layout, spec, nil, 1, false, data.RaggedPad, 0, 1, epochs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rec {
		rec[i] = 1
	}
	if _, err := eval.Fill(3, rec); err != nil {
		t.Fatal(err)
	}
	for i, v := range rec[layout.Hyper : layout.Hyper+device.HyperLen] {
		if v != 0 {
			t.Fatalf("evaluation record hyper[%d] = %g, want 0", i, v)
		}
	}
}

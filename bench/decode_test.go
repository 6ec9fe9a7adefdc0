package bench

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// decodeKernels counts, on its own decoder over a fresh model of the
// preset, what one decode step enqueues: the kernels and copies that
// nn.Decoder.Step issues.
func decodeKernels(t *testing.T, p Preset) (kernels, copies int) {
	t.Helper()
	w, err := p.Workload()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	arch, err := w.Net.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewNetModel(dev, arch, w.Optimizer, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Free()
	d, err := nn.NewDecoder(dev, m, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	st, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Destroy()
	if err := d.Start([]byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	c := NewCountingStream(st)
	if err := d.Step(c); err != nil {
		t.Fatal(err)
	}
	if err := st.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return c.Kernels, c.Copies
}

// TestRunDecodeTinyTransformer: a token preset's report holds its decode
// step, eager against replayed, with the kernels the step enqueues, all
// of them in the one graph a token launches, and the same tokens drawn
// both ways.
func TestRunDecodeTinyTransformer(t *testing.T) {
	cfg := quick(PresetTinyTransformer)
	cfg.Epochs, cfg.ProbeKernels, cfg.DecodeTokens = 1, -1, 24
	rep := runQuick(t, cfg, openCPU)
	d := rep.Decode
	if d == nil {
		t.Fatal("no decode step in the report of a token model")
	}
	kernels, copies := decodeKernels(t, PresetTinyTransformer)
	if d.KernelsPerStep != kernels || d.CopiesPerStep != copies || d.GraphNodes != kernels+copies || kernels < 10 {
		t.Errorf("decode: %d kernels, %d copies, %d graph nodes; want %d kernels, %d copies, all of them in the graph",
			d.KernelsPerStep, d.CopiesPerStep, d.GraphNodes, kernels, copies)
	}
	if d.Context != 16 || d.Vocab != 256 || d.Tokens != 24 || d.Blocks != 3 || d.CaptureError != "" {
		t.Errorf("decode: context %d, vocab %d, %d tokens in %d blocks, capture error %q; want 16, 256, 24 in 3, none",
			d.Context, d.Vocab, d.Tokens, d.Blocks, d.CaptureError)
	}
	if !d.SameTokens || d.CheckedTokens != 24 {
		t.Errorf("decode: same tokens %v over %d; want the replayed tokens the eager ones over 24", d.SameTokens, d.CheckedTokens)
	}
	for name, v := range map[string]float64{"eager_step_ms": d.EagerStepMS, "replay_step_ms": d.ReplayStepMS,
		"eager_step_p90_ms": d.EagerStepP90MS, "replay_step_p90_ms": d.ReplayStepP90MS, "speedup": d.Speedup,
		"eager_device_busy_ms": d.EagerDeviceBusyMS, "replay_device_busy_ms": d.ReplayDeviceBusyMS,
		"device_speedup": d.DeviceSpeedup, "capture_ms": d.CaptureMS} {
		if !(v > 0) {
			t.Errorf("decode %s = %g, want positive", name, v)
		}
	}
	if b := d.BackToBack; b == nil || !(b.EagerMS > 0) || !(b.ReplayMS > 0) || b.Steps != 24/dispatchRepeats {
		t.Errorf("decode back to back %+v; want both modes measured, %d tokens a run", b, 24/dispatchRepeats)
	}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Decode map[string]any `json:"decode"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kernels_per_step", "graph_nodes", "eager_step_ms", "replay_step_ms", "speedup",
		"eager_device_busy_ms", "replay_device_busy_ms", "back_to_back", "same_tokens"} {
		if _, ok := doc.Decode[k]; !ok {
			t.Errorf("decode key %q missing from the JSON", k)
		}
	}
}

// TestRunDecodeOnlyForTokenModels: a model that is not a token model has
// no decode step, and a negative DecodeTokens skips it.
func TestRunDecodeOnlyForTokenModels(t *testing.T) {
	cfg := quick(PresetTiny)
	cfg.Epochs, cfg.ProbeKernels = 1, -1
	if rep := runQuick(t, cfg, openCPU); rep.Decode != nil {
		t.Errorf("the tiny MLP has a decode step: %+v", rep.Decode)
	}
	cfg = quick(PresetTinyTransformer)
	cfg.Epochs, cfg.ProbeKernels, cfg.DecodeTokens = 1, -1, -1
	if rep := runQuick(t, cfg, openCPU); rep.Decode != nil {
		t.Errorf("decode tokens -1 measured a decode step: %+v", rep.Decode)
	}
}

// TestRunDecodeCaptureFailure: when the decode step cannot be captured,
// it is measured eagerly and the report says why.
func TestRunDecodeCaptureFailure(t *testing.T) {
	cfg := quick(PresetTinyTransformer)
	cfg.Epochs, cfg.ProbeKernels, cfg.DecodeTokens = 1, -1, 8
	rep := runQuick(t, cfg, func() (device.Device, error) {
		d, err := cpu.Open(cpu.Config{})
		return failingInstantiate{d}, err
	})
	d := rep.Decode
	if d == nil || d.CaptureError == "" || !(d.EagerStepMS > 0) || d.ReplayStepMS != 0 || d.Speedup != 0 || d.BackToBack != nil {
		t.Errorf("decode %+v; want a capture error, eager figures only", d)
	}
}

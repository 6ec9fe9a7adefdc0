package main

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/staging"
)

// quick is a bench configuration that runs in a fraction of a second,
// also under the race detector. The tests check what is printed and
// drawn, never timings.
func quick() bench.Config {
	return bench.Config{Preset: bench.PresetTiny, Epochs: 2, WarmupBatches: 1, Steps: 16, SettleSteps: 2, ProbeKernels: 20, ProbeRepeats: 2}
}

func runQuick(t *testing.T, cfg bench.Config) *bench.Report {
	t.Helper()
	rep, err := bench.Run(context.Background(), new(staging.Guard), func() (device.Device, error) { return cpu.Open(cpu.Config{}) }, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestWriteChart(t *testing.T) {
	cfg := quick()
	cfg.Epochs, cfg.ProbeKernels = 2, -1
	single := runQuick(t, cfg)
	cfg.SweepBatchSizes = []int{2, 4}
	sweep := runQuick(t, cfg)
	for name, rep := range map[string]*bench.Report{"single": single, "sweep": sweep} {
		var buf bytes.Buffer
		if err := writeChart(&buf, rep); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatalf("%s: not a PNG: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 300 {
			t.Errorf("%s: chart is %v, want a wide three-panel image", name, b)
		}
	}
}

func TestWriteText(t *testing.T) {
	cfg := quick()
	cfg.Epochs, cfg.SweepBatchSizes = 1, []int{2}
	rep := runQuick(t, cfg)
	var buf bytes.Buffer
	if err := writeText(&buf, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"speedup", "capture: cold", "kernels per step 8", "sweep", "fallbacks none"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, buf.String())
		}
	}
}

// TestWriteTextDecode: a token model's run prints its decode step, per
// token eager against replayed, with what it launches and whether the
// replayed tokens are the eager ones; the JSON holds the same figures.
func TestWriteTextDecode(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tt.json")
	code, stdout, stderr := runArgs(t, "--device", "cpu", "--preset", "tiny-transformer", "--epochs", "1",
		"--warmup-batches", "1", "--steps", "16", "--settle-steps", "2", "--probe-kernels", "-1", "--decode-tokens", "16",
		"--quiet", "--output", out)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	var rep bench.Report
	if err := readJSON(out, &rep); err != nil {
		t.Fatal(err)
	}
	d := rep.Decode
	if d == nil || rep.Settings.DecodeTokens != 16 {
		t.Fatalf("report: decode %v, settings %+v; want the decode step of 16 tokens", d, rep.Settings)
	}
	for _, want := range []string{
		"decode step (tolaria sample's loop: batch 1, context 16, temperature 1;",
		"16 tokens of each mode in 2 alternating blocks",
		"back to back, no id read",
		fmt.Sprintf("decode speedup %.2fx", d.Speedup),
		fmt.Sprintf("kernels per decode step %d (+%d copies); replayed: one launch of %d nodes per token", d.KernelsPerStep,
			d.CopiesPerStep, d.GraphNodes),
		"replayed tokens the same as eager ones (16 checked",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("text output lacks %q:\n%s", want, stdout)
		}
	}
	row := regexp.MustCompile(fmt.Sprintf(`wall, median +%.4f +%.4f +%.2fx`, d.EagerStepMS, d.ReplayStepMS, d.Speedup))
	if !row.MatchString(stdout) {
		t.Errorf("text output lacks the decode step's median wall times (%s):\n%s", row, stdout)
	}
	code, stdout, _ = runArgs(t, append([]string{"--device", "cpu"}, quickArgs...)...)
	if code != exitOK || strings.Contains(stdout, "decode") {
		t.Errorf("exit %d; a model without a decode step printed one:\n%s", code, stdout)
	}
}

// TestWriteTextReuseTrainer checks that a run without pooled captures
// says so instead of printing a pooled capture time of 0.
func TestWriteTextReuseTrainer(t *testing.T) {
	cfg := quick()
	cfg.ReuseTrainer, cfg.ProbeKernels = true, -1
	cfg.SweepBatchSizes = []int{8}
	rep := runQuick(t, cfg)
	var buf bytes.Buffer
	if err := writeText(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "no pooled capture ran") || strings.Contains(out, "pooled 0.000 ms") {
		t.Errorf("reused trainer: text lacks %q or prints a pooled time:\n%s", "no pooled capture ran", out)
	}
	if !strings.Contains(out, "0 pooled") {
		t.Errorf("text lacks the pooled capture count:\n%s", out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if row := strings.Fields(lines[len(lines)-1]); len(row) != 7 || row[0] != "8" || row[6] != "-" {
		t.Errorf("sweep row %q, want batch 8 with %q for the pooled capture", row, "-")
	}

	// With pooled captures the time is printed.
	cfg.ReuseTrainer = false
	buf.Reset()
	if err := writeText(&buf, runQuick(t, cfg)); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, ", pooled ") || strings.Contains(out, "no pooled capture ran") {
		t.Errorf("pooled captures: text lacks the pooled time:\n%s", out)
	}
}

// TestStepLaunchCostText: the launch cost from the step times is printed
// when measured and positive, "below the measurement noise" when the
// estimate was clamped to 0, and "not measured" without the figures (the
// summaries are those bench's TestStepLaunchCost checks summarise makes).
func TestStepLaunchCostText(t *testing.T) {
	tests := []struct {
		name          string
		s             bench.Summary
		text, notText string
	}{
		{"graphs faster", bench.Summary{KernelsPerStep: 10, EagerStepMS: 0.03, GraphStepMS: 0.01, StepLaunchCostUS: 2},
			"2.000 µs (from step times)", "noise"},
		{"graphs slower", bench.Summary{KernelsPerStep: 10, EagerStepMS: 0.01, GraphStepMS: 0.012},
			"below the measurement noise (from step times)", "-0.2"},
		{"equal", bench.Summary{KernelsPerStep: 10, EagerStepMS: 0.01, GraphStepMS: 0.01},
			"below the measurement noise (from step times)", "0.000 µs (from"},
		{"no graph step", bench.Summary{KernelsPerStep: 10, EagerStepMS: 0.01},
			"not measured (from step times)", "noise"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := writeText(&buf, &bench.Report{Summary: tt.s}); err != nil {
				t.Fatal(err)
			}
			if out := buf.String(); !strings.Contains(out, tt.text) || strings.Contains(out, tt.notText) {
				t.Errorf("text has no %q or has %q:\n%s", tt.text, tt.notText, out)
			}
		})
	}
}

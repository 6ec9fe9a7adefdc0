package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/workertest"
	"github.com/tolaria-ml/tolaria/trainer"
)

// The test binary doubles as a CPU tolaria-worker (workertest), so that
// run_graph_bench rl's agents run in real worker processes.
func TestMain(m *testing.M) { workertest.Main(m) }

func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	shared := trainer.NewShared()
	defer shared.Close()
	code = run(context.Background(), shared, args, &out, &errb)
	return code, out.String(), errb.String()
}

// quickArgs keep an end-to-end run well under a second.
var quickArgs = []string{"--preset", "tiny", "--epochs", "2", "--warmup-batches", "1", "--steps", "16",
	"--settle-steps", "2", "--probe-kernels", "20", "--quiet"}

func TestFlagValidation(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown device", []string{"--device", "gpu"}, `--device: must be auto, cpu or cuda, got "gpu"`},
		{"unknown preset", []string{"--preset", "huge"}, `unknown preset "huge": use mlp, tiny, cnn, transformer or tiny-transformer`},
		{"zero epochs", []string{"--epochs", "0"}, "--epochs: must be in 1..1000, got 0"},
		{"negative warm-up", []string{"--warmup-batches", "-1"}, "--warmup-batches"},
		{"too few steps", []string{"--steps", "3"}, "--steps: must be in 8..100000, got 3"},
		{"negative steps", []string{"--steps", "-5"}, "--steps: must be positive"},
		{"negative batch", []string{"--batch-size", "-1"}, "--batch-size: must be positive"},
		{"bad hidden", []string{"--hidden", "256,x"}, `--hidden: want comma-separated positive widths`},
		{"zero hidden", []string{"--hidden", "0"}, `--hidden`},
		{"bad sweep value", []string{"--sweep-batch-sizes", "8,0"}, "--sweep-batch-sizes: each batch size must be in 1..65536, got 0"},
		{"sweep not a number", []string{"--sweep-batch-sizes", "8,x"}, "sweep-batch-sizes"},
		{"zero probe", []string{"--probe-kernels", "0"}, "--probe-kernels"},
		{"zero decode tokens", []string{"--decode-tokens", "0"}, "--decode-tokens: must be positive, or negative"},
		{"too few decode tokens", []string{"--decode-tokens", "3"}, "--decode-tokens: must be in 8..100000"},
		{"unknown flag", []string{"--graphs"}, "unknown flag: --graphs"},
		{"positional argument", []string{"tiny"}, `unexpected argument "tiny": run_graph_bench takes flags only`},
		{"zero settle steps", []string{"--settle-steps", "0"}, "--settle-steps: must be at least 1"},
		{"output directory missing", []string{"--output", "/nonexistent/dir/x.json"}, `--output: directory "/nonexistent/dir" does not exist`},
		{"plot directory missing", []string{"--plot", "/nonexistent/dir/x.png"}, `--plot: directory "/nonexistent/dir" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (usage); stderr: %s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing on a usage error", stdout)
			}
		})
	}
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	out, plot := filepath.Join(dir, "tiny.json"), filepath.Join(dir, "tiny.png")
	args := append([]string{"--device", "cpu", "--output", out, "--plot", plot}, quickArgs...)
	code, stdout, stderr := runArgs(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	if !strings.Contains(stdout, "speedup") || !strings.Contains(stdout, "capture: cold") {
		t.Errorf("stdout lacks the summary:\n%s", stdout)
	}
	if stderr != "" {
		t.Errorf("--quiet run wrote to stderr: %s", stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Device  string           `json:"device"`
		Command string           `json:"command"`
		Records []map[string]any `json:"records"`
		Summary map[string]any   `json:"summary"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Device != "cpu" || len(rep.Records) != 4 || rep.Summary["kernels_per_step"] != 8.0 {
		t.Errorf("report: device %q, %d records, kernels %v", rep.Device, len(rep.Records), rep.Summary["kernels_per_step"])
	}
	if want := "run_graph_bench --device cpu --output " + out; !strings.HasPrefix(rep.Command, want) {
		t.Errorf("command %q, want it to start with %q", rep.Command, want)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("--plot wrote no PNG: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestCUDAWithoutAWorkerFailsFast(t *testing.T) {
	code, _, stderr := runArgs(t, "--device", "cuda", "--worker", "/nonexistent/tolaria-worker")
	if code != 1 || !strings.Contains(stderr, "--device cuda: no tolaria-worker") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestAutoDeviceSaysWhereCUDARuns(t *testing.T) {
	args := append([]string{"--device", "auto"}, quickArgs...)
	args = append(args, "--epochs", "1", "--probe-kernels", "-1")
	code, _, stderr := runArgs(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	if !strings.Contains(stderr, "--device auto: using the CPU device") || !strings.Contains(stderr, "tolaria-worker") {
		t.Errorf("stderr %q does not explain the fallback to the CPU device", stderr)
	}
}

func TestProgressOnStderr(t *testing.T) {
	args := []string{"--device", "cpu", "--preset", "tiny", "--epochs", "1", "--steps", "16", "--probe-kernels", "-1"}
	code, _, stderr := runArgs(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	if !strings.Contains(stderr, "run_graph_bench: batch 8 epoch 1/1") {
		t.Errorf("no progress line on stderr: %q", stderr)
	}
}

func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	shared := trainer.NewShared()
	defer shared.Close()
	if code := run(ctx, shared, append([]string{"--device", "cpu"}, quickArgs...), &out, &errb); code != exitInterrupted {
		t.Errorf("exit %d, want %d; stderr: %s", code, exitInterrupted, errb.String())
	}
}

func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"run_graph_bench", "--output", "a b.json", "--hidden", "256,128", "it's"})
	want := `run_graph_bench --output 'a b.json' --hidden 256,128 'it'\''s'`
	if got != want {
		t.Errorf("commandLine = %s, want %s", got, want)
	}
}

func TestParseHidden(t *testing.T) {
	if h, err := parseHidden("none"); err != nil || len(h) != 0 || h == nil {
		t.Errorf(`parseHidden("none") = %v, %v; want an empty, non-nil list`, h, err)
	}
	if h, err := parseHidden("256, 128"); err != nil || len(h) != 2 || h[0] != 256 || h[1] != 128 {
		t.Errorf(`parseHidden("256, 128") = %v, %v`, h, err)
	}
}

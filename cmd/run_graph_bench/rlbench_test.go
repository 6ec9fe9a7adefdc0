package main

import (
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/internal/workertest"
)

// testWorker makes this test binary the worker that runs the actors and
// learners (workertest) and returns its path.
func testWorker(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(workertest.ServeEnv, "1")
	return exe
}

func TestRLBenchFlagValidation(t *testing.T) {
	exe := testWorker(t)
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(cfg, []byte("batch_size: 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"graphs", []string{"--graphs", "maybe"}, `--graphs: must be on, off or both, got "maybe"`},
		{"cuda", []string{"--device", "cuda"}, "--device cuda: not measured yet"},
		{"device", []string{"--device", "tpu"}, `--device: must be cpu, got "tpu"`},
		{"agents order", []string{"--agents", "2,1"}, "--agents: give the counts once each, in increasing order, got [2 1]"},
		{"agents zero", []string{"--agents", "0"}, "--agents: each count must be in 1..64, got 0"},
		{"repeats", []string{"--repeats", "0"}, "--repeats: must be in 1..100, got 0"},
		{"no window", []string{"--total-steps", "1050"}, "--total-steps: 1050 leaves 50 steps per agent past learning_starts 1000; give at least 1100"},
		{"total under learning starts", []string{"--total-steps", "500"}, "--total-steps: must be at least learning_starts (1000), got 500"},
		{"learning starts", []string{"--learning-starts", "10"}, "--learning-starts: must be at least batch_size (64)"},
		{"threads", []string{"--threads", "0"}, "--threads: must be at least 1, got 0"},
		{"report interval", []string{"--report-interval", "0s"}, "--report-interval: must be in 1ms..1m, got 0s"},
		{"config missing", []string{"--config", "/nonexistent/rl.yaml"}, "--config: open /nonexistent/rl.yaml"},
		{"config key", []string{"--config", cfg}, cfg + ": batch_size"},
		{"worker missing", []string{"--worker", "/nonexistent/tolaria-worker"}, "--worker: "},
		{"argument", []string{"x"}, `rl: unexpected argument "x"`},
		{"output directory missing", []string{"--output", "/nonexistent/dir/x.json"}, `--output: directory "/nonexistent/dir" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Small settings first, so that a refusal that is missed
			// runs little (a later flag of the case takes over).
			args := append([]string{"rl", "--worker", exe, "--repeats", "1", "--graphs", "on", "--total-steps", "1200", "-q"}, tt.args...)
			code, stdout, stderr := runArgs(t, args...)
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

// TestRLBenchTinyRun measures 1 and 2 agents of a small network for a few
// hundred steps each, the agents' halves in real worker processes: every
// figure of the JSON report is positive and consistent with the run, and
// the chart is a PNG.
func TestRLBenchTinyRun(t *testing.T) {
	exe := testWorker(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rl.yaml")
	// Training steps of a batch of 256 through two layers of 64 take
	// long enough that both agents' learners train at once, after both
	// agents' worker processes have started (the processes' window).
	yaml := "model: {hidden: [64, 64]}\nbatch_size: 256\nbuffer_capacity: 1000\nlearning_starts: 256\ntarget_update: 50\neval_interval: 0\nstop_when_solved: false\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, plot := filepath.Join(dir, "rl.json"), filepath.Join(dir, "rl.png")
	code, stdout, stderr := runArgs(t, "rl", "--worker", exe, "--config", cfg, "--agents", "1,2", "--repeats", "1", "--graphs", "both",
		"--total-steps", "600", "--report-interval", "1ms", "--output", out, "--plot", plot, "-q")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.RLReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Device != "cpu" || rep.Env != "CartPole-v1" || rep.Settings.TotalSteps != 600 || rep.Settings.LearningStarts != 256 ||
		!slices.Equal(rep.Settings.Hidden, []int{64, 64}) || rep.Settings.BatchSize != 256 || !strings.Contains(rep.Command, "--agents 1,2") {
		t.Errorf("report header: device %q, env %q, settings %+v, command %q", rep.Device, rep.Env, rep.Settings, rep.Command)
	}
	if len(rep.Runs) != 2*2*2 {
		t.Fatalf("%d runs, want 8 (2 agent counts, graphs on and off, 2 modes)", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		maxSteps := r.Agents * rep.Settings.TotalSteps
		switch {
		case r.EnvSteps <= 0 || r.EnvSteps > maxSteps:
			t.Errorf("%+v: env steps outside 1..%d", r, maxSteps)
		case r.LearnerSteps <= 0 || r.LearnerSteps > maxSteps:
			t.Errorf("%+v: learner steps outside 1..%d", r, maxSteps)
		case !(r.WindowSeconds > 0) || r.WindowSeconds > r.WallSeconds:
			t.Errorf("%+v: window of %g s in a run of %g s", r, r.WindowSeconds, r.WallSeconds)
		case r.Mode == bench.RLProcesses && (r.Window != bench.RLWindowReadings || r.Marks < 2):
			t.Errorf("%+v: the processes' window is not %d readings", r, r.Marks)
		case r.Mode == bench.RLSequential && r.Window != bench.RLWindowDifference:
			t.Errorf("%+v: the sequential loop's window is not a difference of two runs", r)
		case math.Abs(r.EnvStepsPerSec-float64(r.EnvSteps)/r.WindowSeconds) > 1e-3*r.EnvStepsPerSec:
			t.Errorf("%+v: env steps/s is not steps over seconds", r)
		}
	}
	if len(rep.Points) != 4 || len(rep.GraphsGain) != 4 {
		t.Fatalf("%d points and %d graphs gains, want 4 and 4", len(rep.Points), len(rep.GraphsGain))
	}
	for _, p := range rep.Points {
		for _, s := range []bench.RLSpread{p.Processes.EnvStepsPerSec, p.Processes.LearnerStepsPerSec, p.Sequential.EnvStepsPerSec,
			p.Sequential.LearnerStepsPerSec, p.EnvSpeedup, p.LearnerSpeedup} {
			if !(s.Median > 0) || s.N != 1 || s.Min != s.Median || s.Max != s.Median {
				t.Errorf("%d agents, graphs %v: %+v is not one positive measurement", p.Agents, p.Graphs, s)
			}
		}
		want := p.Processes.EnvStepsPerSec.Median / p.Sequential.EnvStepsPerSec.Median
		if math.Abs(p.EnvSpeedup.Median-want) > 1e-3*want {
			t.Errorf("%d agents: speed-up %g, want processes over sequential, %g", p.Agents, p.EnvSpeedup.Median, want)
		}
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("the chart is not a PNG: %v", err)
	}
	for _, want := range []string{"agents", "speed-up", "graphs on over off"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table does not say %q:\n%s", want, stdout)
		}
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/trainer"
)

func newGPUReportCmd() *cobra.Command {
	var dir, out, profile, version string
	cmd := &cobra.Command{
		Use:   "gpu-report",
		Short: "write the GPU bundle's report.md from what run.sh's parts wrote",
		Long: `gpu-report writes results/report.md at the end of the GPU bundle's run.sh: the
device and driver, each part's outcome and time, the training run's accuracy,
run_graph_bench's eager and graph figures, the PyTorch peer's step times as
ratios, and the first lines of every failure. docs/gpu-results.md says what to
do with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if profile != "gpu" && profile != "rehearsal" {
				return usagef("--profile: gpu or rehearsal, got %q", profile)
			}
			var ver string
			if version != "" {
				b, err := os.ReadFile(version)
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
				ver = strings.TrimSpace(string(b))
			}
			text, err := gpuReport(dir, profile, ver, time.Now().UTC())
			if err != nil {
				return err
			}
			if out == "" {
				_, err = fmt.Fprint(cmd.OutOrStdout(), text)
				return err
			}
			return atomicfile.WriteFile(out, []byte(text), 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "results", "results", "run.sh's results directory")
	f.StringVar(&out, "output", "", "the report to write (default: standard output)")
	f.StringVar(&profile, "profile", "gpu", "gpu, or rehearsal (the emulated driver: its figures mean nothing)")
	f.StringVar(&version, "version-file", "", "the bundle's VERSION file (commit and build date)")
	return cmd
}

// peerReport is what bench/peer/torch_mlp_cuda.py writes.
type peerReport struct {
	Skipped string      `json:"skipped"`
	Torch   string      `json:"torch"`
	CUDA    string      `json:"cuda"`
	Device  string      `json:"device"`
	Points  []peerPoint `json:"points"`
}

type peerPoint struct {
	Preset    string              `json:"preset"`
	BatchSize int                 `json:"batch_size"`
	Modes     map[string]peerMode `json:"modes"`
}

type peerMode struct {
	StepMS         *float64 `json:"step_ms"`
	CompileSeconds *float64 `json:"compile_seconds"`
	Error          string   `json:"error"`
}

// peerModes are the PyTorch peer's ways of running the step, in the
// report's order.
var peerModes = []string{"eager", "graphs", "compile"}

// gpuReport renders report.md from the results directory. Whatever a part
// did not write is reported as missing; the report itself never fails for
// it, since a run cut short must still say what it has.
func gpuReport(dir, profile, version string, now time.Time) (string, error) {
	parts, err := readParts(dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# tolaria GPU check, %s\n\n", now.Format("2006-01-02 15:04 MST"))
	if version != "" {
		fmt.Fprintf(&b, "Bundle: %s\n\n", version)
	}
	if profile == "rehearsal" {
		b.WriteString("**Rehearsal on the emulated CUDA driver**: every part ran at a reduced size to check the bundle; " +
			"no figure below is a GPU measurement.\n\n")
	}
	reportDevice(&b, dir)
	reportParts(&b, parts)
	reportTrain(&b, dir)
	tolaria := reportBench(&b, dir)
	reportDecode(&b, dir)
	reportPeer(&b, dir, tolaria)
	reportBudget(&b, dir)
	reportFailures(&b, parts)
	return b.String(), nil
}

func reportDevice(b *strings.Builder, dir string) {
	b.WriteString("## Device\n\n")
	var info struct {
		Name              string `json:"name"`
		Model             string `json:"model"`
		ComputeCapability string `json:"compute_capability"`
		DriverVersion     int    `json:"driver_version"`
		TotalBytes        int64  `json:"total_bytes"`
		PTXVersion        string `json:"ptx_version"`
		PTXTarget         string `json:"ptx_target"`
		JIT               struct {
			WallMS float64 `json:"wall_ms"`
		} `json:"jit"`
	}
	if err := readJSON(filepath.Join(dir, "first-light.json"), &info); err != nil {
		fmt.Fprintf(b, "No device was opened (first-light.json: %v).\n\n", err)
		return
	}
	fmt.Fprintf(b, "- GPU: %s (%s), compute capability %s, %.1f GiB\n", info.Model, info.Name, info.ComputeCapability,
		float64(info.TotalBytes)/(1<<30))
	driver := fmt.Sprintf("CUDA %d.%d", info.DriverVersion/1000, info.DriverVersion%1000/10)
	if v := nvidiaDriver(dir); v != "" {
		driver += ", driver " + v
	}
	fmt.Fprintf(b, "- Driver: %s\n", driver)
	fmt.Fprintf(b, "- Kernels: PTX ISA %s for %s, JIT-compiled when the device opened (%.1f ms)\n\n",
		info.PTXVersion, info.PTXTarget, info.JIT.WallMS)
}

func reportParts(b *strings.Builder, parts []Part) {
	b.WriteString("## Parts\n\n| part | result | seconds | limit |\n| --- | --- | ---: | ---: |\n")
	seen := map[string]bool{}
	for _, p := range parts {
		seen[p.Name] = true
		fmt.Fprintf(b, "| %s | %s | %.1f | %.0f |\n", p.Name, p.Status, p.Seconds, p.Limit)
	}
	for _, name := range gpuParts {
		if !seen[name] {
			fmt.Fprintf(b, "| %s | not recorded | | |\n", name)
		}
	}
	b.WriteString("\n")
}

func reportTrain(b *strings.Builder, dir string) {
	var s trainer.Summary
	if err := readJSON(filepath.Join(dir, "train.json"), &s); err != nil {
		return
	}
	b.WriteString("## Training (tolaria train --device cuda --enable-graphs, Fashion-MNIST)\n\n")
	fmt.Fprintf(b, "- test accuracy %.4f, test loss %.4f, train loss %.4f after %d epochs\n", s.TestAccuracy, s.TestLoss,
		s.TrainLoss, s.Epochs)
	fmt.Fprintf(b, "- %d steps: %d replayed, %d eager, fallbacks %v; %d captures in %.3f ms\n", s.Steps, s.GraphReplays,
		s.EagerSteps, s.Fallbacks, s.Captures, s.CaptureSeconds*1e3)
	fmt.Fprintf(b, "- %.0f samples/s over %.1f s\n\n", s.SamplesPerSecond, s.WallSeconds)
}

// tolariaPoint is one bench point's figures, for the peer's ratios.
type tolariaPoint struct{ eager, graph float64 }

func reportBench(b *strings.Builder, dir string) map[string]tolariaPoint {
	figures := map[string]tolariaPoint{}
	header := false
	for _, preset := range benchPresets {
		model, points, err := benchPoints(dir, preset)
		if err != nil {
			continue
		}
		if !header {
			b.WriteString("## Graphs against eager (run_graph_bench --device cuda)\n\n")
			b.WriteString("Wall time per step of the pipelined loop (mean), staging copies overlapped; capture of every " +
				"staging slot's executable, cold (new pool) and pooled (updated).\n\n")
			b.WriteString("| preset | batch | eager ms | graph ms | speedup | replay ms | kernels/step | launch µs | capture cold ms | capture pooled ms | fallbacks |\n")
			b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
			header = true
		}
		for _, p := range points {
			s := p.Summary
			figures[fmt.Sprintf("%s:%d", preset, p.BatchSize)] = tolariaPoint{s.EagerStepMeanMS, s.GraphStepMeanMS}
			fmt.Fprintf(b, "| %s (%s) | %d | %.4f | %.4f | %.2fx | %.4f | %d | %.2f | %.3f | %.3f | %s |\n", preset, model,
				p.BatchSize, s.EagerStepMeanMS, s.GraphStepMeanMS, ratioOf(s.EagerStepMeanMS, s.GraphStepMeanMS),
				s.ReplayMS, s.KernelsPerStep, s.LaunchCostUS, s.CaptureColdMS, s.CapturePooledMS, fallbackCell(s.Fallbacks))
		}
	}
	if header {
		b.WriteString("\n")
	}
	return figures
}

// benchPresets are the presets whose reports run.sh writes
// (bench-PRESET.json), in the report's order.
var benchPresets = []string{"mlp", "tiny", "cnn", "tiny-transformer", "transformer"}

// reportDecode writes the decode step of the token presets' reports.
func reportDecode(b *strings.Builder, dir string) {
	header := false
	for _, preset := range benchPresets {
		var r bench.Report
		if err := readJSON(filepath.Join(dir, "bench-"+preset+".json"), &r); err != nil || r.Decode == nil {
			continue
		}
		if !header {
			b.WriteString("## Decode step, replayed against eager (run_graph_bench --device cuda)\n\n")
			b.WriteString("tolaria sample's loop at batch 1: each token's step enqueued afresh (eager) or replayed with one " +
				"launch, then a synchronisation and the id read back; milliseconds per token (median). Device: between " +
				"events around the step. Back to back: tokens issued without reading an id, one synchronisation a run.\n\n")
			b.WriteString("| preset | context | kernels/step | graph nodes | eager ms | replayed ms | speedup | device eager ms | device replayed ms | back to back | capture ms | same tokens |\n")
			b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
			header = true
		}
		d := r.Decode
		back := ""
		if d.BackToBack != nil {
			back = fmt.Sprintf("%.2fx", d.BackToBack.Speedup)
		}
		same := "yes"
		switch {
		case d.CaptureError != "":
			same = "not captured: " + firstLine(d.CaptureError)
		case !d.SameTokens:
			same = fmt.Sprintf("NO (%d checked)", d.CheckedTokens)
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %.4f | %s | %s | %.4f | %s | %s | %.3f | %s |\n", preset, d.Context,
			d.KernelsPerStep, d.GraphNodes, d.EagerStepMS, msCell(d.ReplayStepMS), ratioCell(d.EagerStepMS, d.ReplayStepMS),
			d.EagerDeviceBusyMS, msCell(d.ReplayDeviceBusyMS), back, d.CaptureMS, same)
	}
	if header {
		b.WriteString("\n")
	}
}

func fallbackCell(m map[string]int) string {
	if fallbackCount(m) == 0 {
		return "none"
	}
	return fmt.Sprint(m)
}

func reportPeer(b *strings.Builder, dir string, tolaria map[string]tolariaPoint) {
	var p peerReport
	if err := readJSON(filepath.Join(dir, "peer.json"), &p); err != nil {
		return
	}
	b.WriteString("## PyTorch on the same GPU (bench/peer/torch_mlp_cuda.py)\n\n")
	if p.Skipped != "" {
		fmt.Fprintf(b, "Skipped: %s\n\n", p.Skipped)
		return
	}
	fmt.Fprintf(b, "PyTorch %s (CUDA %s) on %s. Milliseconds per step (mean over a round, median of rounds); "+
		"a ratio is tolaria's graph step over PyTorch's: below 1, tolaria is faster.\n\n", p.Torch, p.CUDA, p.Device)
	b.WriteString("| preset | batch | tolaria graphs | torch eager | torch graphs | torch compile | vs eager | vs graphs | vs compile |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, pt := range p.Points {
		t := tolaria[fmt.Sprintf("%s:%d", pt.Preset, pt.BatchSize)]
		cells := []string{pt.Preset, fmt.Sprint(pt.BatchSize), msCell(t.graph)}
		var ratios []string
		for _, mode := range peerModes {
			m, ok := pt.Modes[mode]
			switch {
			case !ok:
				cells = append(cells, "not run")
				ratios = append(ratios, "")
			case m.Error != "" || m.StepMS == nil:
				cells = append(cells, "failed: "+firstLine(m.Error))
				ratios = append(ratios, "")
			default:
				cells = append(cells, msCell(*m.StepMS))
				ratios = append(ratios, ratioCell(t.graph, *m.StepMS))
			}
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(append(cells, ratios...), " | "))
	}
	b.WriteString("\n")
}

// reportBudget renders the budget part's comparison (budget.json, written
// by budget-check.sh): the bill a trial's worker asked the broker for
// against the driver's used memory for that worker's process.
func reportBudget(b *strings.Builder, dir string) {
	var c struct {
		Bill        int64   `json:"bill_bytes"`
		Context     int64   `json:"context_bytes"`
		InfoContext int64   `json:"info_context_bytes"`
		Used        int64   `json:"used_bytes"`
		Source      string  `json:"used_source"`
		Ratio       float64 `json:"bill_over_used"`
		Passed      bool    `json:"passed"`
		Detail      string  `json:"detail"`
	}
	if err := readJSON(filepath.Join(dir, "budget.json"), &c); err != nil {
		return
	}
	covered := "yes"
	if !c.Passed {
		covered = "no"
	}
	b.WriteString("## Device-memory budget\n\n")
	b.WriteString("| bill (bytes) | of it the context | tolaria-worker info's context | driver's used memory | bill / used | covered with 10% headroom |\n")
	b.WriteString("| ---: | ---: | ---: | ---: | ---: | --- |\n")
	fmt.Fprintf(b, "| %d | %d | %d | %d | %.3f | %s |\n\n", c.Bill, c.Context, c.InfoContext, c.Used, c.Ratio, covered)
	fmt.Fprintf(b, "The driver's figure: %s. %s\n\n", c.Source, c.Detail)
}

func reportFailures(b *strings.Builder, parts []Part) {
	var failed []Part
	for _, p := range parts {
		if p.Status != "passed" && p.Detail != "" {
			failed = append(failed, p)
		}
	}
	if len(failed) == 0 {
		return
	}
	b.WriteString("## Failures and skips\n\n")
	for _, p := range failed {
		fmt.Fprintf(b, "- **%s** (%s): %s\n", p.Name, p.Status, strings.TrimSpace(p.Detail))
	}
	b.WriteString("\n")
}

func msCell(ms float64) string {
	if ms <= 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.4f", ms)
}

func ratioCell(a, b float64) string {
	if a <= 0 || b <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func ratioOf(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return strings.ReplaceAll(s, "|", "/")
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// options are the command's flags.
type options struct {
	epochs, warmup, batch, steps, settle, probe  int
	decodeTokens                                 int
	device, preset, hidden, output, plot, worker string
	sweep                                        []int
	reuse, quiet                                 bool
	seed                                         uint64
	peerOpts                                     peerOptions
}

func newRoot(shared *trainer.Shared, stdout, stderr io.Writer, args []string) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "run_graph_bench",
		Short: "measure what CUDA-graph capture and replay buy for a training step",
		Long: `run_graph_bench runs a training step eagerly and replayed from a captured graph in
the trainer's pipelined loop (staging stream, double-buffered inputs, copy-done
and step-done events) and reports, per epoch and per run: step time (median and
p90, wall and device events), speedup, capture time cold and pooled, replay and
stage-copy time, exposed stage time, kernels per step, device-busy and host CPU
time per step, launch cost per kernel and graph-pool bytes. For a token model
(the transformer presets) it also measures the decode step tolaria sample
runs, at batch 1: enqueued afresh per token against replayed with one launch.

Each epoch builds a new trainer-like setup (new parameters, new stager) that
leases from one shared graph pool, so epoch 1 captures cold and later epochs
update pooled executables; --reuse-trainer keeps one setup instead.

With --peer torch it instead runs the default MLP's training step side by side
with PyTorch on the CPU (bench/peer/torch_mlp.py: same model, optimizer,
hyper-parameters, batch, Fashion-MNIST data, input standardisation and thread
count), tolaria with graphs on, the two alternating, at every --peer-batch-sizes
and --peer-widths, and reports the ratio of median step times and of epoch
times and the samples/s of both. make bench-peer installs what the peer needs.

docs/bench.md explains every number.`,
		Example: `  run_graph_bench --preset tiny --output tiny.json --plot tiny.png
  run_graph_bench --preset mlp --sweep-batch-sizes 8,16,32,64,128 --output mlp.json --plot mlp.png
  run_graph_bench --peer torch --peer-batch-sizes 8,64,256,1024 --peer-widths 128,256,512,1024,2048 --output peer.json --plot peer.png
  run_graph_bench rl --output rl.json --plot rl.png`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q: run_graph_bench takes flags only (see --help)", args[0])
			}
			return nil
		},
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			argv := append([]string{"run_graph_bench"}, args...)
			if cmd.Flags().Changed("peer") {
				return runPeerBench(cmd, shared, o, argv)
			}
			for _, name := range peerOnly {
				if cmd.Flags().Changed(name) {
					return usagef("--%s: only used with --peer", name)
				}
			}
			return runBench(cmd, shared, o, argv)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	f.IntVar(&o.epochs, "epochs", bench.DefaultEpochs, "epochs; each builds a new setup (unless --reuse-trainer) and measures an eager and a graph phase")
	f.IntVar(&o.warmup, "warmup-batches", bench.DefaultWarmupBatches, "eager steps a new setup runs before measuring or capturing")
	f.StringVar(&o.device, "device", "auto", "auto, cpu or cuda (cuda runs in the tolaria-worker built with -tags cuda)")
	f.StringVar(&o.worker, "worker", os.Getenv("TOLARIA_WORKER"), "path of the tolaria-worker binary for --device cuda (default: next to run_graph_bench)")
	f.StringVar(&o.preset, "preset", string(bench.PresetMLP), "mlp (784-256-128-10 GELU, AdamW, batch 64), tiny (Linear 16->2, batch 8), cnn (examples/cnn.yaml, batch 64), transformer (examples/char-transformer.yaml on synthetic token windows, batch 32) or tiny-transformer (context 16, width 16, 1 block of 2 heads, batch 8)")
	f.IntVar(&o.batch, "batch-size", 0, "batch size (0: the preset's)")
	f.StringVar(&o.hidden, "hidden", "", `hidden layer widths, e.g. "256,128", or "none" (default: the preset's)`)
	f.BoolVar(&o.reuse, "reuse-trainer", false, "keep one setup for every epoch: capture once, replay in every epoch")
	f.IntVar(&o.steps, "steps", 0, fmt.Sprintf("measured steps per phase (0: %d for mlp, %d for tiny)", bench.DefaultStepsMLP, bench.DefaultStepsTiny))
	f.IntVar(&o.settle, "settle-steps", bench.DefaultSettleSteps, "unmeasured steps before each measured block, in its mode, to fill the pipeline with that mode's steps (6 or more: the host runs up to five steps ahead)")
	f.IntVar(&o.probe, "probe-kernels", bench.DefaultProbeKernels, "kernels in the launch-cost probe (negative skips it)")
	f.IntVar(&o.decodeTokens, "decode-tokens", bench.DefaultDecodeTokens, "measured tokens of each mode of the decode step (token models: transformer, tiny-transformer; negative skips it)")
	f.StringVar(&o.output, "output", "", "write the JSON report to this file")
	f.StringVar(&o.plot, "plot", "", "write the chart (PNG) to this file")
	f.IntSliceVar(&o.sweep, "sweep-batch-sizes", nil, "also measure at each of these batch sizes, e.g. 8,32,64")
	f.Uint64Var(&o.seed, "seed", 1, "seed for parameters and synthetic batches")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	addPeerFlags(cmd, &o.peerOpts)
	rlPlot := newRLPlotCmd()
	rlPlot.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(rlPlot)
	rlBench := newRLBenchCmd(shared, append([]string{"run_graph_bench"}, args...))
	for _, sub := range []*cobra.Command{rlBench, newGPUCheckCmd(), newGPUReportCmd()} {
		sub.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
		cmd.AddCommand(sub)
	}
	return cmd
}

// config turns the flags into a bench configuration, reporting a bad flag
// by name.
func (o options) config() (bench.Config, error) {
	cfg := bench.Config{
		Preset: bench.Preset(o.preset), BatchSize: o.batch, Epochs: o.epochs, WarmupBatches: o.warmup,
		Steps: o.steps, SettleSteps: o.settle, ReuseTrainer: o.reuse, ProbeKernels: o.probe,
		SweepBatchSizes: o.sweep, Seed: o.seed, DecodeTokens: o.decodeTokens,
	}
	switch {
	case o.device != "auto" && o.device != "cpu" && o.device != "cuda":
		return cfg, usagef("--device: must be auto, cpu or cuda, got %q", o.device)
	case o.epochs < 1:
		return cfg, usagef("--epochs: must be in 1..%d, got %d", bench.MaxEpochs, o.epochs)
	case o.settle < 1:
		return cfg, usagef("--settle-steps: must be at least 1, got %d", o.settle)
	case o.batch < 0:
		return cfg, usagef("--batch-size: must be positive (0 keeps the preset's), got %d", o.batch)
	case o.steps < 0:
		return cfg, usagef("--steps: must be positive (0 keeps the preset's default), got %d", o.steps)
	case o.probe == 0:
		return cfg, usagef("--probe-kernels: must be positive, or negative to skip the probe, got 0")
	case o.decodeTokens == 0:
		return cfg, usagef("--decode-tokens: must be positive, or negative to skip the decode step, got 0")
	}
	if o.hidden != "" {
		h, err := parseHidden(o.hidden)
		if err != nil {
			return cfg, usagef("--hidden: %v", err)
		}
		cfg.Hidden, cfg.HiddenSet = h, true
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, usagef("--%v", err)
	}
	return cfg, nil
}

func parseHidden(s string) ([]int, error) {
	if s == "none" {
		return []int{}, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf(`want comma-separated positive widths such as "256,128", or "none"; got %q`, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// measure runs the benchmark: on the CPU device in this process, or on a
// GPU in a tolaria-worker process (this binary never links CUDA).
func (o options) measure(ctx context.Context, shared *trainer.Shared, cfg bench.Config, stderr io.Writer) (*bench.Report, error) {
	if o.device != "cpu" {
		proc, _, err := train.CUDAWorker(ctx, o.worker, 0, os.Stderr)
		switch {
		case err == nil:
			_, rep, err := jobserver.Bench(ctx, proc, "cuda", cfg)
			return rep, err
		case o.device == "cuda":
			return nil, fmt.Errorf("--device cuda: %w", err)
		default:
			fmt.Fprintf(stderr, "run_graph_bench: --device auto: using the CPU device (%v)\n", err)
		}
	}
	return bench.Run(ctx, shared.Guard(), func() (device.Device, error) { return cpu.Open(cpu.Config{}) }, cfg)
}

// checkWritable fails early, before a long run, when an output file's
// directory does not exist.
func checkWritable(flag, path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return usagef("--%s: directory %q does not exist; create it first", flag, dir)
	}
	return nil
}

func runBench(cmd *cobra.Command, shared *trainer.Shared, o options, argv []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	cfg, err := o.config()
	if err != nil {
		return err
	}
	if err := errors.Join(checkWritable("output", o.output), checkWritable("plot", o.plot)); err != nil {
		return err
	}
	if !o.quiet {
		cfg.Progress = func(msg string) { fmt.Fprintln(stderr, "run_graph_bench:", msg) }
	}
	rep, err := o.measure(cmd.Context(), shared, cfg, stderr)
	if err != nil {
		return err
	}
	rep.Command = commandLine(argv)
	if err := writeOutputs(o.output, o.plot, func(w io.Writer) error { return bench.WriteJSON(w, rep) },
		func(w io.Writer) error { return writeChart(w, rep) }); err != nil {
		return err
	}
	return writeText(stdout, rep)
}

// writeOutputs writes a report's JSON to output and its chart to plot,
// each atomically, where given.
func writeOutputs(output, plot string, json, chart func(io.Writer) error) error {
	if output != "" {
		if err := atomicfile.Write(output, 0o644, json); err != nil {
			return fmt.Errorf("--output: %w", err)
		}
	}
	if plot != "" {
		if err := atomicfile.Write(plot, 0o644, chart); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}

// commandLine renders argv as a shell command line, quoting what needs it.
func commandLine(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}

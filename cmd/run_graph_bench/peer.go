package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// torchScript is the peer --peer torch runs, relative to the repository
// root, under Debian's python (the python3-torch package).
const (
	torchPython    = "/usr/bin/python3"
	torchScript    = "bench/peer/torch_mlp.py"
	torchNetScript = "bench/peer/torch_net.py"
)

// peerOptions are the flags of the side-by-side mode.
type peerOptions struct {
	peer, model, command, epochWidths, dataDir string
	batches, widths                            []int
	waitPolicies                               []string
	rounds, threads, context                   int
}

func addPeerFlags(cmd *cobra.Command, p *peerOptions) {
	f := cmd.Flags()
	f.StringVar(&p.peer, "peer", "", "run side by side with a peer instead: torch (PyTorch on the CPU, bench/peer/torch_mlp.py), graphs on, same model, data and threads")
	f.StringVar(&p.model, "peer-model", "mlp", `the model of the side-by-side run: mlp (784-w-(w/2)-10 at each --peer-widths), cnn (examples/cnn.yaml's, bench/peer/torch_net.py) or transformer (examples/char-transformer.yaml's on synthetic token windows, bench/peer/torch_net.py)`)
	f.StringVar(&p.command, "peer-command", torchPython+" "+torchScript, "the peer's command line (split at spaces); the point's flags are appended (default for --peer-model cnn and transformer: "+torchPython+" "+torchNetScript+")")
	f.IntSliceVar(&p.batches, "peer-batch-sizes", bench.DefaultPeerBatchSizes, "batch sizes of the side-by-side run")
	f.IntSliceVar(&p.widths, "peer-widths", bench.DefaultPeerWidths, "hidden widths w of the side-by-side run: the model is 784-w-(w/2)-10")
	f.StringVar(&p.epochWidths, "peer-epoch-widths", "256", `widths at which a whole Fashion-MNIST epoch is timed on both sides too: a list, "all" or "none"`)
	f.IntVar(&p.rounds, "peer-rounds", bench.DefaultPeerRounds, "measurements per point and side, alternating which side goes first")
	f.IntVar(&p.threads, "threads", 0, "threads of both sides in the side-by-side run: the CPU device's threads (and GOMAXPROCS) and the peer's torch.set_num_threads (0: the cores available)")
	f.StringSliceVar(&p.waitPolicies, "peer-wait-policies", []string{"passive", "unset"},
		`OMP_WAIT_POLICY settings the peer runs under at every point (passive, active, unset: libgomp's default); each point compares tolaria with the fastest, so the peer is at its best whatever the machine's load`)
	f.IntVar(&p.context, "peer-context", 64, "positions per window of --peer-model transformer (the example's 64)")
	f.StringVar(&p.dataDir, "data-dir", data.DefaultFashionMNISTDir, "directory of the Fashion-MNIST .gz files (side-by-side run)")
}

// peerOnly are the flags of the side-by-side run alone.
var peerOnly = []string{"peer-model", "peer-context", "peer-command", "peer-batch-sizes", "peer-widths", "peer-epoch-widths", "peer-rounds", "peer-wait-policies", "threads", "data-dir"}

// peerConflicts are the flags that mean nothing in the side-by-side run.
var peerConflicts = []string{"preset", "batch-size", "hidden", "sweep-batch-sizes", "reuse-trainer", "epochs",
	"probe-kernels", "device", "worker"}

// peerConfig turns the flags into a side-by-side configuration.
func (o options) peerConfig(cmd *cobra.Command, shared *trainer.Shared) (bench.PeerConfig, error) {
	p := o.peerOpts
	var cfg bench.PeerConfig
	if p.peer != "torch" {
		return cfg, usagef("--peer: the only peer is torch, got %q", p.peer)
	}
	for _, name := range peerConflicts {
		if cmd.Flags().Changed(name) {
			return cfg, usagef("--%s: not used with --peer (the side-by-side run measures the mlp model on the CPU device at --peer-batch-sizes and --peer-widths)", name)
		}
	}
	switch {
	case o.settle < 1:
		return cfg, usagef("--settle-steps: must be at least 1, got %d", o.settle)
	case o.steps < 0:
		return cfg, usagef("--steps: must be positive (0 keeps the default, %d), got %d", bench.DefaultPeerSteps, o.steps)
	case p.rounds < 1 || p.rounds > 100:
		return cfg, usagef("--peer-rounds: must be in 1..100, got %d", p.rounds)
	case p.threads < 0:
		return cfg, usagef("--threads: must be positive (0: the cores available), got %d", p.threads)
	}
	script := torchScript
	var net *nn.Net
	switch p.model {
	case "mlp":
	case "cnn", "transformer":
		for _, name := range []string{"peer-widths", "peer-epoch-widths"} {
			if cmd.Flags().Changed(name) {
				return cfg, usagef("--%s: not used with --peer-model %s (its model has no width; epochs are timed for the mlp)", name, p.model)
			}
		}
		p.widths, p.epochWidths, script = nil, "none", torchNetScript
		if !cmd.Flags().Changed("peer-command") {
			p.command = torchPython + " " + torchNetScript
		}
		n := bench.CNN()
		if p.model == "transformer" {
			n = bench.TransformerOver(p.context)
		}
		net = &n
	default:
		return cfg, usagef("--peer-model: mlp, cnn or transformer, got %q", p.model)
	}
	if cmd.Flags().Changed("peer-context") {
		if p.model != "transformer" {
			return cfg, usagef("--peer-context: only with --peer-model transformer")
		}
		if p.context < 1 {
			return cfg, usagef("--peer-context: must be positive, got %d", p.context)
		}
		if _, err := net.Resolve(); err != nil {
			return cfg, usagef("--peer-context %d: %v", p.context, err)
		}
	}
	cfg = bench.PeerConfig{Command: strings.Fields(p.command), BatchSizes: p.batches, Widths: p.widths,
		Threads: p.threads, WarmupSteps: o.warmup, SettleSteps: o.settle, Steps: o.steps, Rounds: p.rounds,
		DataDir: p.dataDir, Seed: o.seed, WaitPolicies: p.waitPolicies}
	if cfg.Threads == 0 {
		cfg.Threads = runtime.NumCPU()
	}
	cfg.Epoch = epochRunner(shared, openCPU(cfg.Threads), cfg.DataDir, cfg.Threads)
	cfg.Env = []string{fmt.Sprintf("OMP_NUM_THREADS=%d", cfg.Threads)}
	switch p.epochWidths {
	case "none":
	case "all":
		cfg.EpochWidths = slices.Clone(p.widths)
	default:
		ws, err := parseHidden(p.epochWidths)
		if err != nil {
			return cfg, usagef("--peer-epoch-widths: %v", err)
		}
		cfg.EpochWidths = ws
	}
	if net != nil {
		layers, err := json.Marshal(job.Layers(net.Layers))
		if err != nil {
			return cfg, err
		}
		cfg.Net, cfg.NetArgs = net, []string{"--layers", string(layers), "--input", shapeFlag(net.Input)}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, usagef("--%v", err)
	}
	if !cmd.Flags().Changed("peer-command") {
		if _, err := os.Stat(script); err != nil {
			return cfg, usagef("--peer torch: %s not found: run from the repository root, or give --peer-command", script)
		}
		if _, err := os.Stat(torchPython); err != nil {
			return cfg, usagef("--peer torch: %s not found: install Debian's python3 and python3-torch (make bench-peer does), or give --peer-command", torchPython)
		}
	}
	return cfg, nil
}

// shapeFlag is a shape as torch_net.py's --input takes it: "1,28,28".
func shapeFlag(s nn.Shape) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, ",")
}

// runPeerBench runs the side-by-side mode.
func runPeerBench(cmd *cobra.Command, shared *trainer.Shared, o options, argv []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	cfg, err := o.peerConfig(cmd, shared)
	if err != nil {
		return err
	}
	if err := errors.Join(checkWritable("output", o.output), checkWritable("plot", o.plot)); err != nil {
		return err
	}
	if !o.quiet {
		cfg.Progress = func(msg string) { fmt.Fprintln(stderr, "run_graph_bench:", msg) }
	}
	// The CPU device splits its kernels across cfg.Threads threads; Go
	// gets as many, as a process started with GOMAXPROCS=threads would.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(cfg.Threads))
	rep, err := bench.RunPeer(cmd.Context(), shared.Guard(), openCPU(cfg.Threads), cfg)
	if err != nil {
		return err
	}
	rep.Command = commandLine(argv)
	if err := writeOutputs(o.output, o.plot, func(w io.Writer) error { return bench.WritePeerJSON(w, rep) },
		func(w io.Writer) error { return writePeerChart(w, rep) }); err != nil {
		return err
	}
	return writePeerText(stdout, rep)
}

// openCPU opens tolaria's side of the comparison: the CPU device, its
// kernels split across threads threads.
func openCPU(threads int) bench.Opener {
	return func() (device.Device, error) { return cpu.Open(cpu.Config{Threads: threads}) }
}

// epochRunner times tolaria's epoch as `tolaria train --device cpu
// --enable-graphs --epochs 1` runs it (the job's defaults, the point's
// batch size and model), in a temporary run directory, on Fashion-MNIST
// loaded and standardised once.
func epochRunner(shared *trainer.Shared, open bench.Opener, dataDir string, threads int) bench.EpochFunc {
	var (
		once        sync.Once
		train, test data.Examples
		loadErr     error
	)
	return func(ctx context.Context, w bench.Workload, seed uint64) (bench.PeerEpoch, error) {
		spec := job.Default()
		spec.Device, spec.EnableGraphs, spec.Epochs, spec.DataDir = "cpu", true, 1, dataDir
		spec.BatchSize, spec.Hidden, spec.Seed, spec.CPUThreads = w.BatchSize, slices.Clone(w.Spec.Hidden), seed, threads
		dir, err := os.MkdirTemp("", "run_graph_bench-epoch-")
		if err != nil {
			return bench.PeerEpoch{}, err
		}
		defer os.RemoveAll(dir)
		spec.RunDir = dir
		if err := spec.Validate(); err != nil {
			return bench.PeerEpoch{}, err
		}
		once.Do(func() { train, test, loadErr = spec.LoadData() })
		if loadErr != nil {
			return bench.PeerEpoch{}, loadErr
		}
		plan, err := spec.Plan(train, test)
		if err != nil {
			return bench.PeerEpoch{}, err
		}
		dev, err := open()
		if err != nil {
			return bench.PeerEpoch{}, err
		}
		sum, err := plan.Run(ctx, dev, shared, job.Options{Logger: slog.New(slog.DiscardHandler)})
		err = errors.Join(err, dev.Close())
		switch {
		case err != nil:
			return bench.PeerEpoch{}, err
		case len(sum.EpochSeconds) != 1:
			return bench.PeerEpoch{}, fmt.Errorf("the run reported %d epochs, want 1", len(sum.EpochSeconds))
		case sum.GraphReplays == 0 || len(sum.Fallbacks) > 0:
			return bench.PeerEpoch{}, fmt.Errorf("graphs did not replay every step: %d replays, fallbacks %v", sum.GraphReplays, sum.Fallbacks)
		}
		return bench.PeerEpoch{Seconds: sum.EpochSeconds[0], Steps: sum.Steps, Samples: train.Len(),
			TestAccuracy: sum.TestAccuracy}, nil
	}
}

// policySteps lists the peer's step under each wait policy, the fastest
// (the one compared) first.
func policySteps(p bench.PeerPoint) string {
	if len(p.ByWaitPolicy) == 0 {
		return ""
	}
	parts := []string{p.PeerWaitPolicy + " fastest:"}
	for _, s := range p.ByWaitPolicy {
		parts = append(parts, fmt.Sprintf("%s %.3f ms (%s)", s.WaitPolicy, s.Side.StepMS, times(s.StepRatio)))
	}
	return " " + strings.Join(parts, " ")
}

// writePeerText writes the side-by-side table.
func writePeerText(w io.Writer, rep *bench.PeerReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tolaria (%s device, graphs) against %s %s, %d threads; %s\n", rep.Device, rep.Peer, rep.PeerVersion,
		rep.Threads, rep.Optimizer)
	fmt.Fprintf(&b, "%s: BLAS %s, OMP_WAIT_POLICY %q\n", rep.Peer, rep.PeerBLAS, rep.PeerWaitPolicy)
	fmt.Fprintf(&b, "step: median over windows of %d steps of %d timed steps x %d rounds; ratio = tolaria / %s (above 1: tolaria slower)\n\n",
		bench.StepWindow, rep.Settings.Steps, rep.Settings.Rounds, rep.Peer)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "batch\tmodel\ttolaria ms\t%s ms\tstep ratio\ttolaria samples/s\t%s samples/s\ttolaria epoch s\t%s epoch s\tepoch ratio\t\n",
		rep.Peer, rep.Peer, rep.Peer)
	for _, p := range rep.Points {
		epochs := "-\t-\t-"
		if p.EpochRatio > 0 {
			epochs = fmt.Sprintf("%.2f\t%.2f\t%s", p.Tolaria.EpochSeconds, p.Peer.EpochSeconds, times(p.EpochRatio))
		}
		fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.3f\t%s\t%.0f\t%.0f\t%s\t%s\n", p.BatchSize, p.Model, p.Tolaria.StepMS, p.Peer.StepMS,
			times(p.StepRatio), p.Tolaria.SamplesPerSecond, p.Peer.SamplesPerSecond, epochs, policySteps(p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package main

import (
	"context"
	"errors"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/internal/progress"
)

func newSweepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep FILE | sweep --resume --sweep-dir DIR",
		Short: "run many training jobs (trials) from a sweep file, each in its own worker process",
		Long: `sweep runs the trials of a YAML sweep file, each in its own tolaria-worker
process with its own run directory under the sweep directory, several at once,
and ranks them.

The file has base: (the keys of tolaria train's --config file, nested in their
sections), and trials: (a list of overrides in the same layout, each optionally
with a name:) and/or grid: (key: [values], a key nested or written whole, e.g.
optimizer.lr: [0.01, 0.1], crossed in the file's order, the last key varying
fastest; with trials: too, every trial is crossed with every grid point).
run_dir, resume, device and schedule.max_steps are the sweep's to set. Everything is validated before anything starts; a file
that makes more than --max-trials trials (10000) is refused.

The sweep directory (--sweep-dir, default sweeps/<time>) receives sweep.yaml,
trials/<name>.yaml (each trial's resolved configuration, written as the trial
first starts, usable with tolaria train --config), one run directory per trial
(config.yaml, events.jsonl, checkpoint.tlck, summary.json, worker.log) and
results.json and results.csv, rewritten atomically as trials start and end (at
most once a second).

--resume --sweep-dir DIR continues an interrupted or partly failed sweep from
the sweep.yaml it saved (no FILE then): succeeded trials are kept as they are,
interrupted and failed ones resume from their checkpoints (or start again
without one) and pending ones start; the ranking covers every trial. The
sweep's journal.jsonl says how a sweep killed outright stood: an attempt that
started and never ended is recorded interrupted and counted. A sweep whose
every trial succeeded has nothing to resume (exit 0).

--metrics-addr serves Prometheus metrics for the whole sweep: trials by
state, failed attempts by reason, retries, each live worker's heartbeat age,
and every trial's training metrics with a trial label.

Exit status: 0 every trial succeeded, 3 some failed, 1 none succeeded,
2 bad input (nothing started), 130 interrupted (Ctrl-C: every running trial
checkpoints and stops).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if resume, _ := cmd.Flags().GetBool("resume"); resume {
				if len(args) > 0 {
					return usagef("tolaria sweep --resume takes no sweep file: it resumes the sweep saved in --sweep-dir, got %q", args[0])
				}
				return nil
			}
			if len(args) != 1 {
				return usagef("tolaria sweep takes one sweep file, got %d arguments (see --help)", len(args))
			}
			return nil
		},
	}
	var f sweepFlags
	fs := cmd.Flags()
	registerDevice(fs, &f.cfg.Device, " (auto: the GPUs --devices finds, else the CPU)")
	f.place.registerDevices(fs, "to run trials on")
	fs.IntVar(&f.cfg.PerDevice, "per-device", 0, "trials sharing one device at once (default 1 on a GPU, --parallel on the CPU)")
	fs.IntVar(&f.cfg.Parallel, "parallel", 0, "trials running at once (default one per device slot: devices times --per-device)")
	fs.IntVar(&f.cfg.Retries, "retries", 0, "start a failed trial again up to N times, from its last checkpoint when it has one")
	fs.BoolVar(&f.cfg.ReuseWorkers, "reuse-workers", false, "keep each worker process for the next trials on its device (reset between trials), so a trial of the same shape as the one before captures through its graph pool; results are bitwise the same (local launcher only; see docs/sweeps.md)")
	fs.StringVar(&f.cfg.RankBy, "rank-by", "test_accuracy", "summary key to rank trials by: "+strings.Join(coordinator.RankKeys(), ", ")+
		" (keys ending in loss or seconds rank ascending, the others descending)")
	fs.StringVar(&f.cfg.Dir, "sweep-dir", "", "sweep directory, new or empty (default sweeps/<time>); with --resume, the sweep to resume")
	fs.BoolVar(&f.cfg.Resume, "resume", false, "resume the sweep in --sweep-dir: run only its trials that did not succeed")
	setsNoKey(fs, "resume")
	fs.StringVar(&f.cfg.PriorityKey, "priority", "", "a sweep key whose number is each trial's priority for device memory (default: each trial's priority:, else 0); a trial whose budget does not fit parks the least recently active trial of lower priority")
	fs.IntVar(&f.maxTrials, "max-trials", coordinator.DefaultMaxTrials, "the most trials the sweep file may make; a larger sweep is refused before anything is written (a resumed sweep keeps the size it was accepted at)")
	fs.DurationVar(&f.cfg.MinResidence, "min-residence", 0, "the least time a trial keeps its device-memory budget before a trial of equal priority may park it (0: 10s)")
	f.memory.register(fs, "trials'", "")
	f.worker.register(fs, "a trial's tolaria-worker")
	f.metrics.register(fs, ": trials by state, failures by reason, retries, workers' heartbeat ages, and each trial's training metrics with a trial label")
	f.launch.register(fs, "trial")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		return runSweep(cmd.Context(), cmd, &f, append(args, "")[0])
	}
	return cmd
}

// sweepFlags are the sweep's flags, read into its configuration.
type sweepFlags struct {
	cfg       coordinator.SweepConfig
	place     placementFlags // --devices alone: a sweep has its own --per-device and --parallel
	memory    memoryFlag
	maxTrials int
	worker    workerFlags
	metrics   metricsFlags
	launch    launcherFlags
}

// config checks the flags and reads the sweep file (path), or with
// --resume the sweep saved in --sweep-dir.
func (f *sweepFlags) config(fs *pflag.FlagSet, path string) (coordinator.SweepConfig, error) {
	cfg := f.cfg
	var err error
	if err = errors.Join(checkDevice(cfg.Device), f.worker.check(), f.metrics.check()); err != nil {
		return cfg, err
	}
	cfg.Worker, cfg.WorkerStart, cfg.HeartbeatTimeout, cfg.MetricsAddr = f.worker.path, f.worker.start, f.worker.heartbeat, f.metrics.addr
	if cfg.DeviceMemory, err = f.memory.bytes(); err != nil {
		return cfg, err
	}
	for i, n := range []int{cfg.PerDevice, cfg.Parallel, f.maxTrials} {
		if flag := []string{"per-device", "parallel", "max-trials"}[i]; fs.Changed(flag) && n < 1 {
			return cfg, usagef("--%s must be at least 1, got %d", flag, n)
		}
	}
	if f.place.devices != "auto" {
		if fs.Changed("device") && cfg.Device != "cuda" {
			return cfg, usagef("--devices names GPUs; it cannot go with --device %s", cfg.Device)
		}
		cfg.Device = "cuda"
		if cfg.GPUs, err = coordinator.ParseGPUs(f.place.devices); err != nil {
			return cfg, err
		}
	}
	if err = cfg.Load(path, f.maxTrials, fs.Changed("rank-by")); err != nil {
		return cfg, err
	}
	cfg.DryRun = f.launch.dryRun
	cfg.Launch, err = f.launch.apply(fs, cfg.Sweep.Launcher, cfg.Sweep.Slurm)
	return cfg, err
}

func runSweep(ctx context.Context, cmd *cobra.Command, f *sweepFlags, path string) error {
	cfg, err := f.config(cmd.Flags(), path)
	if err != nil {
		return err
	}
	cfg.Version = version()
	out := progress.Streams{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	return sweep.Execute(ctx, cfg, sweep.Options{
		View:    func(trials []coordinator.Trial) sweep.View { return progress.NewSweepView(out, trials) },
		Devices: f.place.chooser(f.worker),
		Linger:  f.metrics.linger,
	})
}

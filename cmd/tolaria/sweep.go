package main

import (
	"context"
	"errors"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/docs/cli"
	"github.com/tolaria-ml/tolaria/internal/progress"
)

func newSweepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep FILE | sweep --resume --sweep-dir DIR",
		Short: "run many training jobs (trials) from a sweep file, each in its own worker process",
		Long:  cli.Help("sweep"),
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
	f.place.register(fs, "trials", "1 on a GPU, --parallel on the CPU", "one per device slot: devices times --per-device")
	fs.IntVar(&f.cfg.Retries, "retries", 0, "start a failed trial again up to N times, from its last checkpoint when it has one")
	fs.BoolVar(&f.cfg.ReuseWorkers, "reuse-workers", false, "keep each worker process for the next trials on its device (reset between trials), so a trial of the same shape as the one before captures through its graph pool; results are bitwise the same (local launcher only; see docs/sweeps.md)")
	fs.StringVar(&f.cfg.RankBy, "rank-by", "test_accuracy", "summary key to rank trials by: "+strings.Join(sweep.RankKeys(), ", ")+
		" (keys ending in loss or seconds rank ascending, the others descending)")
	fs.StringVar(&f.cfg.Dir, "sweep-dir", "", "sweep directory, new or empty (default sweeps/<time>); with --resume, the sweep to resume")
	fs.BoolVar(&f.cfg.Resume, "resume", false, "resume the sweep in --sweep-dir: run only its trials that did not succeed")
	setsNoKey(fs, "resume")
	fs.StringVar(&f.cfg.PriorityKey, "priority", "", "a sweep key whose number is each trial's priority for device memory (default: each trial's priority:, else 0); a trial whose budget does not fit parks the least recently active trial of lower priority")
	fs.IntVar(&f.maxTrials, "max-trials", sweep.DefaultMaxTrials, "the most trials the sweep file may make; a larger sweep is refused before anything is written (a resumed sweep keeps the size it was accepted at)")
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
	cfg       sweep.Config
	place     placementFlags
	memory    memoryFlag
	maxTrials int
	worker    workerFlags
	metrics   metricsFlags
	launch    launcherFlags
}

// config checks the flags and reads the sweep file (path), or with
// --resume the sweep saved in --sweep-dir.
func (f *sweepFlags) config(fs *pflag.FlagSet, path string) (sweep.Config, error) {
	cfg := f.cfg
	var err error
	if err = errors.Join(checkDevice(cfg.Device), f.worker.check(), f.metrics.check(), f.place.check(fs, "")); err != nil {
		return cfg, err
	}
	if fs.Changed("max-trials") && f.maxTrials < 1 {
		return cfg, usagef("--max-trials must be at least 1, got %d", f.maxTrials)
	}
	cfg.Worker, cfg.WorkerStart, cfg.HeartbeatTimeout, cfg.MetricsAddr = f.worker.path, f.worker.start, f.worker.heartbeat, f.metrics.addr
	cfg.PerDevice, cfg.Parallel, cfg.DryRun = f.place.perDevice, f.place.parallel, f.launch.dryRun
	if cfg.DeviceMemory, err = f.memory.bytes(); err != nil {
		return cfg, err
	}
	// GPUs named now, not when the sweep starts: a Slurm sweep refuses them.
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
		View:    func(trials []sweep.Trial) sweep.View { return progress.NewSweepView(out, trials) },
		Devices: f.place.chooser(f.worker),
		Linger:  f.metrics.linger,
	})
}

package main

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

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
	var cfg sweep.Config
	var place placementFlags
	var memory memoryFlag
	var workers workerFlags
	var metrics metricsFlags
	var launcher launcherFlags
	var maxTrials int
	fs := cmd.Flags()
	registerDevice(fs, &cfg.Device, " (auto: the GPUs --devices finds, else the CPU)")
	place.register(fs, "trials", "1 on a GPU; --parallel on the CPU", "1 on the CPU; on GPUs one per device slot, the GPUs times --per-device")
	fs.IntVar(&cfg.Retries, "retries", 0, "start a failed trial again up to N times, from its last checkpoint when it has one")
	fs.BoolVar(&cfg.ReuseWorkers, "reuse-workers", false, "keep each worker process for the next trials on its device (reset between trials), so a trial of the same shape as the one before captures through its graph pool; results are bitwise the same (local launcher only; see docs/sweeps.md)")
	fs.StringVar(&cfg.RankBy, "rank-by", "test_accuracy", "summary key to rank trials by: "+strings.Join(sweep.RankKeys(), ", ")+
		" (keys ending in loss or seconds rank ascending, the others descending)")
	fs.StringVar(&cfg.Dir, "sweep-dir", "", "sweep directory, new or empty (default sweeps/<time>); with --resume, the sweep to resume")
	fs.BoolVar(&cfg.Resume, "resume", false, "resume the sweep in --sweep-dir: run only its trials that did not succeed")
	setsKey(fs, "resume", "sweep_resume", false) // the sweep's own, not a trial's resume
	fs.StringVar(&cfg.PriorityKey, "priority", "", "a sweep key whose number is each trial's priority for device memory (default: each trial's priority:, else 0); a trial whose budget does not fit parks the least recently active trial of equal or lower priority (see --min-residence)")
	fs.IntVar(&maxTrials, "max-trials", sweep.DefaultMaxTrials, "the most trials the sweep file may make; a larger sweep is refused before anything is written (a resumed sweep keeps the size it was accepted at)")
	fs.DurationVar(&cfg.MinResidence, "min-residence", 0, "the least time a trial keeps its device-memory budget before a trial of equal priority may park it (0: 10s)")
	memory.register(fs, "trials'", "")
	workers.register(fs, "a trial's tolaria-worker")
	metrics.register(fs, ": trials by state, failures by reason, retries, workers' heartbeat ages, and each trial's training metrics with a trial label")
	launcher.register(fs, "trial")
	// RunE checks the flags and reads the sweep file, or with --resume the
	// sweep saved in --sweep-dir, and runs it.
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var err error
		if err = errors.Join(checkDevice(cfg.Device), workers.check(), metrics.check(), place.check(fs, "")); err != nil {
			return err
		}
		if fs.Changed("max-trials") && maxTrials < 1 {
			return usagef("--max-trials must be at least 1, got %d", maxTrials)
		}
		cfg.Worker, cfg.WorkerStart, cfg.HeartbeatTimeout, cfg.MetricsAddr = workers.path, workers.start, workers.heartbeat, metrics.addr
		cfg.PerDevice, cfg.Parallel, cfg.DryRun, cfg.Version = place.perDevice, place.parallel, launcher.dryRun, version()
		if cfg.DeviceMemory, err = memory.bytes(); err != nil {
			return err
		}
		// GPUs named now, not when the sweep starts: a Slurm sweep refuses them.
		if place.devices != "auto" {
			if fs.Changed("device") && cfg.Device != "cuda" {
				return usagef("--devices names GPUs; it cannot go with --device %s", cfg.Device)
			}
			cfg.Device = "cuda"
			if cfg.GPUs, err = coordinator.ParseGPUs(place.devices); err != nil {
				return err
			}
		}
		if err = cfg.Load(append(args, "")[0], maxTrials, fs.Changed("rank-by")); err != nil {
			return err
		}
		if cfg.Launch, err = launcher.apply(fs, cfg.Sweep.Launcher, cfg.Sweep.Slurm); err != nil {
			return err
		}
		out := progress.Streams{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
		return sweep.Execute(cmd.Context(), cfg, sweep.Options{
			View:    func(trials []sweep.Trial) sweep.View { return progress.NewSweep(out, trials) },
			Devices: place.chooser(workers),
			Linger:  metrics.linger,
		})
	}
	return cmd
}

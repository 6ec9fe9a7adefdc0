package main

import (
	"errors"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/docs/cli"
	"github.com/tolaria-ml/tolaria/internal/progress"
	"github.com/tolaria-ml/tolaria/telemetry"
)

func newEvalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eval --run-dir RUN",
		Short: "evaluate a run's checkpoint on the test (or training) set, split across worker processes",
		Long:  cli.Help("eval"),
		Args:  cobra.NoArgs,
	}
	var req eval.Request
	var workers workerFlags
	var launcher launcherFlags
	var metrics metricsFlags
	var place placementFlags
	var memory memoryFlag
	fs := cmd.Flags()
	fs.StringVar(&req.RunDir, "run-dir", "", "the run directory to evaluate (required)")
	fs.StringVar(&req.Checkpoint, "checkpoint", "", "checkpoint file to evaluate (default: the run's checkpoint.tlck)")
	fs.IntVar(&req.Workers, "workers", 1, "worker processes, each scoring one stride shard of the examples")
	fs.StringVar(&req.Split, "split", "test", "test or train")
	fs.StringVar(&req.DataDir, "data-dir", "", "evaluate on the data here (Fashion-MNIST files, or a text corpus) in place of the run's data_dir; eval.json warns when it differs from the data the run trained on")
	fs.BoolVar(&req.Resume, "resume", false, "keep the shard files of an earlier evaluation that verify as this one's and score only the other shards")
	fs.BoolVar(&req.Predictions, "predictions", false, "with a complete result, also write every example's index, label, predicted class and loss (a token model's: per position of each window) to RUN/predictions.parquet")
	fs.IntVar(&req.TopK, "top-k", 5, "with --predictions, each row's K most probable classes and their probabilities (columns top_class, top_prob), capped at the classes; 0 for none")
	registerDevice(fs, &req.Device, "; every shard's worker scores there")
	memory.register(fs, "shards'", "a shard that does not fit beside those scoring waits; ")
	place.register(fs, "shards", "all of them spread evenly over the devices", "one per device slot")
	workers.register(fs, "a shard's tolaria-worker")
	launcher.register(fs, "shard")
	metrics.register(fs, ": the result's accuracy and loss, labelled result=complete or result=partial, and the shards by state")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, stderr := cmd.Context(), cmd.ErrOrStderr()
		var err error
		if req.Launch, err = launcher.apply(fs, "", launch.SlurmConfig{}); err != nil {
			return err
		}
		if err = errors.Join(checkDevice(req.Device), workers.check(), metrics.check(), place.check(fs, req.Launch.Name)); err != nil {
			return err
		}
		if fs.Changed("top-k") && !req.Predictions {
			return usagef("--top-k is for --predictions: give both, or neither")
		}
		if req.DeviceMemory, err = memory.bytes(); err != nil {
			return err
		}
		req.Worker, req.WorkerStart, req.HeartbeatTimeout, req.DryRun = workers.path, workers.start, workers.heartbeat, launcher.dryRun
		req.PerDevice, req.Parallel, req.Logger = place.perDevice, place.parallel, logger(stderr, slog.LevelError)
		return eval.Execute(ctx, req, eval.Options{
			View:    progress.NewEval(progress.Streams{Stdout: cmd.OutOrStdout(), Stderr: stderr}, req.RunDir, speller(cmd)),
			Devices: place.chooser(workers),
			// The address served at, and the linger, are news worth an info line.
			Serve: func(families func() (*telemetry.Metrics, error)) (eval.Served, error) {
				return train.ServeFamilies(ctx, metrics.addr, logger(stderr, slog.LevelInfo), families)
			},
			Version: version(), Linger: metrics.linger,
		})
	}
	return cmd
}

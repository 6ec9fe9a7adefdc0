package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/internal/progress"
	"github.com/tolaria-ml/tolaria/telemetry"
)

func newEvalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eval --run-dir RUN",
		Short: "evaluate a run's checkpoint on the test (or training) set, split across worker processes",
		Long: `eval scores a run's checkpoint on its test set (or --split train), the
examples split by stride across --workers tolaria-worker processes: worker k
scores examples k, k+N, k+2N, ... The run's config.yaml gives the model and
the data; the checkpoint (--checkpoint, default RUN/checkpoint.tlck) is
verified as a resumed run verifies it.

Each worker writes a shard file (RUN/eval/shard-K.tles, its log next to it);
a failed shard is tried once more. The merge checks that every example was
scored exactly once and replaces RUN/eval.json, once the new one is whole,
keeping the one it replaces as RUN/eval.prev.json: loss, accuracy, per-class
accuracy and the confusion matrix, the checkpoint's step and SHA-256, the
split and the number of workers. The figures do not depend on --workers.

When shards fail twice, eval.json is left as it was and RUN/eval.partial.json
holds the figures over the examples scored ("complete": false), with the
missing shards, their examples, reasons and logs. --resume keeps every shard
file that verifies as this evaluation's (same checkpoint digest, data
fingerprint, split and --workers) and scores only the others: the result is
the one an uninterrupted evaluation writes. --metrics-addr serves the
result's accuracy and loss labelled result="complete" or result="partial".

--predictions also writes, with a complete result, RUN/predictions.parquet
(just before eval.json, atomically): one row per example (index, label,
predicted, loss), or per position of a token model's windows (window,
position, label, predicted, loss), in index order; a partial evaluation
writes none. --top-k K (default 5, capped at the classes; 0 for none) adds
each row's K most probable classes and their probabilities, as the list
columns top_class and top_prob (a cross-entropy model's only). See
docs/eval.md for the columns and how to load them.

A token model's run (dataset text) is scored window by window: its loss is
the mean per token (nats, and in bits per byte), its accuracy that of every
target byte, and eval.json adds the accuracy and loss at each position of
the context (position p predicts from p+1 bytes) instead of per-class
figures.

The shards spread over the GPUs (--devices auto, the default: every GPU a
CUDA tolaria-worker finds; or a list such as 0,2), all at once unless
--per-device or --parallel bound them; on a GPU each shard's line says where it ran.

The run's data.json records the files it trained on (size and SHA-256).
The evaluation fingerprints the files it reads when it begins; a worker
that reads other bytes (a file changed during the evaluation) fails its
shard, naming the file. --data-dir evaluates on other data (a directory of
the same files, or another text corpus); eval.json's "warnings" says when
its files differ from those the run trained on.

Exit status: 0 done, 3 a shard failed twice (eval.partial.json written,
eval.json untouched; the missing shards are named), 2 bad input (nothing
written), 1 another failure, 130 interrupted.`,
		Args: cobra.NoArgs,
	}
	var req coordinator.EvalRequest
	var workers workerFlags
	var launch launcherFlags
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
	place.register(fs, "shards")
	workers.register(fs, "a shard's tolaria-worker")
	launch.register(fs, "shard")
	metrics.register(fs, ": the result's accuracy and loss, labelled result=complete or result=partial, and the shards by state")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if req.DeviceMemory, err = memory.bytes(); err != nil {
			return err
		}
		return evaluate(cmd.Context(), cmd, req, workers, launch, metrics, place)
	}
	return cmd
}

func evaluate(ctx context.Context, cmd *cobra.Command, req coordinator.EvalRequest, workers workerFlags, launcher launcherFlags, metrics metricsFlags, place placementFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	var err error
	if err = errors.Join(checkDevice(req.Device), workers.check(), metrics.check(), place.check(cmd.Flags())); err != nil {
		return err
	}
	if cmd.Flags().Changed("top-k") && !req.Predictions {
		return usagef("--top-k is for --predictions: give both, or neither")
	}
	if req.Launch, err = launcher.apply(cmd.Flags(), "", launch.SlurmConfig{}); err != nil {
		return err
	}
	req.Worker, req.WorkerStart, req.HeartbeatTimeout, req.DryRun = workers.path, workers.start, workers.heartbeat, launcher.dryRun
	req.Logger = logger(stderr, slog.LevelError)
	// With Slurm, device auto is the CPU (Execute), and --devices is not asked about.
	if req.Launch.Name == launch.SlurmName && req.Device != "auto" && (cmd.Flags().Changed("devices") || cmd.Flags().Changed("per-device")) {
		return usagef("--devices and --per-device place workers on this machine's GPUs; with --launcher slurm the scheduler places each shard")
	}
	req.PerDevice, req.Parallel = place.perDevice, place.parallel
	return eval.Execute(ctx, req, eval.Options{
		View:    progress.NewEvalView(progress.Streams{Stdout: stdout, Stderr: stderr}, req.RunDir, speller(cmd)),
		Devices: place.chooser(workers),
		// The address served at, and the linger, are news worth an info line.
		Serve: func(families func() (*telemetry.Metrics, error)) (eval.Served, error) {
			return coordinator.ServeFamilies(ctx, metrics.addr, logger(stderr, slog.LevelInfo), families)
		},
		Version: version(), Linger: metrics.linger,
	})
}

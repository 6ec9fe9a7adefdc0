package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/progress"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
)

func newTrainCmd(proc process) *cobra.Command {
	var flags trainFlags
	cmd := &cobra.Command{
		Use:   "train",
		Short: "train a model (Fashion-MNIST MLP by default)",
		Long: `train runs a training job. With --enable-graphs the whole iteration (zero
gradients, forward, loss, backward, clipping, optimizer update) is captured once
into a graph and replayed with one launch per step; batches reach the device
through a pinned staging ring on its own stream.

Inputs are standardised with one mean and one standard deviation, computed over
every pixel of the whole training set (Fashion-MNIST's pixels scaled to [0, 1]
first) and applied to the training and test sets alike: one scalar pair, not one
per pixel. The synthetic dataset is standardised the same way.

Configuration: flags > TOLARIA_* environment variables (TOLARIA_BATCH_SIZE,
TOLARIA_MODEL_HIDDEN, ...; or the key's path, TOLARIA_SCHEDULE_BATCH_SIZE) > a
YAML --config file > defaults. The file nests its keys in sections, each
section's keys those of the flags in it (docs/configuration.md):

  model:     {hidden, activation, loss, input, layers}
  optimizer: {kind, lr, momentum, weight_decay, clip_norm, warmup_steps}
  schedule:  {epochs, batch_size, log_every, max_steps, checkpoint_every}
  data:      {dataset, dir, synthetic_size, context, ragged, loaders, world, rank}
  graphs:    {enabled, warmup_batches, pool_reuse}
  staging:   {slots, prefetch_to_device}

with device, seed, run_dir, resume and cpu_threads at the top. The flat keys
of earlier releases (lr:, optimizer: adamw, epochs:) are still read, each with
a warning naming its key.

The model: --hidden and --activation give an MLP (the default is
784-256-128-10 with GELU on Fashion-MNIST). Any other network is a list of
layers (--layers, or model.layers in the file) on an input of shape --input:
[C,H,W] for images, [features] for vectors (default: the dataset's features).
Each layer is a map of one key, its kind, to its settings; defaults are in
parentheses. Shapes are checked before anything is allocated; a layer that
does not fit its input is named by its path, e.g. layers[4].residual[0].
Images are stored NHWC, so flatten orders an image's values (h, w, c).

` + job.LayersUsage() + `
For example (docs/models.md and examples/cnn.yaml):

  model:
    input: [1, 28, 28]
    layers:
      - conv: {out: 32, kernel: 3, padding: 1}
      - batchnorm: {}
      - relu: {}
      - maxpool: {kernel: 2}
      - conv: {out: 64, kernel: 3, padding: 1}
      - batchnorm: {}
      - relu: {}
      - maxpool: {kernel: 2}
      - residual: [{conv: {out: 64, kernel: 3, padding: 1}}, {batchnorm: {}}, {relu: {}},
                   {conv: {out: 64, kernel: 3, padding: 1}}, {batchnorm: {}}]
      - relu: {}
      - flatten: {}
      - linear: {out: 128}
      - relu: {}
      - dropout: {p: 0.3}
      - linear: {out: 10}
    loss: cross_entropy

The run directory (--run-dir, default runs/<time>) receives config.yaml,
events.jsonl, checkpoint.tlck and summary.json, and worker.log (the worker's
logs) when the job runs in a tolaria-worker (--device cuda, --isolate). A worker
silent for --heartbeat-timeout is taken for hung and killed.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q: tolaria train takes flags only (see --help)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return train(cmd.Context(), cmd, proc, &flags)
		},
	}
	flags.register(cmd.Flags())
	return cmd
}

func train(ctx context.Context, cmd *cobra.Command, proc process, flags *trainFlags) error {
	stderr := cmd.ErrOrStderr()
	req, warnings, err := resolve(cmd.Flags(), flags)
	if err != nil {
		return err
	}
	view := progress.NewTrain(stderr, req.Spec.Loss != string(nn.LossMSE))
	defer view.Close()
	log := logger(view.Logs(), slog.LevelInfo)
	for _, w := range warnings {
		log.Warn(w)
	}
	// A worker's logs go to the run directory's worker.log (Placement.Stderr
	// left nil), and the log says where.
	req.Version, req.Shared, req.Logger, req.Started = version(), proc.shared, log, proc.started
	run, err := coordinator.Prepare(ctx, req)
	if err != nil {
		return err
	}
	defer run.Close()
	log.Info(fmt.Sprintf("CUDA initialized in coordinator: %v", coordinator.LinksCUDA()))
	spec := run.Spec()
	sum, err := run.Train(ctx, view.Report)
	view.Close()
	if err != nil {
		code := exitCode(ctx, err)
		progress.TrainFailed(stderr, err, ctx.Err() != nil, code == exitUsage, run.Dir())
		run.Linger(ctx, flags.metrics.linger)
		return exitError{code}
	}
	if err := run.Record(&sum); err != nil {
		return err
	}
	progress.TrainSummary(cmd.OutOrStdout(), sum, spec.Loss != string(nn.LossMSE), spec.RunDir)
	if sum.Interrupted {
		how := "interrupted"
		if ctx.Err() == nil && spec.MaxSteps > 0 {
			how = fmt.Sprintf("stopped at --max-steps %d", spec.MaxSteps)
		}
		progress.TrainStopped(stderr, run.Dir(), sum, how)
		switch {
		case ctx.Err() != nil:
			return exitError{interruptedCode(ctx)}
		case spec.MaxSteps == 0:
			// Neither tolaria's signal nor --max-steps: the worker was
			// stopped (a signal to it alone). The run did not finish.
			fmt.Fprintln(stderr, "tolaria: the worker stopped the run before it finished (was it sent a signal?)")
			return exitError{exitFailure}
		}
	}
	run.Linger(ctx, flags.metrics.linger)
	return nil
}

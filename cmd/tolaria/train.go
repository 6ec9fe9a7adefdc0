package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

func newTrainCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "train",
		Short: "train a model (Fashion-MNIST MLP by default)",
		Long: `train runs a training job. With --enable-graphs the whole iteration (zero
gradients, forward, loss, backward, clipping, optimizer update) is captured once
into a graph and replayed with one launch per step; batches reach the device
through a pinned staging ring on its own stream.

Configuration: flags > TOLARIA_* environment variables (TOLARIA_BATCH_SIZE,
TOLARIA_MODEL_HIDDEN, ...) > a YAML --config file (keys as the flags with
underscores; model.hidden, model.activation and model.loss nest under model:)
> defaults.

The run directory (--run-dir, default runs/<time>) receives config.yaml,
events.jsonl, checkpoint.tlck and summary.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return train(cmd.Context(), cmd)
		},
	}
	addFlags(cmd.Flags())
	return cmd
}

func train(ctx context.Context, cmd *cobra.Command) error {
	stderr := cmd.ErrOrStderr()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log.Info("CUDA initialized in coordinator: false")
	spec, set, err := resolve(cmd.Flags())
	if err != nil {
		return err
	}
	if err := prepareRunDir(&spec, time.Now()); err != nil {
		return err
	}
	exec, err := chooseExecutor(ctx, spec, set, log)
	if err != nil {
		return err
	}
	spec.Device = exec.device

	// Load and validate the data before the run directory is written to,
	// so a bad data file leaves an existing run untouched.
	if err := exec.Check(spec); err != nil {
		return err
	}
	cfgPath, err := writeConfig(spec)
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	events, err := os.OpenFile(filepath.Join(spec.RunDir, eventsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	defer events.Close()
	obs, closeObs, err := newObserver(ctx, set, events, spec.Device, log)
	if err != nil {
		return err
	}
	defer closeObs()
	obs.Event(trainer.Event{Time: time.Now(), Kind: trainer.EventStart, Fields: map[string]any{
		"device": spec.Device, "enable_graphs": spec.EnableGraphs, "config": cfgPath, "resume": spec.Resume}})
	log.Info("training", "device", spec.Device, "graphs", spec.EnableGraphs, "run_dir", spec.RunDir, "epochs", spec.Epochs,
		"batch_size", spec.BatchSize, "dataset", spec.Dataset)

	bar := newProgress(stderr)
	sum, err := exec.Run(ctx, spec, worker.Sink{Observer: obs, Progress: bar.report})
	if err != nil {
		obs.Event(trainer.Event{Time: time.Now(), Kind: trainer.EventError, Fields: map[string]any{"error": err.Error()}})
		return reportFailure(stderr, spec, err)
	}
	sum.WallSeconds = time.Since(start(ctx)).Seconds()
	if err := writeSummary(filepath.Join(spec.RunDir, summaryFile), sum); err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	if set.summaryJSON != "" {
		if err := writeSummary(set.summaryJSON, sum); err != nil {
			return fmt.Errorf("summary-json: %w", err)
		}
	}
	obs.Event(trainer.Event{Time: time.Now(), Kind: trainer.EventDone, Fields: map[string]any{"interrupted": sum.Interrupted}})
	printSummary(cmd.OutOrStdout(), spec, sum)
	if sum.Interrupted {
		fmt.Fprintf(stderr, "tolaria: interrupted after %d steps; checkpoint saved; continue with: tolaria train --resume --run-dir %s\n",
			sum.ResumedFromStep+sum.Steps, spec.RunDir)
		if ctx.Err() != nil {
			return exitError{exitInterrupted}
		}
	}
	return nil
}

type startKey struct{}

func start(ctx context.Context) time.Time {
	if t, ok := ctx.Value(startKey{}).(time.Time); ok {
		return t
	}
	return processStart
}

var processStart = time.Now()

func reportFailure(w io.Writer, spec job.Spec, err error) error {
	var we *worker.Error
	if errors.As(err, &we) {
		fmt.Fprintf(w, "tolaria: %s\n", we.Message)
		if we.Kind == worker.KindUsage || we.Kind == worker.KindCheckpoint {
			return exitError{exitUsage}
		}
		return exitError{exitFailure}
	}
	fmt.Fprintf(w, "tolaria: training failed: %v\n", err)
	return exitError{exitFailure}
}

func printSummary(w io.Writer, spec job.Spec, s trainer.Summary) {
	fmt.Fprintf(w, "device %s, graphs %v: %d steps (%d replays, %d eager), test accuracy %.4f, train loss %.4f, %.0f samples/s\n",
		s.Device, s.GraphEnabled, s.Steps, s.GraphReplays, s.EagerSteps, s.TestAccuracy, s.TrainLoss, s.SamplesPerSecond)
	if len(s.Fallbacks) > 0 {
		fmt.Fprintf(w, "fallbacks: %v\n", s.Fallbacks)
	}
	fmt.Fprintf(w, "params sha256 %s\nrun directory %s\n", s.ParamsSHA256, spec.RunDir)
}

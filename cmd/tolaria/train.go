package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/telemetry"
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
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q: tolaria train takes flags only (see --help)", args[0])
			}
			return nil
		},
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
	log.Info(fmt.Sprintf("CUDA initialized in coordinator: %v", linksCUDA()))
	spec, set, err := resolve(cmd.Flags())
	if err != nil {
		return err
	}
	for _, w := range set.warnings {
		log.Warn(w)
	}
	// Everything that can be refused is checked before the run directory
	// is touched, so a refused command leaves an existing run as it was.
	if err := checkOutputPath("summary-json", set.summaryJSON); err != nil {
		return err
	}
	if set.metricsAddr != "" {
		// A malformed address is a usage error; a busy port is found later.
		if _, err := telemetry.ListenAddress(set.metricsAddr); err != nil {
			return usagef("metrics-addr %s: %v", set.metricsAddr, err)
		}
	}
	dir, err := coordinator.PlanRunDir(spec.RunDir, spec.Resume, time.Now())
	if err != nil {
		return err
	}
	spec.RunDir = dir.Path()
	exec, err := chooseExecutor(ctx, spec, set, log)
	if err != nil {
		return err
	}
	spec.Device = exec.device
	if err := exec.Check(spec); err != nil {
		return err
	}
	metrics, err := coordinator.ServeMetrics(ctx, set.metricsAddr, version(), log)
	if err != nil {
		return err
	}
	defer metrics.Close()
	if err := dir.Claim(); err != nil {
		return err
	}
	defer dir.Release()
	spec.RunDir = dir.Path()

	raw, err := configFile(spec)
	if err != nil {
		return err
	}
	cfgPath, err := dir.WriteConfig(raw, time.Now())
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	events, err := dir.OpenEvents()
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	defer events.Close()
	obs := metrics.Observer(events, spec.Device, strconv.Itoa(spec.Rank))
	obs.Observe(trainer.Event{Time: time.Now(), Kind: trainer.EventStart, Fields: map[string]any{
		"device": spec.Device, "enable_graphs": spec.EnableGraphs, "config": cfgPath, "resume": spec.Resume}})
	log.Info("training", "device", spec.Device, "graphs", spec.EnableGraphs, "run_dir", spec.RunDir, "epochs", spec.Epochs,
		"batch_size", spec.BatchSize, "dataset", spec.Dataset)

	bar := newProgress(stderr, spec.Loss != string(nn.LossMSE))
	sum, err := exec.Run(ctx, spec, worker.Sink{Observer: obs, Progress: bar.report})
	bar.finish()
	if err != nil {
		obs.Observe(trainer.Event{Time: time.Now(), Kind: trainer.EventError, Fields: map[string]any{"error": err.Error()}})
		ferr := reportFailure(ctx, stderr, err)
		metrics.Linger(ctx, set.metricsLinger)
		return ferr
	}
	sum.WallSeconds = time.Since(start(ctx)).Seconds()
	if err := dir.WriteSummary(sum); err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	if set.summaryJSON != "" {
		if err := coordinator.WriteSummary(set.summaryJSON, sum); err != nil {
			return fmt.Errorf("summary-json: %w", err)
		}
	}
	obs.Observe(trainer.Event{Time: time.Now(), Kind: trainer.EventDone, Fields: map[string]any{"interrupted": sum.Interrupted}})
	printSummary(cmd.OutOrStdout(), spec, sum)
	if sum.Interrupted {
		reportInterruption(stderr, dir, sum)
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
	metrics.Linger(ctx, set.metricsLinger)
	return nil
}

// reportInterruption says where a stopped run stands and how to go on.
func reportInterruption(w io.Writer, dir *coordinator.RunDir, sum trainer.Summary) {
	// sum.Steps counts the whole run, a resumed one included.
	if sum.Steps > sum.ResumedFromStep {
		fmt.Fprintf(w, "tolaria: interrupted after %d steps; checkpoint saved; continue with: tolaria train --resume --run-dir %s\n",
			sum.Steps, dir.Path())
		return
	}
	if cks, _ := dir.Checkpoints(); len(cks) > 0 {
		fmt.Fprintf(w, "tolaria: interrupted before any step ran; the checkpoint of step %d is unchanged; continue with: tolaria train --resume --run-dir %s\n",
			sum.ResumedFromStep, dir.Path())
		return
	}
	fmt.Fprintf(w, "tolaria: interrupted before the first step; nothing to resume: run the same command again (with another --run-dir, or after removing %s)\n", dir.Path())
}

// checkOutputPath refuses an output path that cannot be a file.
func checkOutputPath(flag, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usagef("%s: %s is a directory; give a file path", flag, path)
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

func reportFailure(ctx context.Context, w io.Writer, err error) error {
	if ctx.Err() != nil {
		fmt.Fprintf(w, "tolaria: interrupted: %v\n", err)
		return exitError{interruptedCode(ctx)}
	}
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
	eval := fmt.Sprintf("test accuracy %.4f, test loss %.4f", s.TestAccuracy, s.TestLoss)
	switch {
	case len(s.EpochSeconds) == 0:
		eval = "no epoch finished, so no evaluation yet" // the zeros in summary.json are not results
	case spec.Loss == string(nn.LossMSE):
		eval = fmt.Sprintf("test loss %.4f", s.TestLoss) // a regression loss has no accuracy
	}
	fmt.Fprintf(w, "device %s, graphs %v: %d steps (%d replays, %d eager), %s, train loss %.4f, %.0f samples/s\n",
		s.Device, s.GraphEnabled, s.Steps, s.GraphReplays, s.EagerSteps, eval, s.TrainLoss, s.SamplesPerSecond)
	if len(s.Fallbacks) > 0 {
		fmt.Fprintf(w, "fallbacks: %v\n", s.Fallbacks)
	}
	fmt.Fprintf(w, "params sha256 %s\nrun directory %s\n", s.ParamsSHA256, spec.RunDir)
}

// cudaModule is the module whose package init initialises CUDA.
const cudaModule = "gorgonia.org/cu"

// linksCUDA reports whether this binary links the CUDA bindings, whose
// init would have initialised CUDA before main: never for a correct build
// of tolaria (e2e's dependency check enforces it), so the start-up line
// reports what the binary is, not what it is meant to be.
func linksCUDA() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, dep := range info.Deps {
		if dep.Path == cudaModule {
			return true
		}
	}
	return false
}

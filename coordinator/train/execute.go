package train

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// View shows a training run to its user: its progress as it trains, its
// summary, and how it stopped or failed. Package progress draws one.
type View interface {
	Logs() io.Writer // the log's lines, drawn above the progress
	Report(trainer.Progress)
	Close() // the progress stops; later lines go below it
	Summary(sum trainer.Summary, accuracy bool, runDir string)
	// Stopped says where a stopped run stands and how to go on; maxSteps
	// is the step it was told to stop at (0 when none was: something
	// else stopped it, ctx when interrupted).
	Stopped(dir *rundir.Dir, sum trainer.Summary, interrupted bool, maxSteps int)
	Failed(err error, interrupted bool, dir *rundir.Dir)
	Note(msg string) // the last thing said
}

// Options are how Execute shows a run.
type Options struct {
	// View draws a run; accuracy says whether its loss has one (a
	// regression loss has not).
	View     func(accuracy bool) View
	Warnings []string      // about the configuration, logged first
	Linger   time.Duration // /metrics is served this long after the end
}

// Execute prepares the run req asks for, trains it, records and shows
// its summary and keeps its metrics served for opt.Linger. It returns
// nil when the run finished or stopped where it was told to; a
// rundir.Ending, already reported, when it failed (Err the cause) or was
// stopped before its end; any other error before it ran.
func Execute(ctx context.Context, req Request, opt Options) error {
	view := opt.View(req.Spec.Loss != string(nn.LossMSE))
	defer view.Close()
	log := slog.New(slog.NewTextHandler(view.Logs(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	for _, w := range opt.Warnings {
		log.Warn(w)
	}
	// A worker's logs go to the run directory's worker.log (Placement.Stderr
	// left nil), and the log says where.
	req.Logger = log
	run, err := Prepare(ctx, req)
	if err != nil {
		return err
	}
	defer run.Close()
	// Every end from here on, whatever the outcome, keeps the metrics
	// served for the linger (a signal cuts it short), before Close.
	defer run.Linger(ctx, opt.Linger)
	log.Info(fmt.Sprintf("CUDA initialized in coordinator: %v", LinksCUDA()))
	spec := run.Spec()
	sum, err := run.Train(ctx, view.Report)
	view.Close()
	if err != nil {
		interrupted := ctx.Err() != nil
		view.Failed(err, interrupted, run.Dir())
		if interrupted {
			return &rundir.Ending{Kind: rundir.Interrupted}
		}
		return &rundir.Ending{Kind: rundir.Failed, Err: err}
	}
	if err := run.Record(&sum); err != nil {
		return err
	}
	view.Summary(sum, spec.Loss != string(nn.LossMSE), spec.RunDir)
	if sum.Interrupted {
		view.Stopped(run.Dir(), sum, ctx.Err() != nil, spec.MaxSteps)
		switch {
		case ctx.Err() != nil:
			return &rundir.Ending{Kind: rundir.Interrupted}
		case spec.MaxSteps == 0:
			// Neither tolaria's signal nor max_steps: the worker was
			// stopped (a signal to it alone). The run did not finish.
			view.Note("the worker stopped the run before it finished (was it sent a signal?)")
			return &rundir.Ending{Kind: rundir.Failed}
		}
	}
	return nil
}

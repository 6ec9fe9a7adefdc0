package eval

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/telemetry"
)

// View shows an evaluation to its user: what it is about to score, each
// shard attempt that ends, the result and what is said last. Package
// progress draws one.
type View interface {
	Plan(e *Run, req Request)
	Shard(Progress)
	Result(rep *Report, err error, runDir string)
	DryRun(script string, command []string) error
	Note(msg string)
}

// Served is where an evaluation's figures are served for Prometheus.
type Served interface {
	Linger(ctx context.Context, d time.Duration)
	Close() error
}

// Options are how Execute shows an evaluation, where it scores it and
// how it serves its figures.
type Options struct {
	View View
	// Devices resolves the request's device on this machine (the GPUs
	// named and checked, or those a worker finds), as every activity does;
	// nil keeps the request's. Not called for Slurm, whose nodes this
	// machine cannot see: device auto is the CPU there, as a sweep's.
	Devices func(ctx context.Context, device string, log *slog.Logger) (string, []int, error)
	// Serve serves the metrics families makes (called at most once) until
	// Close; the coordinator's one metrics server.
	Serve   func(families func() (*telemetry.Metrics, error)) (Served, error)
	Version string        // the tolaria version the metrics carry
	Linger  time.Duration // /metrics is served this long after the end
}

// Execute plans the evaluation req asks for (or with req.DryRun prints
// what Slurm would be given), scores its shards, merges them and shows
// the result, keeping its figures served for opt.Linger. Its error is the
// evaluation's (a ShardsFailedError when shards failed twice), or a
// rundir.Ending, already reported, when ctx stopped it.
func Execute(ctx context.Context, req Request, opt Options) error {
	var err error
	switch slurm := req.Launch.Name == launch.SlurmName; {
	case slurm && req.Device == "auto":
		req.Device = "cpu"
	case !slurm && opt.Devices != nil:
		if req.Device, req.GPUs, err = opt.Devices(ctx, req.Device, req.Logger); err != nil {
			return err
		}
	}
	req.Progress = opt.View.Shard
	e, err := Plan(req)
	if err != nil {
		return err
	}
	if req.DryRun {
		return opt.View.DryRun(e.DryRun())
	}
	opt.View.Plan(e, req)
	var em *telemetry.EvalMetrics
	served, err := opt.Serve(func() (m *telemetry.Metrics, err error) {
		m, em, err = NewMetrics(opt.Version)
		return m, err
	})
	if err != nil {
		return err
	}
	defer served.Close()
	// After the last lines, whatever the outcome (a signal cuts it short).
	defer served.Linger(ctx, opt.Linger)
	rep, err := e.Run(ctx)
	if em != nil && rep != nil {
		e.Record(em, rep, err)
	}
	if ctx.Err() != nil {
		opt.View.Note(fmt.Sprintf("evaluation interrupted; %s is left as it was, and the shards finished are kept: continue with %s", JSONFile, ResumeCommand(req)))
		return &rundir.Ending{Kind: rundir.Interrupted}
	}
	opt.View.Result(rep, err, req.RunDir)
	return err
}

// ResumeCommand is the command that continues the evaluation req asked
// for once it was stopped: --resume, and every setting a kept shard file
// must match (the shards, the split, the checkpoint, the data, the
// predictions' top-k), so that the shards finished are kept.
func ResumeCommand(req Request) string {
	args := []string{"tolaria", "eval", "--resume", "--run-dir", req.RunDir, "--workers", strconv.Itoa(req.Workers)}
	if req.Split != "" && req.Split != jobserver.SplitTest {
		args = append(args, "--split", req.Split)
	}
	if req.Checkpoint != "" {
		args = append(args, "--checkpoint", req.Checkpoint)
	}
	if req.DataDir != "" {
		args = append(args, "--data-dir", req.DataDir)
	}
	if req.Predictions {
		args = append(args, "--predictions", "--top-k", strconv.Itoa(req.TopK))
	}
	return shellword.Join(args...)
}

package sweep

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/internal/shellword"
)

// View shows a sweep to its user: every trial's row as it runs, the
// ranking at the end and what is said last. Package progress draws one.
type View interface {
	Logs() io.Writer // the log's lines, drawn above the rows
	Start()          // the rows appear
	Update(TrialUpdate)
	Close() // the rows stop; later lines go below them
	Results(r Results, dir string)
	DryRun(script string, command []string) error
	Note(msg string) // the last thing said, e.g. why the exit is not 0
}

// Options are how Execute shows a sweep and where it runs it.
type Options struct {
	// View draws the sweep of these trials.
	View func(trials []Trial) View
	// Devices resolves the configured device on this machine, the way
	// every activity does (the GPUs named and checked, or those a worker
	// finds); nil keeps Config's. Not called for the CPU or for Slurm,
	// whose nodes this machine cannot see.
	Devices func(ctx context.Context, device string, log *slog.Logger) (string, []int, error)
	// Linger keeps /metrics served this long after the end.
	Linger time.Duration
}

// Execute runs the sweep cfg configures from start to end: it places
// its workers, prepares it (or with cfg.DryRun prints what Slurm would be
// given), runs every trial, shows the ranking and keeps the metrics
// served for opt.Linger. It returns nil when every trial succeeded; a
// rundir.Ending, already reported, when some or all failed or when ctx
// stopped the sweep; any other error before anything ran.
func Execute(ctx context.Context, cfg Config, opt Options) error {
	view := opt.View(cfg.Sweep.Trials)
	defer view.Close()
	log := slog.New(slog.NewTextHandler(view.Logs(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Logger, cfg.Report = log, view.Update
	if cfg.Device != "cpu" && cfg.Launch.Name != launch.SlurmName && opt.Devices != nil {
		var err error
		if cfg.Device, cfg.GPUs, err = opt.Devices(ctx, cfg.Device, log); err != nil {
			return err
		}
	}
	for _, w := range cfg.Sweep.Warnings {
		log.Warn(w)
	}
	s, err := Prepare(ctx, cfg)
	if errors.Is(err, ErrNothingToResume) {
		view.Close()
		view.Note(fmt.Sprintf("%v; results in %s/%s", err, cfg.Dir, ResultsJSON))
		return &rundir.Ending{Kind: rundir.Done}
	}
	if err != nil {
		return err
	}
	defer s.Close()
	log.Info(fmt.Sprintf("CUDA initialized in coordinator: %v", train.LinksCUDA()))
	if cfg.DryRun {
		view.Close()
		return view.DryRun(s.DryRun())
	}
	log.Info("sweep", "file", cfg.Sweep.Path, "resume", cfg.Resume, "trials", len(cfg.Sweep.Trials), "devices", s.Devices(), "parallel", s.Parallel(), "sweep_dir", s.Dir())
	view.Start()
	res, err := s.Run(ctx)
	view.Close()
	view.Results(res, s.Dir())
	defer s.Linger(ctx, opt.Linger) // after the last lines, before the exit
	ok, total := res.Counts[string(TrialSucceeded)], len(res.Trials)
	switch {
	case err != nil:
		view.Note(fmt.Sprintf("writing the results: %v", err))
		return &rundir.Ending{Kind: rundir.Failed}
	case ctx.Err() != nil:
		view.Note(fmt.Sprintf("sweep interrupted: %d of %d trials succeeded; the running ones checkpointed; results in %s; continue with tolaria sweep --resume --sweep-dir %s",
			ok, total, s.Dir(), shellword.Quote(s.Dir())))
		return &rundir.Ending{Kind: rundir.Interrupted}
	}
	note, end := rundir.Outcome(ok, total, "trial", filepath.Join(s.Dir(), ResultsJSON))
	if end != nil {
		view.Note(note)
	}
	return end
}

// Load reads the sweep cfg is to run: the sweep file at path, of at most
// maxTrials trials, or with cfg.Resume the sweep saved in cfg.Dir, ranked
// as it was unless rankByGiven says cfg.RankBy asks otherwise.
func (cfg *Config) Load(path string, maxTrials int, rankByGiven bool) error {
	var err error
	cfg.rankByGiven = rankByGiven
	if !cfg.Resume {
		cfg.Sweep, err = ReadSweepMax(path, maxTrials)
		return err
	}
	// A sweep running in the directory is said to be so before anything
	// is read of it (see Prepare).
	if err := checkFree(cfg.Dir); err != nil {
		return err
	}
	var saved Results
	// A results.json rebuilt from the journal has lost its ranking key:
	// the default, or the one given, ranks.
	if cfg.Sweep, saved, err = LoadDir(cfg.Dir); err == nil && !rankByGiven && saved.RankBy != "" {
		cfg.RankBy = saved.RankBy
	}
	return err
}

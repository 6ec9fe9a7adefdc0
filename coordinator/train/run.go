// Package train carries out one training run for the tolaria command: it
// chooses the device, finds, probes and starts a worker process (or runs a
// CPU job in this process), records the run in its directory and serves
// the metrics hub for as long as the run needs it. A sweep runs each of its
// trials through it; it knows no activity.
package train

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Request is a training run as a command asks for it.
type Request struct {
	Spec      job.Spec
	Placement Placement // Placement.Device is taken from Spec.Device
	// MetricsAddr serves /metrics there during the run (see
	// telemetry.ListenAddress); "" serves none.
	MetricsAddr string
	// Metrics, when set, receives the run's metrics in place of a server
	// of its own (MetricsAddr is then unused): a sweep's, which its
	// trials share. The run does not close it.
	Metrics *Metrics
	// Trial names the run in a sweep: its series carry it as their trial
	// label.
	Trial string
	// SummaryJSON also receives summary.json; "" writes none.
	SummaryJSON string
	Version     string          // reported by the metrics
	Shared      *trainer.Shared // the process's state, for in-process runs
	Logger      *slog.Logger
	// Started is when the command started: a summary's wall time counts
	// from it.
	Started time.Time
	// Budget, when set, answers the worker's device-memory requests: the
	// worker asks before it allocates (a sweep's broker answers); nil asks
	// nobody. The run calls it once, before its worker starts, with the
	// run's observer and log.
	Budget func(obs trainer.Observer, log *slog.Logger) Budgeter
	// Planned, when set, is the job's check done by the caller (a sweep
	// plans its trials together, see jobserver.PlanJobs): the run neither
	// loads the data nor plans it again, and records Planned.Files.
	Planned *jobserver.Planned
	// Watch, when set, hears of the worker about to run the job of s: seen
	// notes a message from it (it may be nil), and ended is called once
	// the worker has ended. A sweep keeps its workers' heartbeat ages so.
	Watch func(s telemetry.Series) (seen, ended func())
}

// A Budgeter answers one run's device-memory requests for its worker,
// and is told how the run goes: Active at every progress report, Release
// once the run has ended.
type Budgeter interface {
	Ask(jobserver.BudgetRequest, jobserver.BudgetReply) error
	Parked(jobserver.BudgetParked) error
	Active()
	// Held hears what a kept worker measured it holds once the run ended
	// (jobserver.Sink.Held), before Release.
	Held(bytes int64)
	// DeviceClosed hears, in Held's place, that a kept worker closed its
	// device once the run ended (jobserver.Sink.DeviceClosed): it holds
	// nothing there.
	DeviceClosed()
	Release()
}

// Validate checks the request, naming a setting that is wrong in a
// field.Error wrapped in refusal.ErrConfig: the spec (once in this process), and
// the paths and address the run will write to and bind.
func (r Request) Validate() error {
	if err := r.Spec.Validate(); err != nil {
		return refusal.Config(err)
	}
	if err := r.Placement.Validate(); err != nil {
		return err
	}
	if r.SummaryJSON != "" {
		if st, err := os.Stat(r.SummaryJSON); err == nil && st.IsDir() {
			return refusal.Config(field.Errorf("summary_json", "%s is a directory; give a file path", r.SummaryJSON))
		}
		// Found now, not after the whole run: the file is written by a
		// rename in its directory, which must be (or become) writable.
		if err := canCreateIn(filepath.Dir(r.SummaryJSON)); err != nil {
			return refusal.Config(field.Errorf("summary_json", "%s cannot be written: %w; give a path in a writable directory", r.SummaryJSON, err))
		}
	}
	if r.MetricsAddr != "" {
		// A malformed address is refused here; a busy port when it is bound.
		if _, err := telemetry.ListenAddress(r.MetricsAddr); err != nil {
			return refusal.Config(field.Errorf("metrics_addr", "%s: %w", r.MetricsAddr, err))
		}
	}
	return nil
}

// Run is a training run in progress: planned, its directory claimed, its
// configuration recorded and its metrics served. Prepare starts one;
// Train runs it, Record keeps its outcome, Linger and Close end it.
type Run struct {
	req     Request
	spec    job.Spec // as it runs: the device chosen, the run directory named
	dir     *rundir.Dir
	exec    *Executor
	plan    *job.Plan
	sources []data.SourceFile // the files the data was read from, for data.json
	metrics *Metrics
	shared  bool // metrics are the caller's (Request.Metrics)
	series  telemetry.Series
	events  *os.File
	wlog    *os.File // the worker's log, when the job runs in a worker process
	obs     trainer.Observer
	log     *slog.Logger
}

// Prepare checks everything that can be refused before the run directory
// is touched, so a refused request leaves an existing run as it was: the
// request, the run directory, the device, the data and the whole run's
// configuration (a resumed run's checkpoint included), and the metrics
// port. Then it claims the directory, records the configuration, opens the
// events log and logs the run's start. Close releases what it holds.
func Prepare(ctx context.Context, req Request) (_ *Run, err error) {
	if req.Logger == nil {
		req.Logger = slog.New(slog.DiscardHandler)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	r := &Run{req: req, spec: req.Spec, log: req.Logger}
	if d := r.spec.DataDir; d != "" && !filepath.IsAbs(d) {
		// config.yaml names the data for whoever reads the run later (an
		// evaluation, a resume) from another directory.
		if abs, err := filepath.Abs(d); err == nil {
			r.spec.DataDir = abs
		}
	}
	defer func() {
		if err != nil {
			_ = r.Close()
		}
	}()
	if r.dir, err = rundir.Plan(r.spec.RunDir, r.spec.Resume, time.Now()); err != nil {
		return nil, err
	}
	r.spec.RunDir = r.dir.Path()
	place := req.Placement
	place.Device = r.spec.Device
	if r.exec, err = Choose(ctx, place, req.Shared, r.log); err != nil {
		return nil, err
	}
	r.spec.Device = r.exec.Device
	switch {
	case req.Planned != nil && (r.exec.Process != nil || r.exec.Remote != nil):
		if err := req.Planned.Err(); err != nil {
			return nil, refusal.Config(err)
		}
		r.plan, r.sources = &job.Plan{Spec: r.spec}, req.Planned.Files
	default:
		if r.plan, r.sources, err = r.exec.Plan(ctx, r.spec); err != nil {
			return nil, err
		}
	}
	if err := r.dir.CheckUnfinished(); err != nil {
		return nil, err
	}
	if req.Metrics != nil {
		r.metrics, r.shared = req.Metrics, true
	} else if r.metrics, err = ServeMetrics(ctx, req.MetricsAddr, req.Version, r.log); err != nil {
		return nil, err
	}
	if err := r.dir.Claim(); err != nil {
		return nil, err
	}
	if stale := r.dir.Stale(); len(stale) > 0 {
		r.log.Info("removed the temporary files of interrupted writes", "run_dir", r.dir.Path(), "files", stale)
	}
	if r.dir.Path() != r.spec.RunDir {
		// A generated name taken by a run started in the same second.
		if r.plan.Trainer == nil {
			r.plan = &job.Plan{Spec: r.plan.Spec}
			r.plan.Spec.RunDir = r.dir.Path()
		} else if r.plan, err = r.plan.InRunDir(r.dir.Path()); err != nil {
			return nil, err
		}
		r.spec.RunDir = r.dir.Path()
	}
	if r.exec.Process != nil || r.exec.Remote != nil {
		// A worker process plans the job again on its side; this process
		// needs only the spec, and several runs at once (a sweep) should
		// not each hold a copy of their data here.
		r.plan = &job.Plan{Spec: r.plan.Spec}
	}
	return r, r.record()
}

// record writes the configuration, opens the events log and logs the
// start.
func (r *Run) record() error {
	raw, err := r.spec.ConfigFile()
	if err != nil {
		return err
	}
	cfgPath, err := r.dir.WriteConfig(raw, time.Now())
	if err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	rec := rundir.DataRecord{Dataset: r.spec.Dataset, Files: r.sources}
	if r.spec.Dataset != "synthetic" { // made from the seed: no directory read
		rec.DataDir = r.spec.DataDir
	}
	if err := r.dir.WriteData(rec); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if r.events, err = r.dir.OpenEvents(); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if r.exec.Process != nil && r.exec.Process.Stderr == nil {
		if r.wlog, err = r.dir.OpenWorkerLog(); err != nil {
			return fmt.Errorf("run directory: %w", err)
		}
		r.exec.LogTo(r.wlog)
		r.log.Info("the worker's log", "path", r.wlog.Name())
	}
	s := r.spec
	r.series = telemetry.Series{Device: s.Device, Worker: strconv.Itoa(s.Rank), Trial: r.req.Trial}
	r.obs = r.metrics.Observer(r.events, r.series)
	r.obs.Observe(trainer.Event{Time: time.Now(), Kind: trainer.EventStart, Fields: map[string]any{
		"device": s.Device, "enable_graphs": s.EnableGraphs, "config": cfgPath, "resume": s.Resume}})
	return nil
}

// Spec is the job as it runs: the device chosen, the run directory named.
func (r *Run) Spec() job.Spec { return r.spec }

// Dir is the run's directory.
func (r *Run) Dir() *rundir.Dir { return r.dir }

// Train runs the job, reporting progress; a failure is logged in the
// events before it is returned.
func (r *Run) Train(ctx context.Context, progress func(trainer.Progress)) (trainer.Summary, error) {
	s := r.spec
	r.log.Info("training", "device", s.Device, "graphs", s.EnableGraphs, "run_dir", s.RunDir, "epochs", s.Epochs,
		"batch_size", s.BatchSize, "dataset", s.Dataset)
	var seen func()
	ended := func() {}
	if r.req.Watch != nil {
		seen, ended = r.req.Watch(r.series)
	}
	sink := jobserver.Sink{Observer: r.obs, Progress: progress, Alive: seen}
	if r.req.Budget != nil {
		bs := r.req.Budget(r.obs, r.log)
		defer bs.Release()
		sink.Budget, sink.Parked, sink.Held, sink.DeviceClosed = bs.Ask, bs.Parked, bs.Held, bs.DeviceClosed
		sink.Progress = func(p trainer.Progress) {
			bs.Active()
			if progress != nil {
				progress(p)
			}
		}
	}
	sum, err := r.exec.Run(ctx, r.plan, sink)
	ended()
	if err != nil && r.wlog != nil {
		wf := &WorkerFailure{Err: err, Log: r.wlog.Name()}
		if isReported(err) {
			// The worker's message says what failed; its log says what
			// led there.
			wf.Tail = worker.LogTail(r.wlog.Name())
		}
		err = wf
	}
	if err != nil {
		r.obs.Observe(trainer.Event{Time: time.Now(), Kind: trainer.EventError, Fields: map[string]any{"error": err.Error()}})
	}
	return sum, err
}

// Record keeps a finished (or stopped) run's summary: summary.json, the
// SummaryJSON copy, and the done event. It sets the wall time.
func (r *Run) Record(sum *trainer.Summary) error {
	sum.WallSeconds = time.Since(r.req.Started).Seconds()
	if err := r.dir.WriteSummary(*sum); err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	if r.req.SummaryJSON != "" {
		if err := rundir.WriteSummary(r.req.SummaryJSON, *sum); err != nil {
			return field.Errorf("summary_json", "%w", err)
		}
	}
	r.obs.Observe(trainer.Event{Time: time.Now(), Kind: trainer.EventDone, Fields: map[string]any{"interrupted": sum.Interrupted}})
	return nil
}

// Linger keeps /metrics up for d (see Metrics.Linger); the caller's
// metrics (Request.Metrics) are the caller's to keep.
func (r *Run) Linger(ctx context.Context, d time.Duration) {
	if !r.shared {
		r.metrics.Linger(ctx, d)
	}
}

// Close closes the events log, releases the run directory and stops the
// metrics server.
func (r *Run) Close() error {
	var errs []error
	if r.wlog != nil {
		errs = append(errs, r.wlog.Close())
	}
	if r.events != nil {
		errs = append(errs, r.events.Close())
	}
	if r.dir != nil {
		errs = append(errs, r.dir.Release())
	}
	if r.metrics != nil && !r.shared {
		errs = append(errs, r.metrics.Close())
	}
	return errors.Join(errs...)
}

// WorkerFailure is a run in a worker process that failed: Err says how (a
// *worker.ProcessError or *worker.NoAnswerError, which carry the tail of
// the worker's log, or the *worker.Error the worker reported), Log is
// where the whole log is, and Tail, for a reported error, is the last
// lines of the log since the worker's start.
type WorkerFailure struct {
	Err  error
	Log  string
	Tail string
}

func (e *WorkerFailure) Error() string { return fmt.Sprintf("%v\n%s", e.Err, e.Note()) }

// Note says where the worker's log is, after its last lines when they are
// not in Err already.
func (e *WorkerFailure) Note() string {
	if e.Tail == "" {
		return fmt.Sprintf("(the worker's whole log: %s)", e.Log)
	}
	return fmt.Sprintf("the last lines of the worker's log (%s):\n%s", e.Log, e.Tail)
}

func (e *WorkerFailure) Unwrap() error { return e.Err }

// isReported says whether err is a failure the worker reported itself,
// which its message already explains.
func isReported(err error) bool {
	var we *worker.Error
	return errors.As(err, &we)
}

// canCreateIn checks, without leaving anything behind, that a file can be
// created in dir: in dir itself, or, when dir does not exist yet, in the
// nearest directory above it that does (the rest is made on writing).
func canCreateIn(dir string) error {
	for {
		st, err := os.Stat(dir)
		switch {
		case err == nil && !st.IsDir():
			return fmt.Errorf("%s is not a directory", dir)
		case err == nil:
			f, err := os.CreateTemp(dir, ".tolaria-write-check-*")
			if err != nil {
				return err
			}
			f.Close()
			return os.Remove(f.Name())
		case !errors.Is(err, os.ErrNotExist):
			return err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return err
		}
		dir = parent
	}
}

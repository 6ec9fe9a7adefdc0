package coordinator

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Metrics is the metrics side of a run or a sweep: a registry and its
// /metrics server while they need them. Without an address it serves
// nothing and its observer writes the events log alone.
type Metrics struct {
	m     *telemetry.Metrics
	srv   *telemetry.Server
	log   *slog.Logger
	sweep *telemetry.SweepMetrics // a sweep's own; nil for a run
	// budgets are a sweep's budget broker's; nil for a run
	budgets *telemetry.BudgetMetrics
}

// ServeMetrics binds addr (see telemetry.ListenAddress) and serves the
// run's metrics there until Close or until ctx is done; "" serves
// nothing. Binding comes before anything is written, so a busy port is
// refused without side effects.
func ServeMetrics(ctx context.Context, addr, version string, log *slog.Logger) (*Metrics, error) {
	return serveMetrics(ctx, addr, version, log, false)
}

// serveSweepMetrics is ServeMetrics for a sweep: its trials' series carry
// a trial label, and the sweep's own families (trials by state, failures
// by reason, retries, heartbeat ages) are served with them.
func serveSweepMetrics(ctx context.Context, addr, version string, log *slog.Logger) (*Metrics, error) {
	return serveMetrics(ctx, addr, version, log, true)
}

func serveMetrics(ctx context.Context, addr, version string, log *slog.Logger, sweep bool) (*Metrics, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if addr == "" {
		return &Metrics{log: log}, nil
	}
	r := &Metrics{m: telemetry.NewMetrics(version), log: log}
	if sweep {
		r.m = telemetry.NewTrialMetrics(version)
		var err error
		if r.sweep, err = r.m.Sweep(trialStates(), failureReasons()); err != nil {
			return nil, err
		}
		if r.budgets, err = r.m.Budgets(); err != nil {
			return nil, err
		}
	}
	srv, err := telemetry.Serve(ctx, addr, r.m.Registry())
	if err != nil {
		return nil, setupErr(field.Errorf("metrics_addr", "%s: %w", addr, err))
	}
	r.srv = srv
	log.Info("serving metrics", "url", srv.URL())
	return r, nil
}

// URL is the metrics endpoint, or "" when none is served.
func (r *Metrics) URL() string {
	if r.srv == nil {
		return ""
	}
	return r.srv.URL()
}

// Observer is the run's observer: the events log, and the metrics when
// they are served. The series' worker is the job's rank (the workers of a
// sharded job are told apart by it), and in a sweep its trial is the
// trial's name.
func (r *Metrics) Observer(events io.Writer, s telemetry.Series) trainer.Observer {
	evlog := telemetry.NewEventLog(events)
	if r.m == nil {
		return evlog.Observer()
	}
	return trainer.Tee(evlog.Observer(), r.m.SeriesObserver(s))
}

// watchWorker starts, in a sweep's metrics, the heartbeat age of the
// worker about to run the job of s: seen notes a message from it (nil
// outside a sweep), and ended, once the worker has ended, removes its
// heartbeat age and the job's last-step time (see telemetry.EndSeries).
func (r *Metrics) watchWorker(s telemetry.Series) (seen, ended func()) {
	if r.sweep == nil {
		return nil, func() {}
	}
	beat := r.sweep.Worker(s.Trial)
	return beat.Seen, func() {
		beat.End()
		r.m.EndSeries(s)
	}
}

// setTrials sets a sweep's trials-by-state gauge from its counts, which
// the sweep keeps as its rows change (counting the rows at every change
// would cost a large sweep time in the square of its trials).
func (r *Metrics) setTrials(byState map[TrialState]int) {
	if r.sweep == nil {
		return
	}
	counts := map[string]int{}
	for _, st := range trialStates() {
		counts[st] = byState[TrialState(st)]
	}
	r.sweep.SetTrials(counts)
}

// trialFailed counts a sweep's failed attempt at a trial, by reason (see
// failureReason).
func (r *Metrics) trialFailed(reason string) {
	if r.sweep != nil {
		r.sweep.Failed(reason)
	}
}

// trialRetried counts a failed trial a sweep starts again.
func (r *Metrics) trialRetried() {
	if r.sweep != nil {
		r.sweep.Retried()
	}
}

// Linger keeps /metrics up for d after the run, so that Prometheus scrapes
// the final values (the last epoch's accuracy) before the target goes; ctx
// ending (a signal) ends it at once.
func (r *Metrics) Linger(ctx context.Context, d time.Duration) {
	if r.srv == nil || d <= 0 || ctx.Err() != nil {
		return
	}
	r.log.Info("serving the final metrics before exiting", "for", d.String(), "url", r.srv.URL())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Close stops the server.
func (r *Metrics) Close() error {
	if r.srv == nil {
		return nil
	}
	return r.srv.Close()
}

// budgetBooks sets a sweep's budget figures of device.
func (r *Metrics) budgetBooks(device string, b Books) {
	if r != nil && r.budgets != nil {
		r.budgets.SetBooks(device, b.Capacity, b.Granted, b.Waiting, b.OldestWait)
	}
}

// budgetGranted records a grant after waiting d.
func (r *Metrics) budgetGranted(device string, d time.Duration) {
	if r != nil && r.budgets != nil {
		r.budgets.Granted(device, d)
	}
}

// budgetRefused counts a refused request.
func (r *Metrics) budgetRefused(device string) {
	if r != nil && r.budgets != nil {
		r.budgets.Refused(device)
	}
}

// budgetParked counts a parked trial.
func (r *Metrics) budgetParked(device string) {
	if r != nil && r.budgets != nil {
		r.budgets.Parked(device)
	}
}

// ServeRLMetrics is ServeMetrics for a reinforcement-learning run: the
// run's own families (RLMetrics) on the registry, and the graph families
// of its agents' halves with an agent label (telemetry.NewAgentMetrics);
// "" serves nothing and returns no RLMetrics.
func ServeRLMetrics(ctx context.Context, addr, version string, log *slog.Logger) (*Metrics, *telemetry.RLMetrics, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if addr == "" {
		return &Metrics{log: log}, nil, nil
	}
	// The graph families carry the agent, as the run's own do.
	r := &Metrics{m: telemetry.NewAgentMetrics(version), log: log}
	rl, err := r.m.RL([]string{AgentStarting, AgentRunning, AgentSucceeded, AgentFailed, AgentInterrupted})
	if err != nil {
		return nil, nil, err
	}
	srv, err := telemetry.Serve(ctx, addr, r.m.Registry())
	if err != nil {
		return nil, nil, setupErr(field.Errorf("metrics_addr", "%s: %w", addr, err))
	}
	r.srv = srv
	log.Info("serving metrics", "url", srv.URL())
	return r, rl, nil
}

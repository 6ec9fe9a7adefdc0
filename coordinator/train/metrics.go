package train

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Metrics is the metrics hub of a run or an activity: a registry and its
// /metrics server while they need them. Without an address it serves
// nothing and its observer writes the events log alone. Each activity
// registers its own families on the registry (see ServeFamilies); the hub
// knows only training's.
type Metrics struct {
	m   *telemetry.Metrics
	srv *telemetry.Server
	log *slog.Logger
}

// ServeMetrics binds addr (see telemetry.ListenAddress) and serves the
// run's metrics there until Close or until ctx is done; "" serves
// nothing. Binding comes before anything is written, so a busy port is
// refused without side effects.
func ServeMetrics(ctx context.Context, addr, version string, log *slog.Logger) (*Metrics, error) {
	return ServeFamilies(ctx, addr, log, func() (*telemetry.Metrics, error) { return telemetry.NewMetrics(version), nil })
}

// ServeFamilies is ServeMetrics for an activity with families of its own:
// families makes the registry (telemetry.NewMetrics, or a variant whose
// series carry a trial or an agent label) and registers the activity's
// families on it, keeping what it needs to update them. It is called only
// when addr is not "".
func ServeFamilies(ctx context.Context, addr string, log *slog.Logger, families func() (*telemetry.Metrics, error)) (*Metrics, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if addr == "" {
		return &Metrics{log: log}, nil
	}
	m, err := families()
	if err != nil {
		return nil, err
	}
	r := &Metrics{m: m, log: log}
	srv, err := telemetry.Serve(ctx, addr, r.m.Registry())
	if err != nil {
		return nil, refusal.Setup(field.Errorf("metrics_addr", "%s: %w", addr, err))
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

// EndSeries removes the series of s whose job has ended (see
// telemetry.EndSeries); it does nothing when no metrics are served.
func (r *Metrics) EndSeries(s telemetry.Series) {
	if r.m != nil {
		r.m.EndSeries(s)
	}
}

// Linger keeps /metrics up for d after the run, so that Prometheus scrapes
// the final values (the last epoch's accuracy, and that the process
// finished, which keeps TolariaTargetDown silent once it has gone) before
// the target goes; ctx ending (a signal) ends it at once.
func (r *Metrics) Linger(ctx context.Context, d time.Duration) {
	if r.m != nil {
		r.m.Finished()
	}
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

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

// Metrics is the metrics side of a run: a registry and its /metrics
// server while the run needs them. Without an address it serves nothing
// and its observer writes the events log alone.
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
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if addr == "" {
		return &Metrics{log: log}, nil
	}
	m := telemetry.NewMetrics(version)
	srv, err := telemetry.Serve(ctx, addr, m.Registry())
	if err != nil {
		return nil, setupErr(field.Errorf("metrics_addr", "%s: %w", addr, err))
	}
	log.Info("serving metrics", "url", srv.URL())
	return &Metrics{m: m, srv: srv, log: log}, nil
}

// URL is the metrics endpoint, or "" when none is served.
func (r *Metrics) URL() string {
	if r.srv == nil {
		return ""
	}
	return r.srv.URL()
}

// Observer is the run's observer: the events log, and the metrics when
// they are served. worker is the job's rank: the workers of a sharded job
// are told apart by it.
func (r *Metrics) Observer(events io.Writer, device, worker string) trainer.Observer {
	evlog := telemetry.NewEventLog(events)
	if r.m == nil {
		return evlog.Observer()
	}
	return trainer.Tee(evlog.Observer(), r.m.Observer(device, worker))
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

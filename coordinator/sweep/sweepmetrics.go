package sweep

import (
	"context"
	"log/slog"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/telemetry"
)

// sweepFamilies are the metric families a sweep registers on its hub's
// registry: trials by state, failures by reason, retries and heartbeat
// ages, and its budget broker's books. A nil *sweepFamilies (no metrics
// served) records nothing.
type sweepFamilies struct {
	hub     *train.Metrics
	reg     *telemetry.Metrics // the registry they are on
	sweep   *telemetry.SweepMetrics
	budgets *telemetry.BudgetMetrics
}

// serveSweepMetrics serves a sweep's metrics (see train.ServeFamilies): its
// trials' series carry a trial label, and the sweep's own families are
// served with them; families is nil when addr is "".
func serveSweepMetrics(ctx context.Context, addr, version string, log *slog.Logger) (*train.Metrics, *sweepFamilies, error) {
	var f *sweepFamilies
	hub, err := train.ServeFamilies(ctx, addr, log, func() (*telemetry.Metrics, error) {
		m := telemetry.NewTrialMetrics(version)
		f = &sweepFamilies{reg: m}
		var err error
		if f.sweep, err = m.Sweep(trialStates(), failureReasons()); err != nil {
			return nil, err
		}
		if f.budgets, err = m.Budgets(); err != nil {
			return nil, err
		}
		return m, nil
	})
	if err != nil {
		return nil, nil, err
	}
	if f != nil {
		f.hub = hub
	}
	return hub, f, nil
}

// watchWorker starts the heartbeat age of the worker about to run the job
// of s (see train.Request.Watch): seen notes a message from it, and ended, once
// the worker has ended, removes its heartbeat age and the job's last-step
// time (see train.Metrics.EndSeries).
func (f *sweepFamilies) watchWorker(s telemetry.Series) (seen, ended func()) {
	if f == nil {
		return nil, func() {}
	}
	beat := f.sweep.Worker(s.Trial)
	return beat.Seen, func() {
		beat.End()
		f.hub.EndSeries(s)
	}
}

// setTrials sets the trials-by-state gauge from the sweep's counts, which
// the sweep keeps as its rows change (counting the rows at every change
// would cost a large sweep time in the square of its trials).
func (f *sweepFamilies) setTrials(byState map[TrialState]int) {
	if f == nil {
		return
	}
	counts := map[string]int{}
	for _, st := range trialStates() {
		counts[st] = byState[TrialState(st)]
	}
	f.sweep.SetTrials(counts)
}

// trialFailed counts a failed attempt at a trial, by reason (see
// failureReason).
func (f *sweepFamilies) trialFailed(reason string) {
	if f != nil {
		f.sweep.Failed(reason)
	}
}

// trialRetried counts a failed trial the sweep starts again.
func (f *sweepFamilies) trialRetried() {
	if f != nil {
		f.sweep.Retried()
	}
}

// budgetBooks sets the budget figures of device.
func (f *sweepFamilies) budgetBooks(device string, b budget.Books) {
	if f != nil {
		f.budgets.SetBooks(device, b.Capacity, b.Granted, b.Waiting, b.OldestWait)
	}
}

// budgetGranted records a grant after waiting d.
func (f *sweepFamilies) budgetGranted(device string, d time.Duration) {
	if f != nil {
		f.budgets.Granted(device, d)
	}
}

// budgetRefused counts a refused request.
func (f *sweepFamilies) budgetRefused(device string) {
	if f != nil {
		f.budgets.Refused(device)
	}
}

// budgetParked counts a parked trial.
func (f *sweepFamilies) budgetParked(device string) {
	if f != nil {
		f.budgets.Parked(device)
	}
}

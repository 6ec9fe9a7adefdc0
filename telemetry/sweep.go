package telemetry

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric families of a sweep's coordinator, besides its trials' own
// (which carry LabelTrial, see NewTrialMetrics).
const (
	MetricSweepTrials        = "tolaria_sweep_trials"
	MetricSweepFailuresTotal = "tolaria_sweep_trial_failures_total"
	MetricSweepRetriesTotal  = "tolaria_sweep_trial_retries_total"
	MetricWorkerHeartbeatAge = "tolaria_worker_heartbeat_age_seconds"
)

// SweepFailureOther is the reason label of a failure whose reason is not
// one the sweep declared, which keeps the label's cardinality bounded.
const SweepFailureOther = "other"

// SweepMetricNames returns the name of every sweep metric family, as an
// end-to-end test or a dashboard review expects to find them on a sweep's
// /metrics.
func SweepMetricNames() []string {
	return []string{MetricSweepTrials, MetricSweepFailuresTotal, MetricSweepRetriesTotal, MetricWorkerHeartbeatAge}
}

// SweepMetrics are a sweep's own metrics: its trials by state, their failed
// attempts by reason, the retries, and the time since each live worker's
// last message. Its methods are safe for concurrent use.
type SweepMetrics struct {
	trials   *prometheus.GaugeVec
	failures *prometheus.CounterVec
	retries  prometheus.Counter
	beats    *heartbeatAges
	reasons  []string // sorted; SweepFailureOther included
}

// Sweep registers the sweep's families on m's registry and returns them.
// states are the values of the trials gauge's state label and reasons those
// of the failures counter's reason label (SweepFailureOther is added): each
// series starts at zero, so that increase() sees the first failure and a
// state with no trial reads 0 rather than nothing. Call it once per
// Metrics; a second call fails to register.
func (m *Metrics) Sweep(states, reasons []string) (*SweepMetrics, error) {
	s := &SweepMetrics{
		trials: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricSweepTrials,
			Help: "Trials of the sweep by state (pending, running, succeeded, failed, interrupted).",
		}, []string{LabelState}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricSweepFailuresTotal,
			Help: "Failed trial attempts, by reason: how the worker process failed (hung, crashed, exit, protocol, killed, no_answer), the kind of error the worker reported (usage, checkpoint, nonfinite, no_device, failure), or other.",
		}, []string{LabelReason}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricSweepRetriesTotal,
			Help: "Failed trials started again (--retries).",
		}),
		beats: &heartbeatAges{
			desc: prometheus.NewDesc(MetricWorkerHeartbeatAge,
				"Time since the last message (a heartbeat or any other) from each live trial's worker; the series goes when the worker ends.",
				[]string{LabelTrial}, nil),
			live: map[string]*Heartbeat{},
		},
		reasons: append(slices.Clone(reasons), SweepFailureOther),
	}
	slices.Sort(s.reasons)
	s.reasons = slices.Compact(s.reasons)
	for _, st := range states {
		s.trials.WithLabelValues(st).Set(0)
	}
	for _, r := range s.reasons {
		s.failures.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{s.trials, s.failures, s.retries, s.beats} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SetTrials sets the trials gauge to counts, by state; a state missing
// from counts keeps its value, so counts should name every state.
func (s *SweepMetrics) SetTrials(counts map[string]int) {
	for st, n := range counts {
		s.trials.WithLabelValues(st).Set(float64(n))
	}
}

// Failed counts a failed attempt at a trial; a reason not declared to
// Sweep counts as SweepFailureOther.
func (s *SweepMetrics) Failed(reason string) {
	if _, ok := slices.BinarySearch(s.reasons, reason); !ok {
		reason = SweepFailureOther
	}
	s.failures.WithLabelValues(reason).Inc()
}

// Retried counts a failed trial started again.
func (s *SweepMetrics) Retried() { s.retries.Inc() }

// Worker starts the heartbeat age of the trial's worker, now: call
// Heartbeat.Seen on every message from it, and Heartbeat.End once it has
// ended, which removes the series.
func (s *SweepMetrics) Worker(trial string) *Heartbeat {
	h := &Heartbeat{ages: s.beats, trial: trial}
	h.Seen()
	s.beats.mu.Lock()
	s.beats.live[trial] = h
	s.beats.mu.Unlock()
	return h
}

// Heartbeat is one live worker's series of the heartbeat-age gauge.
type Heartbeat struct {
	ages  *heartbeatAges
	trial string
	last  atomic.Int64 // unix nanoseconds of the last message
}

// Seen notes a message from the worker.
func (h *Heartbeat) Seen() { h.last.Store(time.Now().UnixNano()) }

// End removes the worker's series.
func (h *Heartbeat) End() {
	h.ages.mu.Lock()
	defer h.ages.mu.Unlock()
	if h.ages.live[h.trial] == h {
		delete(h.ages.live, h.trial)
	}
}

// heartbeatAges collects the gauge at scrape time, so the age grows
// between messages without anything ticking.
type heartbeatAges struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	live map[string]*Heartbeat
}

func (a *heartbeatAges) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *heartbeatAges) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for trial, h := range a.live {
		age := max(now.Sub(time.Unix(0, h.last.Load())).Seconds(), 0)
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, age, trial)
	}
}

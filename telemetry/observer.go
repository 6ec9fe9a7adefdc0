package telemetry

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolaria-ml/tolaria/trainer"
)

// Series names the labelled series one job reports into: its device, its
// worker (the job's rank; "0" for a single run) and, on a sweep's metrics
// (NewTrialMetrics), its trial, or on a reinforcement-learning run's
// (NewAgentMetrics), its agent. Trial and Agent are ignored by metrics
// made without them.
type Series struct {
	Device, Worker, Trial string
	// Agent is the index of the agent whose half reports; its Worker is
	// then the half (RLActor or RLLearner).
	Agent string
}

// The workers of a reinforcement-learning agent: its two halves, each a
// process of its own that reports its graph activity.
const (
	RLActor   = "actor"
	RLLearner = "learner"
)

// values are the label values of s, in the families' label order.
func (m *Metrics) values(s Series, extra ...string) []string {
	v := []string{s.Device, s.Worker}
	if m.perTrial {
		v = append(v, s.Trial)
	}
	if m.perAgent {
		v = append(v, s.Agent)
	}
	return append(v, extra...)
}

// Observer returns a trainer.Observer that records into m under the given
// device and worker labels (see SeriesObserver).
func (m *Metrics) Observer(device, worker string) trainer.Observer {
	return m.SeriesObserver(Series{Device: device, Worker: worker})
}

// EndSeries removes the last-step timestamp of a job that has ended, so
// that the stall alert judges only jobs that are still meant to step: a
// sweep's finished trial must not read as stalled while the sweep goes on.
// The job's other series keep their final values.
func (m *Metrics) EndSeries(s Series) {
	m.lastStep.DeleteLabelValues(m.values(s)...)
}

// SeriesObserver returns a trainer.Observer that records into m under the
// labels of s. It
// creates the labelled series at once: counters, histograms and the graph
// and prefetch gauges start at zero, every fallback reason included, and the
// last-step timestamp starts at the time of this call, so that a job is
// visible, and increase() and the stall alert work, before its first step.
// Loss, accuracy and device memory appear when first reported.
//
// On a reinforcement-learning run's metrics (NewAgentMetrics) the observer
// is an agent's half: it creates and feeds the graph families only
// (tolaria_graph_*), and ignores the training steps, loss, accuracy and
// epochs (an agent's progress has families of its own, Metrics.RL, and its
// own stall alert, which the training last-step timestamp must not
// duplicate).
//
// Observers for the same labels share their series. The returned Observer
// is safe for concurrent use and never blocks. Durations that are negative
// or NaN are dropped rather than recorded.
func (m *Metrics) SeriesObserver(s Series) trainer.Observer {
	lv := m.values(s)
	o := &metricsObserver{
		m:              m,
		series:         s,
		graphEnabled:   m.graphEnabled.WithLabelValues(lv...),
		captureSeconds: m.captureSeconds.WithLabelValues(lv...),
		replaySeconds:  m.replaySeconds.WithLabelValues(lv...),
		replaysTotal:   m.replaysTotal.WithLabelValues(lv...),
		capturedPooled: m.capturesTotal.WithLabelValues(m.values(s, "true")...),
		capturedFresh:  m.capturesTotal.WithLabelValues(m.values(s, "false")...),
		poolReserved:   m.poolReserved.WithLabelValues(lv...),
		execUpdates:    m.execUpdates.WithLabelValues(lv...),
		fallback:       make(map[string]prometheus.Counter),
	}
	for _, reason := range FallbackReasons() {
		o.fallback[reason] = m.fallbackTotal.WithLabelValues(m.values(s, reason)...)
	}
	o.graphEnabled.Set(0)
	o.poolReserved.Set(0)
	if !m.perAgent {
		o.job = &jobSeries{
			stageCopySeconds: m.stageCopySeconds.WithLabelValues(lv...),
			prefetchDisabled: m.prefetchDisabled.WithLabelValues(lv...),
			stepSeconds:      m.stepSeconds.WithLabelValues(lv...),
			samplesTotal:     m.samplesTotal.WithLabelValues(lv...),
			trainEpoch:       m.trainEpoch.WithLabelValues(lv...),
			lastStep:         m.lastStep.WithLabelValues(lv...),
			checkpoints:      m.checkpoints.WithLabelValues(lv...),
		}
		o.job.prefetchDisabled.Set(0)
		o.job.trainEpoch.Set(0)
		o.job.lastStep.SetToCurrentTime()
	}
	return o
}

// metricsObserver holds the series of one device and worker, resolved once
// so that the hot path does no label lookups.
type metricsObserver struct {
	m      *Metrics
	series Series

	graphEnabled   prometheus.Gauge
	captureSeconds prometheus.Observer
	replaySeconds  prometheus.Observer
	replaysTotal   prometheus.Counter
	capturedPooled prometheus.Counter
	capturedFresh  prometheus.Counter
	poolReserved   prometheus.Gauge
	execUpdates    prometheus.Counter
	fallback       map[string]prometheus.Counter // read-only after creation
	// job is nil for an agent's half, which feeds the graph families only.
	job *jobSeries
}

// jobSeries are the series of a training job beyond the graph families.
type jobSeries struct {
	stageCopySeconds prometheus.Observer
	prefetchDisabled prometheus.Gauge
	stepSeconds      prometheus.Observer
	samplesTotal     prometheus.Counter
	trainEpoch       prometheus.Gauge
	lastStep         prometheus.Gauge
	checkpoints      prometheus.Counter
}

func validSeconds(s float64) bool { return s >= 0 && !math.IsInf(s, 1) }

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Observe records m; it ignores a kind of measurement it does not know.
func (o *metricsObserver) Observe(m trainer.Measurement) { o.record(m) }

// record records m and reports whether telemetry decided what to do with
// its kind (a test checks that it has, for every kind).
func (o *metricsObserver) record(m trainer.Measurement) bool {
	switch m := m.(type) {
	case trainer.GraphEnabled:
		o.graphEnabled.Set(boolValue(m.On))
	case trainer.Captured:
		if m.Pooled {
			o.capturedPooled.Inc()
		} else {
			o.capturedFresh.Inc()
		}
		if validSeconds(m.Seconds) {
			o.captureSeconds.Observe(m.Seconds)
		}
	case trainer.Replayed:
		o.replaysTotal.Inc()
		if validSeconds(m.Seconds) {
			o.replaySeconds.Observe(m.Seconds)
		}
	case trainer.StageCopied:
		if o.job != nil && validSeconds(m.Seconds) {
			o.job.stageCopySeconds.Observe(m.Seconds)
		}
	case trainer.Fallback:
		c, ok := o.fallback[m.Reason]
		if !ok {
			c = o.fallback[FallbackOther]
		}
		c.Inc()
	case trainer.ExecUpdated:
		o.execUpdates.Inc()
	case trainer.PoolReserved:
		o.poolReserved.Set(float64(m.Bytes))
	case trainer.PrefetchDisabled, trainer.Stepped, trainer.TrainLoss, trainer.EvalAccuracy, trainer.Epoch:
		if o.job != nil {
			o.recordJob(m)
		}
	case trainer.DeviceMemory:
		o.m.deviceMemory.WithLabelValues(o.m.values(o.series, m.What)...).Set(float64(m.Bytes))
	case trainer.TrainBatch:
		// An audit of the data path for tests; no metric.
	case trainer.MemoryBill:
		// Once per run, in the events log as its memory_bill event;
		// device memory in use is the device_memory gauge.
	case trainer.Event:
		// Events go to the EventLog (see EventLog.Observer and trainer.Tee);
		// a checkpoint is counted here too.
		if o.job != nil && m.Kind == trainer.EventCheckpoint {
			o.job.checkpoints.Inc()
		}
	default:
		return false
	}
	return true
}

// recordJob records a measurement of a training job's own families.
func (o *metricsObserver) recordJob(m trainer.Measurement) {
	switch m := m.(type) {
	case trainer.PrefetchDisabled:
		o.job.prefetchDisabled.Set(boolValue(m.Disabled))
	case trainer.Stepped:
		if validSeconds(m.Seconds) {
			o.job.stepSeconds.Observe(m.Seconds)
		}
		if m.Samples > 0 {
			o.job.samplesTotal.Add(float64(m.Samples))
		}
		o.job.lastStep.SetToCurrentTime()
	case trainer.TrainLoss:
		o.m.trainLoss.WithLabelValues(o.m.values(o.series)...).Set(m.Loss)
	case trainer.EvalAccuracy:
		o.m.evalAccuracy.WithLabelValues(o.m.values(o.series)...).Set(m.Accuracy)
	case trainer.Epoch:
		o.job.trainEpoch.Set(float64(m.Epoch))
	}
}

// String names the observer's labels, for logs and test failures.
func (o *metricsObserver) String() string {
	s := "telemetry.Observer(device=" + strconv.Quote(o.series.Device) + ", worker=" + strconv.Quote(o.series.Worker)
	if o.m.perTrial {
		s += ", trial=" + strconv.Quote(o.series.Trial)
	}
	if o.m.perAgent {
		s += ", agent=" + strconv.Quote(o.series.Agent)
	}
	return s + ")"
}

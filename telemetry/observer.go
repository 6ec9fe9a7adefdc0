package telemetry

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolaria-ml/tolaria/trainer"
)

// Observer returns a trainer.Observer that records into m under the given
// device and worker labels (worker "0" for a single in-process run). It
// creates the labelled series at once: counters, histograms and the graph
// and prefetch gauges start at zero, every fallback reason included, and the
// last-step timestamp starts at the time of this call, so that a job is
// visible, and increase() and the stall alert work, before its first step.
// Loss, accuracy and device memory appear when first reported.
//
// Observers for the same labels share their series. The returned Observer
// is safe for concurrent use and never blocks. Durations that are negative
// or NaN are dropped rather than recorded.
func (m *Metrics) Observer(device, worker string) trainer.Observer {
	o := &metricsObserver{
		m:                m,
		device:           device,
		worker:           worker,
		graphEnabled:     m.graphEnabled.WithLabelValues(device, worker),
		captureSeconds:   m.captureSeconds.WithLabelValues(device, worker),
		replaySeconds:    m.replaySeconds.WithLabelValues(device, worker),
		stageCopySeconds: m.stageCopySeconds.WithLabelValues(device, worker),
		replaysTotal:     m.replaysTotal.WithLabelValues(device, worker),
		capturedPooled:   m.capturesTotal.WithLabelValues(device, worker, "true"),
		capturedFresh:    m.capturesTotal.WithLabelValues(device, worker, "false"),
		poolReserved:     m.poolReserved.WithLabelValues(device, worker),
		execUpdates:      m.execUpdates.WithLabelValues(device, worker),
		prefetchDisabled: m.prefetchDisabled.WithLabelValues(device, worker),
		stepSeconds:      m.stepSeconds.WithLabelValues(device, worker),
		samplesTotal:     m.samplesTotal.WithLabelValues(device, worker),
		trainEpoch:       m.trainEpoch.WithLabelValues(device, worker),
		lastStep:         m.lastStep.WithLabelValues(device, worker),
		fallback:         make(map[string]prometheus.Counter),
	}
	for _, reason := range FallbackReasons() {
		o.fallback[reason] = m.fallbackTotal.WithLabelValues(device, worker, reason)
	}
	o.graphEnabled.Set(0)
	o.poolReserved.Set(0)
	o.prefetchDisabled.Set(0)
	o.trainEpoch.Set(0)
	o.lastStep.SetToCurrentTime()
	return o
}

// metricsObserver holds the series of one device and worker, resolved once
// so that the hot path does no label lookups.
type metricsObserver struct {
	m              *Metrics
	device, worker string

	graphEnabled     prometheus.Gauge
	captureSeconds   prometheus.Observer
	replaySeconds    prometheus.Observer
	stageCopySeconds prometheus.Observer
	replaysTotal     prometheus.Counter
	capturedPooled   prometheus.Counter
	capturedFresh    prometheus.Counter
	poolReserved     prometheus.Gauge
	execUpdates      prometheus.Counter
	prefetchDisabled prometheus.Gauge
	stepSeconds      prometheus.Observer
	samplesTotal     prometheus.Counter
	trainEpoch       prometheus.Gauge
	lastStep         prometheus.Gauge
	fallback         map[string]prometheus.Counter // read-only after creation
}

func validSeconds(s float64) bool { return s >= 0 && !math.IsInf(s, 1) }

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (o *metricsObserver) GraphEnabled(on bool) { o.graphEnabled.Set(boolValue(on)) }

func (o *metricsObserver) Captured(seconds float64, pooled bool) {
	if pooled {
		o.capturedPooled.Inc()
	} else {
		o.capturedFresh.Inc()
	}
	if validSeconds(seconds) {
		o.captureSeconds.Observe(seconds)
	}
}

func (o *metricsObserver) Replayed(seconds float64) {
	o.replaysTotal.Inc()
	if validSeconds(seconds) {
		o.replaySeconds.Observe(seconds)
	}
}

func (o *metricsObserver) StageCopied(seconds float64) {
	if validSeconds(seconds) {
		o.stageCopySeconds.Observe(seconds)
	}
}

func (o *metricsObserver) Fallback(reason string) {
	c, ok := o.fallback[reason]
	if !ok {
		c = o.fallback[FallbackOther]
	}
	c.Inc()
}

func (o *metricsObserver) ExecUpdated() { o.execUpdates.Inc() }

func (o *metricsObserver) PoolReserved(bytes int64) { o.poolReserved.Set(float64(bytes)) }

func (o *metricsObserver) PrefetchToDeviceDisabled(disabled bool) {
	o.prefetchDisabled.Set(boolValue(disabled))
}

func (o *metricsObserver) Stepped(seconds float64, samples int) {
	if validSeconds(seconds) {
		o.stepSeconds.Observe(seconds)
	}
	if samples > 0 {
		o.samplesTotal.Add(float64(samples))
	}
	o.lastStep.SetToCurrentTime()
}

func (o *metricsObserver) TrainLoss(loss float64) {
	o.m.trainLoss.WithLabelValues(o.device, o.worker).Set(loss)
}

func (o *metricsObserver) EvalAccuracy(acc float64) {
	o.m.evalAccuracy.WithLabelValues(o.device, o.worker).Set(acc)
}

func (o *metricsObserver) Epoch(epoch int) { o.trainEpoch.Set(float64(epoch)) }

func (o *metricsObserver) DeviceMemory(kind string, bytes int64) {
	o.m.deviceMemory.WithLabelValues(o.device, o.worker, kind).Set(float64(bytes))
}

// Event is a no-op: events go to the EventLog (see Tee and EventLog.Observer).
func (o *metricsObserver) Event(trainer.Event) {}

// String names the observer's labels, for logs and test failures.
func (o *metricsObserver) String() string {
	return "telemetry.Observer(device=" + strconv.Quote(o.device) + ", worker=" + strconv.Quote(o.worker) + ")"
}

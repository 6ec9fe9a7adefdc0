package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric families of a sweep's device-memory budget broker, by device.
const (
	MetricBudgetCapacityBytes = "tolaria_sweep_budget_capacity_bytes"
	MetricBudgetGrantedBytes  = "tolaria_sweep_budget_granted_bytes"
	MetricBudgetWaiting       = "tolaria_sweep_budget_waiting"
	// MetricBudgetOldestWait is when the longest-waiting request on a
	// device began to wait; the series exists only while one waits, so
	// time() minus it is the longest wait now (TolariaSweepBudgetWaitLong).
	MetricBudgetOldestWait    = "tolaria_sweep_budget_oldest_wait_timestamp_seconds"
	MetricBudgetWaitSeconds   = "tolaria_sweep_budget_wait_seconds"
	MetricBudgetRefusalsTotal = "tolaria_sweep_budget_refusals_total"
	MetricBudgetParksTotal    = "tolaria_sweep_budget_parks_total"
)

// BudgetMetricNames returns the name of every budget family, as a test
// expects to find them on a sweep's /metrics once a trial has asked.
func BudgetMetricNames() []string {
	return []string{MetricBudgetCapacityBytes, MetricBudgetGrantedBytes, MetricBudgetWaiting, MetricBudgetOldestWait,
		MetricBudgetWaitSeconds, MetricBudgetRefusalsTotal, MetricBudgetParksTotal}
}

// BudgetMetrics are the broker's figures per device. Methods are safe for
// concurrent use.
type BudgetMetrics struct {
	capacity, granted, waiting, oldest *prometheus.GaugeVec
	waited                             *prometheus.HistogramVec
	refusals, parks                    *prometheus.CounterVec
}

// Budgets registers the broker's families on m's registry. Call it once
// per Metrics; a second call fails to register.
func (m *Metrics) Budgets() (*BudgetMetrics, error) {
	dev := []string{LabelDevice}
	b := &BudgetMetrics{
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBudgetCapacityBytes,
			Help: "Device memory the sweep's budgets may take on the device (--device-memory, or what the first worker found free)."}, dev),
		granted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBudgetGrantedBytes,
			Help: "Device memory granted to the trials' workers now."}, dev),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBudgetWaiting,
			Help: "Budget requests waiting for device memory now."}, dev),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBudgetOldestWait,
			Help: "Unix time the longest-waiting budget request began to wait; absent while none waits."}, dev),
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricBudgetWaitSeconds,
			Help:    "Time granted budget requests waited (0 for those granted at once).",
			Buckets: []float64{0.001, 0.1, 1, 10, 60, 300, 900, 3600}}, dev),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBudgetRefusalsTotal,
			Help: "Budget requests refused as larger than the whole device (their trials failed)."}, dev),
		parks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBudgetParksTotal,
			Help: "Trials parked (their model moved to host memory, their device memory freed) to make room for another trial: one of higher priority, or of equal priority once the parked one has held its budget the minimum residence and been the least recently active."}, dev),
	}
	for _, c := range []prometheus.Collector{b.capacity, b.granted, b.waiting, b.oldest, b.waited, b.refusals, b.parks} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// SetBooks sets the device's capacity, the bytes granted, the requests
// waiting and when the oldest of them began to wait (zero: none waits,
// and the series goes).
func (b *BudgetMetrics) SetBooks(device string, capacity, granted int64, waiting int, oldest time.Time) {
	b.capacity.WithLabelValues(device).Set(float64(capacity))
	b.granted.WithLabelValues(device).Set(float64(granted))
	b.waiting.WithLabelValues(device).Set(float64(waiting))
	b.refusals.WithLabelValues(device)
	b.parks.WithLabelValues(device)
	if oldest.IsZero() {
		b.oldest.DeleteLabelValues(device)
	} else {
		b.oldest.WithLabelValues(device).Set(float64(oldest.UnixNano()) / 1e9)
	}
}

// Granted records a grant after waiting d.
func (b *BudgetMetrics) Granted(device string, d time.Duration) {
	b.waited.WithLabelValues(device).Observe(d.Seconds())
}

// Refused counts a refused request.
func (b *BudgetMetrics) Refused(device string) { b.refusals.WithLabelValues(device).Inc() }

// Parked counts a trial parked.
func (b *BudgetMetrics) Parked(device string) { b.parks.WithLabelValues(device).Inc() }

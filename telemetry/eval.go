package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Metric families of a sharded evaluation (tolaria eval).
const (
	MetricEvalResultAccuracy = "tolaria_eval_result_accuracy"
	MetricEvalResultLoss     = "tolaria_eval_result_loss"
	MetricEvalShards         = "tolaria_eval_shards"
)

// LabelResult says whether an evaluation's figures are over every example
// (EvalComplete) or over the shards that were scored (EvalPartial).
const LabelResult = "result"

// Values of LabelResult.
const (
	EvalComplete = "complete"
	EvalPartial  = "partial"
)

// Values of the evaluation shards gauge's state label.
const (
	EvalShardScored = "scored" // scored by a worker in this evaluation
	EvalShardKept   = "kept"   // kept from an earlier one (a resume)
	EvalShardFailed = "failed" // failed every attempt: missing
)

// EvalMetricNames returns the name of every evaluation metric family.
func EvalMetricNames() []string {
	return []string{MetricEvalResultAccuracy, MetricEvalResultLoss, MetricEvalShards}
}

// EvalMetrics are a sharded evaluation's metrics: its result's figures,
// labelled complete or partial so that a query for one never reads the
// other, and its shards by state. Its methods are safe for concurrent use.
type EvalMetrics struct {
	accuracy, loss *prometheus.GaugeVec
	shards         *prometheus.GaugeVec
}

// Eval registers the evaluation's families on m's registry and returns
// them. The figures have no series until Result is called: an evaluation
// still running has no result. Call it once per Metrics.
func (m *Metrics) Eval() (*EvalMetrics, error) {
	e := &EvalMetrics{
		accuracy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricEvalResultAccuracy,
			Help: "Accuracy of the evaluation's result, from 0 to 1: result=complete over every example, result=partial over the shards scored (eval.partial.json).",
		}, []string{LabelResult}),
		loss: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricEvalResultLoss,
			Help: "Mean loss of the evaluation's result (nats per example, or per token of a token model); result as for tolaria_eval_result_accuracy.",
		}, []string{LabelResult}),
		shards: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricEvalShards,
			Help: "Shards of the evaluation by state: scored, kept from an earlier evaluation (--resume), failed (missing from the result).",
		}, []string{LabelState}),
	}
	for _, st := range []string{EvalShardScored, EvalShardKept, EvalShardFailed} {
		e.shards.WithLabelValues(st).Set(0)
	}
	for _, c := range []prometheus.Collector{e.accuracy, e.loss, e.shards} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// EvalResult is an evaluation's outcome as its metrics show it.
type EvalResult struct {
	Complete             bool
	Accuracy, Loss       float64
	Scored, Kept, Failed int // shards
}

// Result sets the figures of the evaluation's result, under
// result=complete or result=partial (only one of the two has series),
// and its shards by state.
func (e *EvalMetrics) Result(r EvalResult) {
	label, other := EvalPartial, EvalComplete
	if r.Complete {
		label, other = EvalComplete, EvalPartial
	}
	e.accuracy.DeleteLabelValues(other)
	e.loss.DeleteLabelValues(other)
	e.accuracy.WithLabelValues(label).Set(r.Accuracy)
	e.loss.WithLabelValues(label).Set(r.Loss)
	e.shards.WithLabelValues(EvalShardScored).Set(float64(r.Scored))
	e.shards.WithLabelValues(EvalShardKept).Set(float64(r.Kept))
	e.shards.WithLabelValues(EvalShardFailed).Set(float64(r.Failed))
}

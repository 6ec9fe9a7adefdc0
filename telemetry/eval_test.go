package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// TestEvalMetrics: an evaluation's figures appear only once it has a
// result, under result=complete or result=partial, never both, so a query
// for a complete result never reads a partial one; its shards by state
// start at zero; every family passes promlint.
func TestEvalMetrics(t *testing.T) {
	m := NewMetrics("test")
	e, err := m.Eval()
	if err != nil {
		t.Fatal(err)
	}
	fams := gather(t, m)
	if _, ok := fams[MetricEvalResultAccuracy]; ok {
		t.Errorf("an evaluation without a result has an accuracy")
	}
	if got := len(fams[MetricEvalShards].GetMetric()); got != 3 {
		t.Errorf("%d shard states, want 3 at zero", got)
	}
	results := func() map[string]float64 {
		got := map[string]float64{}
		for _, mt := range gather(t, m)[MetricEvalResultAccuracy].GetMetric() {
			got[labels(mt)[LabelResult]] = mt.GetGauge().GetValue()
		}
		return got
	}
	e.Result(EvalResult{Complete: false, Accuracy: 0.5, Loss: 1, Scored: 2, Failed: 1})
	if got := results(); len(got) != 1 || got[EvalPartial] != 0.5 {
		t.Errorf("a partial result: %v", got)
	}
	e.Result(EvalResult{Complete: true, Accuracy: 0.75, Loss: 0.5, Scored: 1, Kept: 2})
	if got := results(); len(got) != 1 || got[EvalComplete] != 0.75 {
		t.Errorf("a complete result after a partial one: %v", got)
	}
	for _, mt := range gather(t, m)[MetricEvalShards].GetMetric() {
		want := map[string]float64{EvalShardScored: 1, EvalShardKept: 2, EvalShardFailed: 0}[labels(mt)[LabelState]]
		if mt.GetGauge().GetValue() != want {
			t.Errorf("shards %v: %v, want %v", labels(mt), mt.GetGauge().GetValue(), want)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(func() []*dto.MetricFamily {
		mfs, _ := m.Registry().Gather()
		return mfs
	}()).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		for _, name := range EvalMetricNames() {
			if p.Metric == name {
				t.Errorf("promlint: %s: %s", p.Metric, p.Text)
			}
		}
	}
}

package telemetry

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// TestBudgetMetrics: the broker's books per device, the oldest wait's
// start only while a request waits, waits observed and refusals counted;
// every family passes promlint.
func TestBudgetMetrics(t *testing.T) {
	m := NewTrialMetrics("test")
	b, err := m.Budgets()
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(1700000000, 500_000_000)
	b.SetBooks("cuda:0", 1000, 600, 1, since)
	b.Granted("cuda:0", 0)
	b.Granted("cuda:0", 3*time.Second)
	b.Refused("cuda:0")
	b.Parked("cuda:0")
	got := gatherBudgets(t, m)
	for name, want := range map[string]float64{
		MetricBudgetCapacityBytes: 1000, MetricBudgetGrantedBytes: 600, MetricBudgetWaiting: 1,
		MetricBudgetOldestWait: 1700000000.5, MetricBudgetRefusalsTotal: 1, MetricBudgetParksTotal: 1, MetricBudgetWaitSeconds + "_count": 2,
		MetricBudgetWaitSeconds + "_sum": 3,
	} {
		if v, ok := got[name+`{device="cuda:0"}`]; !ok || v != want {
			t.Errorf("%s{device=\"cuda:0\"} = %v (present %v), want %v", name, v, ok, want)
		}
	}
	b.SetBooks("cuda:0", 1000, 0, 0, time.Time{})
	if _, ok := gatherBudgets(t, m)[MetricBudgetOldestWait+`{device="cuda:0"}`]; ok {
		t.Error("the oldest wait's series is there with nothing waiting")
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "tolaria_sweep_budget") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// gatherBudgets reads the budget families as name{labels} -> value; a
// histogram gives its _count and _sum.
func gatherBudgets(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			var ls []string
			for _, l := range x.GetLabel() {
				ls = append(ls, l.GetName()+"=\""+l.GetValue()+"\"")
			}
			key := "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"+key] = float64(x.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+key] = x.GetHistogram().GetSampleSum()
			case dto.MetricType_COUNTER:
				out[mf.GetName()+key] = x.GetCounter().GetValue()
			default:
				out[mf.GetName()+key] = x.GetGauge().GetValue()
			}
		}
	}
	return out
}

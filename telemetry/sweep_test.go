package telemetry

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/tolaria-ml/tolaria/trainer"
)

func TestTrialMetricsKeepTrialsApart(t *testing.T) {
	m := NewTrialMetrics("test")
	a, b := Series{Device: "cpu", Worker: "0", Trial: "a"}, Series{Device: "cpu", Worker: "0", Trial: "b"}
	exercise(m.SeriesObserver(a))
	m.SeriesObserver(b).Observe(trainer.Epoch{Epoch: 5})
	fams := gather(t, m)
	for _, name := range MetricNames() {
		if name == MetricBuildInfo {
			continue
		}
		trials := map[string]bool{}
		for _, metric := range fams[name].GetMetric() {
			trials[labels(metric)[LabelTrial]] = true
		}
		if !trials["a"] {
			t.Errorf("%s: no series with trial=\"a\": %v", name, trials)
		}
	}
	if got := value(t, fams, MetricTrainEpoch, map[string]string{LabelTrial: "a"}); got != 2 {
		t.Errorf("trial a's epoch = %v, want 2", got)
	}
	if got := value(t, fams, MetricTrainEpoch, map[string]string{LabelTrial: "b"}); got != 5 {
		t.Errorf("trial b's epoch = %v, want 5", got)
	}

	// An ended trial has no last-step time for the stall alert to judge;
	// its other series stay, and so does the running trial's.
	m.EndSeries(a)
	fams = gather(t, m)
	for _, metric := range fams[MetricLastStepTimestamp].GetMetric() {
		if labels(metric)[LabelTrial] == "a" {
			t.Errorf("%s of the ended trial a is still there", MetricLastStepTimestamp)
		}
	}
	value(t, fams, MetricLastStepTimestamp, map[string]string{LabelTrial: "b"})
	value(t, fams, MetricTrainEpoch, map[string]string{LabelTrial: "a"})
}

func TestRunMetricsHaveNoTrialLabel(t *testing.T) {
	m := NewMetrics("test")
	m.SeriesObserver(Series{Device: "cpu", Worker: "0", Trial: "ignored"})
	for name, mf := range gather(t, m) {
		for _, metric := range mf.GetMetric() {
			if _, ok := labels(metric)[LabelTrial]; ok {
				t.Errorf("%s carries a trial label outside a sweep", name)
			}
		}
	}
}

func TestSweepMetrics(t *testing.T) {
	m := NewTrialMetrics("test")
	s, err := m.Sweep([]string{"pending", "running", "succeeded"}, []string{"hung", "exit"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Sweep(nil, nil); err == nil {
		t.Error("a second Sweep on the same metrics registered again")
	}
	fams := gather(t, m)
	for _, st := range []string{"pending", "running", "succeeded"} {
		if v := value(t, fams, MetricSweepTrials, map[string]string{LabelState: st}); v != 0 {
			t.Errorf("trials{state=%q} starts at %v", st, v)
		}
	}
	for _, r := range []string{"hung", "exit", SweepFailureOther} {
		if v := value(t, fams, MetricSweepFailuresTotal, map[string]string{LabelReason: r}); v != 0 {
			t.Errorf("failures{reason=%q} starts at %v", r, v)
		}
	}
	if n := len(fams[MetricSweepFailuresTotal].GetMetric()); n != 3 {
		t.Errorf("%d failure series, want 3 (hung, exit, other)", n)
	}

	s.SetTrials(map[string]int{"pending": 1, "running": 2, "succeeded": 0})
	s.Failed("hung")
	s.Failed("hung")
	s.Failed("something new")
	s.Retried()
	beat := s.Worker("a")
	time.Sleep(20 * time.Millisecond)
	fams = gather(t, m)
	for labels, want := range map[[2]string]float64{
		{LabelState, "pending"}: 1, {LabelState, "running"}: 2, {LabelState, "succeeded"}: 0,
	} {
		if v := value(t, fams, MetricSweepTrials, map[string]string{labels[0]: labels[1]}); v != want {
			t.Errorf("trials{%s=%q} = %v, want %v", labels[0], labels[1], v, want)
		}
	}
	for reason, want := range map[string]float64{"hung": 2, "exit": 0, SweepFailureOther: 1} {
		if v := value(t, fams, MetricSweepFailuresTotal, map[string]string{LabelReason: reason}); v != want {
			t.Errorf("failures{reason=%q} = %v, want %v", reason, v, want)
		}
	}
	if v := value(t, fams, MetricSweepRetriesTotal, nil); v != 1 {
		t.Errorf("retries = %v, want 1", v)
	}
	age := value(t, fams, MetricWorkerHeartbeatAge, map[string]string{LabelTrial: "a"})
	if age < 0.02 || age > 10 {
		t.Errorf("heartbeat age 20ms after the worker's start = %vs", age)
	}
	beat.Seen()
	if again := value(t, gather(t, m), MetricWorkerHeartbeatAge, map[string]string{LabelTrial: "a"}); again >= age {
		t.Errorf("heartbeat age after a message = %vs, not below %vs", again, age)
	}

	// A retry's worker replaces the series; the old one's End leaves it.
	next := s.Worker("a")
	beat.End()
	value(t, gather(t, m), MetricWorkerHeartbeatAge, map[string]string{LabelTrial: "a"})
	next.End()
	if got := gather(t, m)[MetricWorkerHeartbeatAge].GetMetric(); len(got) != 0 {
		t.Errorf("heartbeat age of an ended worker is still there: %v", got)
	}
}

func TestSweepMetricsPassPromlint(t *testing.T) {
	m := NewTrialMetrics("test")
	s, err := m.Sweep([]string{"running"}, []string{"hung"})
	if err != nil {
		t.Fatal(err)
	}
	s.Worker("a")
	exercise(m.SeriesObserver(Series{Device: "cpu", Worker: "0", Trial: "a"}))
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "tolaria_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

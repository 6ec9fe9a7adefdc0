package telemetry

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/trainer"
)

// exercise observes every kind of measurement once with plausible values.
func exercise(o trainer.Observer) {
	for _, m := range []trainer.Measurement{
		trainer.GraphEnabled{On: true},
		trainer.Captured{Seconds: 0.063, Pooled: false},
		trainer.Captured{Seconds: 0.004, Pooled: true},
		trainer.Replayed{Seconds: 0.002},
		trainer.StageCopied{Seconds: 0.0004},
		trainer.Fallback{Reason: graphs.ReasonRaggedBatch},
		trainer.ExecUpdated{},
		trainer.PoolReserved{Bytes: 64 << 20},
		trainer.PrefetchDisabled{Disabled: true},
		trainer.Stepped{Seconds: 0.003, Samples: 128},
		trainer.TrainLoss{Loss: 0.42},
		trainer.EvalAccuracy{Accuracy: 0.88},
		trainer.Epoch{Epoch: 2},
		trainer.DeviceMemory{What: "in_use", Bytes: 1 << 30},
		trainer.Event{Kind: trainer.EventCapture},
		trainer.Event{Kind: trainer.EventCheckpoint, Fields: map[string]any{"path": "ckpt-1"}},
	} {
		o.Observe(m)
	}
}

func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	byName := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	return byName
}

func labels(metric *dto.Metric) map[string]string {
	l := make(map[string]string)
	for _, lp := range metric.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// value returns the value of the series of family name whose labels
// include want, or fails the test.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	for _, metric := range fams[name].GetMetric() {
		l := labels(metric)
		match := true
		for k, v := range want {
			match = match && l[k] == v
		}
		if !match {
			continue
		}
		switch {
		case metric.Counter != nil:
			return metric.Counter.GetValue()
		case metric.Gauge != nil:
			return metric.Gauge.GetValue()
		case metric.Histogram != nil:
			return float64(metric.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("%s%v: no such series", name, want)
	return 0
}

func TestEveryMetricCarriesDeviceAndWorker(t *testing.T) {
	m := NewMetrics("test")
	exercise(m.Observer("cpu", "0"))
	exercise(m.Observer("cuda:1", "1"))
	fams := gather(t, m)
	for _, name := range MetricNames() {
		mf, ok := fams[name]
		if !ok {
			t.Errorf("%s: not gathered", name)
			continue
		}
		if name == MetricBuildInfo {
			l := labels(mf.GetMetric()[0])
			if l["version"] != "test" || !strings.HasPrefix(l["goversion"], "go") {
				t.Errorf("%s labels = %v", name, l)
			}
			continue
		}
		workers := map[string]bool{}
		for _, metric := range mf.GetMetric() {
			l := labels(metric)
			if l[LabelDevice] == "" || l[LabelWorker] == "" {
				t.Errorf("%s%v lacks device or worker", name, l)
			}
			workers[l[LabelWorker]] = true
		}
		if !workers["0"] || !workers["1"] {
			t.Errorf("%s: workers %v, want 0 and 1", name, workers)
		}
	}
	for _, runtimeMetric := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := fams[runtimeMetric]; !ok {
			t.Errorf("%s: not gathered; Go and process collectors missing", runtimeMetric)
		}
	}
}

func TestMetricsPassPromlint(t *testing.T) {
	m := NewMetrics("test")
	exercise(m.Observer("cpu", "0"))
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var ours []*dto.MetricFamily
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "tolaria_") {
			ours = append(ours, mf)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(ours).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestObserverStartsSeriesAtZero(t *testing.T) {
	before := time.Now()
	m := NewMetrics("test")
	m.Observer("cpu", "0")
	fams := gather(t, m)
	dw := map[string]string{LabelDevice: "cpu", LabelWorker: "0"}
	for _, reason := range FallbackReasons() {
		if v := value(t, fams, MetricFallbackTotal, map[string]string{LabelWorker: "0", LabelReason: reason}); v != 0 {
			t.Errorf("fallback{reason=%q} = %v, want 0", reason, v)
		}
	}
	for _, pooled := range []string{"true", "false"} {
		if v := value(t, fams, MetricCapturesTotal, map[string]string{LabelWorker: "0", LabelPooled: pooled}); v != 0 {
			t.Errorf("captures{pooled=%q} = %v, want 0", pooled, v)
		}
	}
	for _, name := range []string{
		MetricGraphEnabled, MetricCaptureSeconds, MetricReplaySeconds, MetricStageCopySeconds,
		MetricReplaysTotal, MetricPoolReservedBytes, MetricExecUpdatesTotal,
		MetricPrefetchDisabled, MetricStepSeconds, MetricSamplesTotal, MetricTrainEpoch,
		MetricCheckpointsTotal,
	} {
		if v := value(t, fams, name, dw); v != 0 {
			t.Errorf("%s = %v, want 0", name, v)
		}
	}
	if ts := value(t, fams, MetricLastStepTimestamp, dw); ts < float64(before.Unix()) {
		t.Errorf("last step timestamp %v is before the observer was made (%v)", ts, before.Unix())
	}
}

func TestObserverRecords(t *testing.T) {
	m := NewMetrics("test")
	o := m.Observer("cpu", "0")
	exercise(o)
	o.Observe(trainer.Fallback{Reason: "no such reason"})
	o.Observe(trainer.Replayed{Seconds: math.NaN()})
	o.Observe(trainer.StageCopied{Seconds: -1})
	fams := gather(t, m)
	dw := map[string]string{LabelDevice: "cpu", LabelWorker: "0"}
	with := func(k, v string) map[string]string { return map[string]string{LabelWorker: "0", k: v} }
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{MetricGraphEnabled, dw, 1},
		{MetricCaptureSeconds, dw, 2},
		{MetricCapturesTotal, with(LabelPooled, "true"), 1},
		{MetricCapturesTotal, with(LabelPooled, "false"), 1},
		{MetricReplaySeconds, dw, 1}, // the NaN is dropped
		{MetricReplaysTotal, dw, 2},  // but the replay is counted
		{MetricStageCopySeconds, dw, 1},
		{MetricFallbackTotal, with(LabelReason, graphs.ReasonRaggedBatch), 1},
		{MetricFallbackTotal, with(LabelReason, FallbackOther), 1},
		{MetricExecUpdatesTotal, dw, 1},
		{MetricPoolReservedBytes, dw, 64 << 20},
		{MetricPrefetchDisabled, dw, 1},
		{MetricStepSeconds, dw, 1},
		{MetricSamplesTotal, dw, 128},
		{MetricTrainLoss, dw, 0.42},
		{MetricEvalAccuracy, dw, 0.88},
		{MetricTrainEpoch, dw, 2},
		{MetricDeviceMemoryBytes, with(LabelKind, "in_use"), 1 << 30},
		{MetricCheckpointsTotal, dw, 1}, // the capture event is not a checkpoint
	}
	for _, tt := range tests {
		if got := value(t, fams, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if n := len(fams[MetricFallbackTotal].GetMetric()); n != len(FallbackReasons()) {
		t.Errorf("fallback counter has %d series, want %d (unknown reasons fold into %q)", n, len(FallbackReasons()), FallbackOther)
	}
}

// TestObserverCountsCheckpoints: the checkpoint event counts a
// checkpoint, and no other event does; an agent's half writes no
// checkpoint of a training job and has no such series.
func TestObserverCountsCheckpoints(t *testing.T) {
	m := NewMetrics("test")
	o := m.Observer("cpu", "0")
	for step := range 3 {
		o.Observe(trainer.Event{Kind: trainer.EventCheckpoint, Fields: map[string]any{"step": step}})
	}
	o.Observe(trainer.Event{Kind: trainer.EventEpoch})
	dw := map[string]string{LabelDevice: "cpu", LabelWorker: "0"}
	if got := value(t, gather(t, m), MetricCheckpointsTotal, dw); got != 3 {
		t.Errorf("checkpoints = %v, want 3", got)
	}

	agents := NewAgentMetrics("test")
	agents.SeriesObserver(Series{Device: "cpu", Worker: RLLearner, Agent: "0"}).
		Observe(trainer.Event{Kind: trainer.EventCheckpoint})
	if n := len(gather(t, agents)[MetricCheckpointsTotal].GetMetric()); n != 0 {
		t.Errorf("an agent's half made %d series of %s", n, MetricCheckpointsTotal)
	}
}

func TestObserverConcurrentUse(t *testing.T) {
	m := NewMetrics("test")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			o := m.Observer("cpu", string(rune('0'+w%2)))
			for range 200 {
				exercise(o)
			}
		})
	}
	wg.Wait()
	fams := gather(t, m)
	total := 0.0
	for _, worker := range []string{"0", "1"} {
		total += value(t, fams, MetricReplaysTotal, map[string]string{LabelWorker: worker})
	}
	if total != 800 {
		t.Errorf("replays = %v, want 800", total)
	}
}

func TestThresholdsAreBucketBoundaries(t *testing.T) {
	m := NewMetrics("test")
	m.Observer("cpu", "0")
	fams := gather(t, m)
	for _, th := range Thresholds() {
		if th.Condition != MeanAbove && th.Condition != QuantileAbove && th.Condition != AnyAbove {
			continue
		}
		mf, ok := fams[th.Metric]
		if !ok || mf.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s: %s is not a histogram", th.Alert, th.Metric)
			continue
		}
		var bounds []float64
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		if !slices.Contains(bounds, th.Value) {
			t.Errorf("%s: %v is not a bucket boundary of %s %v", th.Alert, th.Value, th.Metric, bounds)
		}
	}
}

// TestEveryKindOfMeasurementIsDecided: the metrics observer records or
// explicitly ignores every kind the trainer lists, so a new kind must be
// given a case here before it can be shipped.
func TestEveryKindOfMeasurementIsDecided(t *testing.T) {
	o := NewMetrics("test").Observer("cpu", "0").(*metricsObserver)
	for _, m := range trainer.Measurements() {
		if !o.record(m) {
			t.Errorf("telemetry neither records nor ignores %T (%q): add a case to metricsObserver.record", m, m.Name())
		}
	}
}

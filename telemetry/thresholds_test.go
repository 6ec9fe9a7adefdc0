package telemetry

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestThresholdTable(t *testing.T) {
	seen := map[string]bool{}
	metrics := map[string]bool{"up": true}
	for _, name := range slices.Concat(MetricNames(), SweepMetricNames(), BudgetMetricNames(), RLMetricNames()) {
		metrics[name] = true
	}
	for _, th := range Thresholds() {
		if th.Alert == "" || seen[th.Alert] {
			t.Errorf("alert name %q is empty or repeated", th.Alert)
		}
		seen[th.Alert] = true
		if !metrics[th.Metric] {
			t.Errorf("%s: metric %q is not one of MetricNames", th.Alert, th.Metric)
		}
		if th.Severity != SeverityWarning && th.Severity != SeverityCritical {
			t.Errorf("%s: severity %q", th.Alert, th.Severity)
		}
		if th.Anchor != strings.ToLower(th.Alert) {
			t.Errorf("%s: anchor %q, want the heading's GitHub anchor %q", th.Alert, th.Anchor, strings.ToLower(th.Alert))
		}
		if th.Summary == "" || th.Description == "" {
			t.Errorf("%s: summary or description missing", th.Alert)
		}
		if !strings.Contains(th.Description, th.HumanValue()) && th.Condition != IncreaseAbove && th.Condition != TargetDown {
			t.Errorf("%s: description %q does not state the threshold %s", th.Alert, th.Description, th.HumanValue())
		}
		if th.For > 0 && !strings.Contains(th.Description, FormatDuration(th.For)) && !strings.Contains(th.Description, minutes(th.For)) {
			t.Errorf("%s: description %q does not state the duration %s", th.Alert, th.Description, FormatDuration(th.For))
		}
		want := " " + FormatValue(th.Value)
		if th.Condition == AnyAbove {
			want = fmt.Sprintf("{le=%q}", FormatValue(th.Value))
		}
		if !strings.Contains(th.Expr(), want) {
			t.Errorf("%s: expr %q does not hold the threshold %s", th.Alert, th.Expr(), want)
		}
	}
}

// TestDeviceTimeThresholdsSayWhatTheyAwait checks that every threshold on
// a device time, which no GPU run has measured yet, says so in its
// description and names the bench figure that will measure it.
func TestDeviceTimeThresholdsSayWhatTheyAwait(t *testing.T) {
	figures := map[string][]string{
		MetricStageCopySeconds: {"stage_copy_ms"},
		MetricReplaySeconds:    {"replay_ms"},
		MetricCaptureSeconds:   {"capture_cold_ms"},
	}
	n := 0
	for _, th := range Thresholds() {
		want, ok := figures[th.Metric]
		if !ok {
			continue
		}
		n++
		if !strings.Contains(th.Description, th.HumanValue()+" is assumed, not yet measured on a GPU") ||
			!strings.Contains(th.Description, "run_graph_bench --device cuda") {
			t.Errorf("%s: description %q does not say that %s is assumed and which run will measure it", th.Alert, th.Description, th.HumanValue())
		}
		for _, f := range want {
			if !strings.Contains(th.Description, f) {
				t.Errorf("%s: description %q does not name the figure %s it awaits", th.Alert, th.Description, f)
			}
		}
	}
	if n != 4 {
		t.Errorf("%d thresholds on device times, want 4 (stage copy, replay, capture slow and critical)", n)
	}
}

func minutes(d time.Duration) string {
	return strings.TrimSuffix(FormatDuration(d), "m") + " minutes"
}

func TestThresholdsFromTheIssue(t *testing.T) {
	want := map[string]struct {
		value    float64
		severity string
	}{
		"TolariaStageCopySlow":        {0.001, SeverityWarning},
		"TolariaGraphReplaySlow":      {0.005, SeverityWarning},
		"TolariaGraphCaptureSlow":     {0.2, SeverityWarning},
		"TolariaGraphCaptureCritical": {8, SeverityCritical},
		"TolariaGraphFallback":        {0, SeverityWarning},
		"TolariaTrainingStalled":      {300, SeverityCritical},
		"TolariaTargetDown":           {0, SeverityCritical},
		// Issue "Many workers": failed or hung trials of a sweep.
		"TolariaSweepTrialFailed": {0, SeverityWarning},
		// Issue "Device-memory budgets": a trial waiting long for memory.
		"TolariaSweepBudgetWaitLong": {900, SeverityWarning},
		// tolaria rl: an actor failing again and again (2 restarts in
		// 30m), a learner that stands still while its agent runs.
		"TolariaRLActorRestarting": {1.5, SeverityWarning},
		"TolariaRLLearnerStalled":  {0, SeverityWarning},
	}
	got := Thresholds()
	if len(got) != len(want) {
		t.Errorf("%d thresholds, want %d", len(got), len(want))
	}
	for _, th := range got {
		w, ok := want[th.Alert]
		if !ok {
			t.Errorf("unexpected alert %s", th.Alert)
			continue
		}
		if th.Value != w.value || th.Severity != w.severity {
			t.Errorf("%s: value %v severity %s, want %v %s", th.Alert, th.Value, th.Severity, w.value, w.severity)
		}
	}
}

func TestExpr(t *testing.T) {
	tests := []struct {
		th   Threshold
		want string
	}{
		{Threshold{Metric: "m", Condition: MeanAbove, Window: time.Minute, Value: 0.001},
			"rate(m_sum[1m]) / rate(m_count[1m]) > 0.001"},
		{Threshold{Metric: "m", Condition: QuantileAbove, Quantile: 0.99, Window: 5 * time.Minute, Value: 8},
			"histogram_quantile(0.99, rate(m_bucket[5m])) > 8"},
		{Threshold{Metric: "m_total", Condition: IncreaseAbove, Window: 5 * time.Minute},
			"increase(m_total[5m]) > 0 or (m_total > 0 unless m_total offset 5m) or (m_total > 0 and on (job, instance) changes(process_start_time_seconds[5m]) > 0)"},
		{Threshold{Metric: "m", Condition: AnyAbove, Window: 5 * time.Minute, Value: 0.2},
			`(m_count - ignoring (le) m_bucket{le="0.2"}) - (m_count offset 5m - ignoring (le) m_bucket{le="0.2"} offset 5m) > 0 or ((m_count - ignoring (le) m_bucket{le="0.2"}) > 0 unless m_count offset 5m) or ((m_count - ignoring (le) m_bucket{le="0.2"}) > 0 and on (job, instance) changes(process_start_time_seconds[5m]) > 0)`},
		{Threshold{Metric: "ts", Condition: AgeAbove, Value: 300},
			`time() - ts > 300 and on (job, instance) up{job="tolaria"} == 1 unless on (job, instance) tolaria_process_finished == 1`},
		{Threshold{Metric: "up", Condition: TargetDown, Window: 24 * time.Hour},
			`up{job="tolaria"} == 0 unless on (job, instance) last_over_time(tolaria_process_finished[24h]) == 1`},
		{Threshold{Metric: "g", Condition: FlatWhileRunning, Window: 10 * time.Minute},
			`changes(g[10m]) == 0 and on (job, instance, agent) tolaria_rl_agent_state{state="running"} == 1 and on (job, instance, agent) tolaria_rl_agent_state{state="running"} offset 10m == 1`},
	}
	for _, tt := range tests {
		if got := tt.th.Expr(); got != tt.want {
			t.Errorf("Expr() = %q, want %q", got, tt.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := map[time.Duration]string{
		0: "0s", 90 * time.Second: "90s", 2 * time.Minute: "2m", time.Hour: "1h",
		time.Millisecond: "1ms", 200 * time.Millisecond: "200ms",
	}
	for d, want := range tests {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

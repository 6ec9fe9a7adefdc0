package telemetry

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Alert severities, the value of each alert's "severity" label.
const (
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// ScrapeJob is the Prometheus job name the alert rules expect tolaria's
// /metrics endpoint to be scraped under.
const ScrapeJob = "tolaria"

// DefaultMetricsPort is the port documented for --metrics-addr and scraped
// by infra/prometheus/prometheus.yml.
const DefaultMetricsPort = 9464

// RunbookURL is the document the alerts' runbook_url annotations point into.
const RunbookURL = "https://github.com/tolaria-ml/tolaria/blob/main/docs/runbook.md"

// Condition says how a Threshold becomes a PromQL expression.
type Condition int

const (
	// MeanAbove fires when the mean of a histogram over Window is above
	// Value: rate(sum) / rate(count).
	MeanAbove Condition = iota + 1
	// QuantileAbove fires when the Quantile of a histogram over Window is
	// above Value. Value is a bucket boundary, so the comparison is exact:
	// p99 > Value means more than 1% of observations were above Value.
	QuantileAbove
	// IncreaseAbove fires when a counter grew by more than Value over Window.
	// A series Prometheus first sees already above Value, or one above Value
	// in a process that started within Window, counts as grown: work done
	// at start, before the first scrape (a fallback at the first capture),
	// is not missed the way increase() alone misses it.
	IncreaseAbove
	// AnyAbove fires when at least one observation of a histogram within
	// Window was above Value, a bucket boundary. Like IncreaseAbove it
	// counts observations made before the series' first scrape, which is
	// where a job's captures are.
	AnyAbove
	// AgeAbove fires when a Unix-timestamp gauge is more than Value seconds
	// old while the scrape target is up.
	AgeAbove
	// TargetDown fires when Prometheus cannot scrape the job (up == Value).
	TargetDown
	// FlatWhileRunning fires when a reinforcement-learning agent's gauge
	// changed Value times (0) over Window while the agent was running both
	// at the window's start and now (MetricRLAgentState with
	// state="running" at 1): a learner that makes no progress. An agent
	// that finished, or started within the window, does not fire.
	FlatWhileRunning
)

// Dashboard panels that draw thresholds, keyed by a stable name.
const (
	PanelCaptureLatency   = "capture_latency"
	PanelReplayLatency    = "replay_latency"
	PanelStageCopyLatency = "stage_copy_latency"
	PanelLastStepAge      = "last_step_age"
	PanelBudgetWaitAge    = "budget_wait_age"
)

// Threshold is one row of the table: one alert and, where Panel is set, the
// threshold a dashboard panel draws for it. Values are in base units
// (seconds, bytes, counts).
type Threshold struct {
	Alert       string        // alert name
	Metric      string        // metric family the expression reads
	Condition   Condition     // how Expr is built
	Quantile    float64       // for QuantileAbove
	Window      time.Duration // range of rate/increase; zero where unused
	Value       float64       // the comparison value, in base units
	For         time.Duration // how long the condition must hold
	Severity    string        // SeverityWarning or SeverityCritical
	Summary     string        // one line; may use {{ $labels.x }}
	Description string        // meaning; may use {{ $labels.x }}
	Anchor      string        // heading anchor in docs/runbook.md
	Panel       string        // dashboard panel drawing Value; "" for none
}

// Thresholds returns the table of alert and dashboard thresholds. The
// committed alert rules, their promtool tests and the dashboard are generated
// from it (`make generate`) and a test keeps them in sync.
func Thresholds() []Threshold {
	return []Threshold{
		{
			Alert:       "TolariaStageCopySlow",
			Metric:      MetricStageCopySeconds,
			Condition:   MeanAbove,
			Window:      time.Minute,
			Value:       0.001,
			For:         2 * time.Minute,
			Severity:    SeverityWarning,
			Summary:     "Stage copy slow on {{ $labels.device }} (worker {{ $labels.worker }})",
			Description: "The 1-minute mean host-to-device batch copy time has been above 1ms for 2 minutes. Replays wait on copy-done events, so step time grows with it. 1ms is assumed, not yet measured on a GPU: it awaits stage_copy_ms from run_graph_bench --device cuda on the target GPU.",
			Anchor:      "tolariastagecopyslow",
			Panel:       PanelStageCopyLatency,
		},
		{
			Alert:       "TolariaGraphReplaySlow",
			Metric:      MetricReplaySeconds,
			Condition:   QuantileAbove,
			Quantile:    0.99,
			Window:      5 * time.Minute,
			Value:       0.005,
			For:         5 * time.Minute,
			Severity:    SeverityWarning,
			Summary:     "Graph replay slow on {{ $labels.device }} (worker {{ $labels.worker }})",
			Description: "More than 1% of graph replays over 5 minutes took longer than 5ms (p99 above 5ms), for 5 minutes. 5ms is assumed, not yet measured on a GPU: it awaits replay_ms and device_busy_p90_ms from run_graph_bench --device cuda on the target GPU.",
			Anchor:      "tolariagraphreplayslow",
			Panel:       PanelReplayLatency,
		},
		{
			Alert:       "TolariaGraphCaptureSlow",
			Metric:      MetricCaptureSeconds,
			Condition:   AnyAbove,
			Window:      5 * time.Minute,
			Value:       0.2,
			Severity:    SeverityWarning,
			Summary:     "Graph capture slow on {{ $labels.device }} (worker {{ $labels.worker }})",
			Description: "A graph capture and instantiation in the last 5 minutes took longer than 200ms (captures made before the first scrape count). A cold graph pool instantiates; a pooled capture only updates. 200ms is assumed, not yet measured on a GPU: it awaits capture_cold_ms and capture_pooled_ms from run_graph_bench --device cuda on the target GPU.",
			Anchor:      "tolariagraphcaptureslow",
			Panel:       PanelCaptureLatency,
		},
		{
			Alert:       "TolariaGraphCaptureCritical",
			Metric:      MetricCaptureSeconds,
			Condition:   AnyAbove,
			Window:      5 * time.Minute,
			Value:       8,
			Severity:    SeverityCritical,
			Summary:     "Graph capture critically slow on {{ $labels.device }} (worker {{ $labels.worker }})",
			Description: "A graph capture and instantiation in the last 5 minutes took longer than 8s. Training is blocked while it runs. 8s is assumed, not yet measured on a GPU: it awaits capture_cold_ms from run_graph_bench --device cuda on the target GPU.",
			Anchor:      "tolariagraphcapturecritical",
			Panel:       PanelCaptureLatency,
		},
		{
			Alert:       "TolariaGraphFallback",
			Metric:      MetricFallbackTotal,
			Condition:   IncreaseAbove,
			Window:      5 * time.Minute,
			Value:       0,
			Severity:    SeverityWarning,
			Summary:     "Eager fallback ({{ $labels.reason }}) on {{ $labels.device }} (worker {{ $labels.worker }})",
			Description: "At least one training step in the last 5 minutes ran eagerly instead of from a graph. The reason label says why.",
			Anchor:      "tolariagraphfallback",
		},
		{
			Alert:       "TolariaSweepTrialFailed",
			Metric:      MetricSweepFailuresTotal,
			Condition:   IncreaseAbove,
			Window:      5 * time.Minute,
			Value:       0,
			Severity:    SeverityWarning,
			Summary:     "Sweep trial failed ({{ $labels.reason }}) on {{ $labels.instance }}",
			Description: "At least one trial attempt of the sweep failed in the last 5 minutes; the reason label says how (hung: its worker stopped sending heartbeats and was killed). The other trials go on; results.json names the trial, the reason and the tail of its worker's log.",
			Anchor:      "tolariasweeptrialfailed",
		},
		{
			Alert:       "TolariaSweepBudgetWaitLong",
			Metric:      MetricBudgetOldestWait,
			Condition:   AgeAbove,
			Value:       900,
			Severity:    SeverityWarning,
			Summary:     "A sweep trial has waited over 15m for device memory on {{ $labels.device }}",
			Description: "A trial's worker has waited more than 15m for a device-memory budget on the device: the trials holding it run long, or --per-device is larger than the device's memory allows. The waiting trial holds a slot and a worker process meanwhile.",
			Anchor:      "tolariasweepbudgetwaitlong",
			Panel:       PanelBudgetWaitAge,
		},
		{
			Alert:       "TolariaTrainingStalled",
			Metric:      MetricLastStepTimestamp,
			Condition:   AgeAbove,
			Value:       300,
			Severity:    SeverityCritical,
			Summary:     "Training stalled on {{ $labels.device }} (worker {{ $labels.worker }})",
			Description: "No training step has completed for 5m while the metrics endpoint is still up and its process has not finished its run.",
			Anchor:      "tolariatrainingstalled",
			Panel:       PanelLastStepAge,
		},
		{
			Alert:       "TolariaRLActorRestarting",
			Metric:      MetricRLActorRestartsTotal,
			Condition:   IncreaseAbove,
			Window:      30 * time.Minute,
			Value:       1.5,
			Severity:    SeverityWarning,
			Summary:     "RL agent {{ $labels.agent }}'s actor keeps failing on {{ $labels.instance }}",
			Description: "The actor of agent {{ $labels.agent }} failed and was started again at least twice in the last 30 minutes (the rule compares with 1.5: increase() stretches a single restart to a little over 1). Once it has been started again --actor-restarts times (default 3), its next failure fails the agent. The agent's actor.log says how each attempt ended.",
			Anchor:      "tolariarlactorrestarting",
		},
		{
			Alert:       "TolariaRLLearnerStalled",
			Metric:      MetricRLLearnerSteps,
			Condition:   FlatWhileRunning,
			Window:      10 * time.Minute,
			Value:       0,
			Severity:    SeverityWarning,
			Summary:     "RL agent {{ $labels.agent }}'s learner has made no step for 10m on {{ $labels.instance }}",
			Description: "Agent {{ $labels.agent }} has been running for 10m and its learner's step count has not moved in that time. The learner trains once the actor has appended learning_starts transitions, then one step per train_every more, so a learner whose actor is stopped or failing stalls too. Agents that finished, failed, or started less than 10m ago do not fire.",
			Anchor:      "tolariarllearnerstalled",
		},
		{
			Alert:     "TolariaTargetDown",
			Metric:    "up",
			Condition: TargetDown,
			Value:     0,
			// A target whose process said it finished stays silent this
			// long after its last scrape.
			Window:      24 * time.Hour,
			For:         2 * time.Minute,
			Severity:    SeverityCritical,
			Summary:     "tolaria metrics target {{ $labels.instance }} is down",
			Description: "Prometheus has not been able to scrape {{ $labels.instance }} for 2 minutes, and the process it last scraped there had not said it finished its run (tolaria_process_finished 1): the process crashed, was killed or hangs, or --metrics-addr is wrong. A process that ends its run says so before it exits, and its target going down raises nothing for 24h.",
			Anchor:      "tolariatargetdown",
		},
	}
}

// MetricProcessStart is the process collector's start time, which changes
// when a new tolaria process serves the target.
const MetricProcessStart = "process_start_time_seconds"

// newProcess matches targets whose process started within w: its counters
// began again, but a job's first captures and fallbacks happen before the
// first scrape, so the counters may read as before and show no reset.
func newProcess(w string) string {
	return fmt.Sprintf("on (job, instance) changes(%s[%s]) > 0", MetricProcessStart, w)
}

// Expr returns the PromQL expression of the alert.
func (t Threshold) Expr() string {
	v := FormatValue(t.Value)
	w := FormatDuration(t.Window)
	switch t.Condition {
	case MeanAbove:
		return fmt.Sprintf("rate(%s_sum[%s]) / rate(%s_count[%s]) > %s", t.Metric, w, t.Metric, w, v)
	case QuantileAbove:
		return fmt.Sprintf("histogram_quantile(%s, rate(%s_bucket[%s])) > %s", FormatValue(t.Quantile), t.Metric, w, v)
	case IncreaseAbove:
		return fmt.Sprintf("increase(%s[%s]) > %s or (%s > %s unless %s offset %s) or (%s > %s and %s)",
			t.Metric, w, v, t.Metric, v, t.Metric, w, t.Metric, v, newProcess(w))
	case AnyAbove:
		// Observations above v: _count minus the bucket at v.
		// Raw values, not increase(): its extrapolation differs between
		// the count and the bucket when one starts at zero and scrapes and
		// evaluations are not aligned, which would fire on fast
		// observations.
		above := fmt.Sprintf("%s_count - ignoring (le) %s_bucket{le=%q}", t.Metric, t.Metric, v)
		before := fmt.Sprintf("%s_count offset %s - ignoring (le) %s_bucket{le=%q} offset %s", t.Metric, w, t.Metric, v, w)
		// Grew within the window; or first seen within it (work done before
		// the first scrape); or a process that started within it (a restart,
		// or the next job on the same target) that has one already.
		return fmt.Sprintf("(%s) - (%s) > 0 or ((%s) > 0 unless %s_count offset %s) or ((%s) > 0 and %s)",
			above, before, above, t.Metric, w, above, newProcess(w))
	case AgeAbove:
		// While the target answers and its process has not finished: a
		// finished process lingering keeps its last timestamps.
		return fmt.Sprintf("time() - %s > %s and on (job, instance) up{job=%q} == 1 unless on (job, instance) %s == 1", t.Metric, v, ScrapeJob, MetricProcessFinished)
	case TargetDown:
		// Unless the last value the target's process gave within the
		// window said it finished: a failed scrape makes the target's
		// series stale, and last_over_time skips staleness markers.
		return fmt.Sprintf("up{job=%q} == %s unless on (job, instance) last_over_time(%s[%s]) == 1", ScrapeJob, v, MetricProcessFinished, w)
	case FlatWhileRunning:
		running := fmt.Sprintf("%s{%s=%q}", MetricRLAgentState, LabelState, RLStateRunning)
		on := fmt.Sprintf("on (job, instance, %s)", LabelAgent)
		return fmt.Sprintf("changes(%s[%s]) == %s and %s %s == 1 and %s %s offset %s == 1",
			t.Metric, w, v, on, running, on, running, w)
	}
	panic(fmt.Sprintf("telemetry: threshold %s has unknown condition %d", t.Alert, t.Condition))
}

// RunbookLink returns the alert's runbook_url.
func (t Threshold) RunbookLink() string { return RunbookURL + "#" + t.Anchor }

// HumanValue writes Value the way an operator reads it: "1ms", "200ms",
// "8s", "5m" for durations, the plain number otherwise. For
// FlatWhileRunning, whose Value is a count of changes (0), it is the
// window that the gauge stood still.
func (t Threshold) HumanValue() string {
	switch t.Condition {
	case FlatWhileRunning:
		return FormatDuration(t.Window)
	case MeanAbove, QuantileAbove, AnyAbove, AgeAbove:
		return FormatDuration(time.Duration(math.Round(t.Value * float64(time.Second))))
	}
	return FormatValue(t.Value)
}

// FormatValue writes a float the way the generated PromQL and YAML do: the
// shortest decimal that reads back as the same float64.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// FormatDuration writes d as a Prometheus duration ("1m", "30s", "0s").
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
}

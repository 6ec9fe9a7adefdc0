package infragen

import (
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/telemetry"
)

// RuleTestFile is the schema of a `promtool test rules` file.
type RuleTestFile struct {
	RuleFiles          []string   `yaml:"rule_files"`
	EvaluationInterval string     `yaml:"evaluation_interval"`
	Tests              []RuleTest `yaml:"tests"`
}

// RuleTest is one test group: input series and the alerts expected.
type RuleTest struct {
	Name          string          `yaml:"name"`
	Interval      string          `yaml:"interval"`
	InputSeries   []InputSeries   `yaml:"input_series"`
	AlertRuleTest []AlertRuleTest `yaml:"alert_rule_test"`
}

// InputSeries is a series in promtool's expanding notation.
type InputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

// AlertRuleTest lists the alerts of one name expected at one time.
type AlertRuleTest struct {
	EvalTime  string     `yaml:"eval_time"`
	Alertname string     `yaml:"alertname"`
	ExpAlerts []ExpAlert `yaml:"exp_alerts"`
}

// ExpAlert is one expected firing alert.
type ExpAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// Input series are sampled every scrapeStep, as by infra/prometheus/prometheus.yml.
const scrapeStep = 15 * time.Second

// The labels every test series carries, as a scrape of a one-worker run has.
var testInstance = fmt.Sprintf("127.0.0.1:%d", telemetry.DefaultMetricsPort)

func targetLabels() map[string]string {
	return map[string]string{"job": telemetry.ScrapeJob, "instance": testInstance}
}

// agentLabels are the labels of a reinforcement-learning run's series of
// agent.
func agentLabels(agent string) map[string]string {
	l := targetLabels()
	l[telemetry.LabelAgent] = agent
	return l
}

func workerLabels() map[string]string {
	l := targetLabels()
	l[telemetry.LabelDevice] = "cpu"
	l[telemetry.LabelWorker] = "0"
	return l
}

// seriesLabels are the labels a scraped series of t's metric has: the
// target's, the worker's where the family carries them, and a reason for
// the families split by one.
func seriesLabels(t telemetry.Threshold) map[string]string {
	switch t.Metric {
	case telemetry.MetricFallbackTotal:
		l := workerLabels()
		l[telemetry.LabelReason] = graphs.ReasonCaptureFailed
		return l
	case telemetry.MetricSweepFailuresTotal:
		l := targetLabels()
		l[telemetry.LabelReason] = "hung" // a worker that stopped sending heartbeats
		return l
	case telemetry.MetricBudgetOldestWait:
		l := targetLabels()
		l[telemetry.LabelDevice] = "cuda:0"
		return l
	}
	if slices.Contains(telemetry.RLMetricNames(), t.Metric) {
		return agentLabels("0")
	}
	return workerLabels()
}

// nextJob describes two processes serving the same target one after the
// other: the first for first, a gap of two minutes with no target, then
// the second. Each makes the same observations before its first scrape, so
// the counters read the same in both and show no reset.
type nextJob struct{ first, gap time.Duration }

// values is v while either process serves, nothing in the gap.
func (j nextJob) values(v float64, span time.Duration) string {
	return fmt.Sprintf("%s _x%d %s", constant(v, j.first-scrapeStep), steps(j.gap), constant(v, span))
}

// processStart is the start-time series of the two processes.
func (j nextJob) processStart(span time.Duration) InputSeries {
	return InputSeries{series(telemetry.MetricProcessStart, targetLabels()),
		fmt.Sprintf("%s _x%d %s", constant(100, j.first-scrapeStep), steps(j.gap), constant(100+(j.first+j.gap).Seconds(), span))}
}

// eval is a minute into the second process.
func (j nextJob) eval() time.Duration { return j.first + j.gap + time.Minute }

// scenario is a set of input series and when to look at the alert.
type scenario struct {
	name   string
	series []InputSeries
	eval   time.Duration
	labels map[string]string // labels of the alert when it fires
}

// AlertRulesTest generates infra/prometheus/alert_rules_test.yml: for every
// threshold, a series that breaks it makes the alert fire, and a healthy
// series leaves it silent.
func AlertRulesTest() ([]byte, error) {
	file := RuleTestFile{
		RuleFiles:          []string{path.Base(AlertRulesPath)},
		EvaluationInterval: telemetry.FormatDuration(scrapeStep),
	}
	for _, t := range telemetry.Thresholds() {
		bad, healthy, err := scenarios(t)
		if err != nil {
			return nil, err
		}
		for _, s := range bad {
			test, err := ruleTest(t, s, true)
			if err != nil {
				return nil, err
			}
			file.Tests = append(file.Tests, test)
		}
		for _, s := range healthy {
			test, err := ruleTest(t, s, false)
			if err != nil {
				return nil, err
			}
			file.Tests = append(file.Tests, test)
		}
	}
	return marshalYAML(file)
}

func ruleTest(t telemetry.Threshold, s scenario, fires bool) (RuleTest, error) {
	verb := "stays silent on"
	if fires {
		verb = "fires on"
	}
	check := AlertRuleTest{EvalTime: telemetry.FormatDuration(s.eval), Alertname: t.Alert, ExpAlerts: []ExpAlert{}}
	if fires {
		want := maps.Clone(s.labels)
		want["severity"] = t.Severity
		annotations := RuleFor(t).Annotations
		for k, v := range annotations {
			rendered, err := renderLabels(v, s.labels)
			if err != nil {
				return RuleTest{}, fmt.Errorf("%s %s: %w", t.Alert, k, err)
			}
			annotations[k] = rendered
		}
		check.ExpAlerts = []ExpAlert{{ExpLabels: want, ExpAnnotations: annotations}}
	}
	return RuleTest{
		Name:          fmt.Sprintf("%s %s %s", t.Alert, verb, s.name),
		Interval:      telemetry.FormatDuration(scrapeStep),
		InputSeries:   s.series,
		AlertRuleTest: []AlertRuleTest{check},
	}, nil
}

// renderLabels expands {{ $labels.name }} the way Prometheus does for the
// simple templates the table uses, and refuses any other template.
func renderLabels(text string, labels map[string]string) (string, error) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		text = strings.ReplaceAll(text, "{{ $labels."+k+" }}", labels[k])
	}
	if strings.Contains(text, "{{") {
		return "", fmt.Errorf("template in %q uses more than {{ $labels.name }} of the test series", text)
	}
	return text, nil
}

// series writes name{labels} in PromQL selector syntax with sorted labels.
func series(name string, labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// steps is the number of scrape steps that cover d.
func steps(d time.Duration) int { return int(d / scrapeStep) }

// num writes a sample value for promtool, rounded so that 1.5*0.001*100
// reads as 0.15.
func num(v float64) string { return telemetry.FormatValue(math.Round(v*1e9) / 1e9) }

// constant is v for every step of d, then on to the end of the test.
func constant(v float64, d time.Duration) string { return fmt.Sprintf("%sx%d", num(v), steps(d)) }

// ramp grows by inc every step for d.
func ramp(inc float64, d time.Duration) string { return fmt.Sprintf("0+%sx%d", num(inc), steps(d)) }

func scenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	switch t.Condition {
	case telemetry.MeanAbove:
		return meanScenarios(t)
	case telemetry.QuantileAbove:
		return quantileScenarios(t)
	case telemetry.IncreaseAbove:
		return increaseScenarios(t)
	case telemetry.AnyAbove:
		return anyAboveScenarios(t)
	case telemetry.AgeAbove:
		return ageScenarios(t)
	case telemetry.TargetDown:
		return targetDownScenarios(t)
	case telemetry.FlatWhileRunning:
		return flatWhileRunningScenarios(t)
	}
	return nil, nil, fmt.Errorf("%s: no promtool scenario for condition %d", t.Alert, t.Condition)
}

// meanScenarios: 100 observations per step whose mean is 1.5 times the
// threshold (bad) or half of it (healthy).
func meanScenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	const perStep = 100
	eval := t.Window + t.For + 2*time.Minute
	span := eval + 2*time.Minute
	mk := func(name string, mean float64) scenario {
		l := workerLabels()
		return scenario{
			name: name,
			series: []InputSeries{
				{series(t.Metric+"_count", l), ramp(perStep, span)},
				{series(t.Metric+"_sum", l), ramp(perStep*mean, span)},
			},
			eval:   eval,
			labels: l,
		}
	}
	bad = []scenario{mk("a mean of 1.5 times the threshold", 1.5*t.Value)}
	healthy = []scenario{mk("a mean of half the threshold", 0.5*t.Value)}
	return bad, healthy, nil
}

// quantileScenarios: a steady stream where 5 times (bad) or half (healthy)
// the tolerated share of observations lies above the threshold; and, for a
// rule without a for-duration, a single observation just above (bad) or
// just below (healthy) the threshold. Only the buckets at the threshold,
// at twice the threshold and +Inf are given: they are all the quantile
// needs.
func quantileScenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	tolerated := 1 - t.Quantile
	if tolerated <= 0 || tolerated*10 > 1 {
		return nil, nil, fmt.Errorf("%s: quantile %v leaves no room for a steady-stream test", t.Alert, t.Quantile)
	}
	const perStep = 1000
	eval := t.Window + t.For + 2*time.Minute
	span := eval + 2*time.Minute
	// buckets returns the three bucket series growing by below, above and
	// above observations per step below and above the threshold.
	buckets := func(name string, below, above string) scenario {
		l := workerLabels()
		bucket := func(le, values string) InputSeries {
			bl := maps.Clone(l)
			bl["le"] = le
			return InputSeries{series(t.Metric+"_bucket", bl), values}
		}
		return scenario{
			name: name,
			series: []InputSeries{
				bucket(telemetry.FormatValue(t.Value), below),
				bucket(telemetry.FormatValue(2*t.Value), above),
				bucket("+Inf", above),
			},
			eval:   eval,
			labels: l,
		}
	}
	stream := func(name string, slowShare float64) scenario {
		slow := math.Round(perStep * slowShare)
		return buckets(name, ramp(perStep-slow, span), ramp(perStep, span))
	}
	share := func(f float64) string { return fmt.Sprintf("a stream with %.3g%% above the threshold", 100*f) }
	bad = []scenario{stream(share(5*tolerated), 5*tolerated)}
	healthy = []scenario{stream(share(tolerated/2), tolerated/2)}
	if t.For == 0 {
		// One observation a minute in, then quiet.
		before, after := time.Minute, t.Window+time.Minute
		once := func(v float64) string {
			return fmt.Sprintf("%s %s", constant(0, before-scrapeStep), constant(v, after))
		}
		single := func(name string, belowCount float64) scenario {
			s := buckets(name, once(belowCount), once(1))
			s.eval = before + time.Minute
			return s
		}
		bad = append(bad, single("a single observation above the threshold", 0))
		healthy = append(healthy, single("a single observation at most the threshold", 1))
	}
	return bad, healthy, nil
}

// increaseScenarios: a counter, zero-initialised as telemetry does, that
// grows past the threshold (bad), stays flat (healthy) or, where the
// threshold is 1 or more, grows by its whole part (healthy);
// one that Prometheus first sees
// already grown, as after a fallback before the first scrape: that fires
// while it is new (bad) and not once the window has passed (healthy); and
// the next job on the same target, grown as the last one was (bad) or at
// zero (healthy).
func increaseScenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	l := seriesLabels(t)
	jump := 2 * time.Minute
	eval := jump + t.For + time.Minute
	span := eval + t.Window
	whole := math.Floor(t.Value)
	grow := whole + 1
	one := func(name, values string, eval time.Duration) scenario {
		return scenario{name: name, series: []InputSeries{{series(t.Metric, l), values}}, eval: eval, labels: l}
	}
	next := nextJob{first: t.Window + 5*time.Minute, gap: 2 * time.Minute}
	nextJobSeries := func(name string, v float64) scenario {
		sc := one(name, next.values(v, span), next.eval())
		sc.series = append(sc.series, next.processStart(span))
		return sc
	}
	bad = []scenario{
		one(fmt.Sprintf("a counter that grows by %s", num(grow)),
			fmt.Sprintf("%s %s", constant(0, jump-scrapeStep), constant(grow, span)), eval),
		one(fmt.Sprintf("a counter first scraped at %s", num(grow)), constant(grow, span), t.For+time.Minute),
		nextJobSeries(fmt.Sprintf("the next job on the target, first scraped at %s as the last one was", num(grow)), grow),
	}
	healthy = []scenario{
		one("a counter that stays at zero", constant(0, eval+span), eval),
		one(fmt.Sprintf("a counter first scraped at %s more than the window ago", num(grow)),
			constant(grow, t.Window+t.For+2*time.Minute), t.Window+t.For+time.Minute),
		nextJobSeries("the next job on the target, both at zero", 0),
	}
	if whole >= 1 {
		healthy = append(healthy, one(fmt.Sprintf("a counter that grows by %s", num(whole)),
			fmt.Sprintf("%s %s", constant(0, jump-scrapeStep), constant(whole, span)), eval))
	}
	return bad, healthy, nil
}

// flatWhileRunningScenarios: agent 0's gauge stops moving while the agent
// runs on (bad), or never moves from the agent's start (bad); it keeps
// moving, stops as the agent finishes, has stood still for less than the
// window, or belongs to an agent that started within the window
// (healthy); and one that stood still while its agent ran, until the
// agent failed, while another agent runs on (healthy: the rule asks each
// agent's own state, not whether any agent runs).
func flatWhileRunningScenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	stop := 2 * time.Minute
	eval := stop + t.Window + time.Minute
	span := eval + time.Minute
	gauge := func(agent, values string) InputSeries {
		return InputSeries{series(t.Metric, agentLabels(agent)), values}
	}
	running := func(agent, values string) InputSeries {
		l := agentLabels(agent)
		l[telemetry.LabelState] = telemetry.RLStateRunning
		return InputSeries{series(telemetry.MetricRLAgentState, l), values}
	}
	moving := ramp(10, span)
	stops := fmt.Sprintf("%s %s", ramp(10, stop-scrapeStep), constant(10*float64(steps(stop-scrapeStep)), span))
	finishes := fmt.Sprintf("%s %s", constant(1, stop-scrapeStep), constant(0, span))
	mk := func(name string, eval time.Duration, series ...InputSeries) scenario {
		return scenario{name: name, series: series, eval: eval, labels: agentLabels("0")}
	}
	late := 5 * time.Minute
	absent := fmt.Sprintf("_x%d", steps(late))
	bad = []scenario{
		mk("a gauge that stops while its agent runs on", eval, gauge("0", stops), running("0", constant(1, span))),
		mk("a gauge that never moves while its agent runs", t.Window+time.Minute, gauge("0", constant(0, span)), running("0", constant(1, span))),
	}
	healthy = []scenario{
		mk("a gauge that keeps moving", eval, gauge("0", moving), running("0", constant(1, span))),
		mk("a gauge that stops as its agent finishes", eval, gauge("0", stops), running("0", finishes)),
		mk("a gauge that has stood still for less than the window", stop+t.Window-time.Minute,
			gauge("0", stops), running("0", constant(1, span))),
		mk("a gauge that never moves, of an agent that started less than the window ago", late+t.Window-time.Minute,
			gauge("0", absent+" "+constant(0, span)), running("0", absent+" "+constant(1, span))),
		mk("an agent whose learner stood still until it failed, while another runs on", eval,
			gauge("0", stops), running("0", fmt.Sprintf("%s %s", constant(1, stop+t.Window/2-scrapeStep), constant(0, span))),
			gauge("1", moving), running("1", constant(1, span))),
	}
	return bad, healthy, nil
}

// anyAboveScenarios: histograms that Prometheus first sees holding one
// observation above the threshold (bad) or at most it (healthy), as after
// a job's first captures; one observation above the threshold a minute
// after a zero start (bad); the next job on the same target, whose first
// observation is above it (bad) or not (healthy), as the last one's was;
// the first-seen slow observation once the window has passed, alone or
// followed by fast ones (healthy); and a steady stream at most the
// threshold (healthy).
func anyAboveScenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	l := workerLabels()
	span := t.Window + 4*time.Minute
	mk := func(name string, count, atThreshold string, eval time.Duration) scenario {
		bl := maps.Clone(l)
		bl["le"] = telemetry.FormatValue(t.Value)
		inf := maps.Clone(l)
		inf["le"] = "+Inf"
		return scenario{
			name: name,
			series: []InputSeries{
				{series(t.Metric+"_count", l), count},
				{series(t.Metric+"_bucket", bl), atThreshold},
				{series(t.Metric+"_bucket", inf), count},
			},
			eval:   eval,
			labels: l,
		}
	}
	later := fmt.Sprintf("%s %s", constant(0, time.Minute-scrapeStep), constant(1, span))
	next := nextJob{first: t.Window + 5*time.Minute, gap: 2 * time.Minute}
	nextJobSeries := func(name string, atThreshold float64) scenario {
		sc := mk(name, next.values(1, span), next.values(atThreshold, span), next.eval())
		sc.series = append(sc.series, next.processStart(span))
		return sc
	}
	bad = []scenario{
		nextJobSeries("the next job on the target, whose first observation is above the threshold as the last one's was", 0),
		mk("a first scrape holding one observation above the threshold", constant(1, span), constant(0, span), time.Minute),
		mk("one observation above the threshold a minute after a zero start", later, constant(0, span), 2*time.Minute),
	}
	healthy = []scenario{
		mk("a first scrape holding one observation at most the threshold", constant(1, span), constant(1, span), time.Minute),
		nextJobSeries("the next job on the target, whose first observation is at most the threshold", 1),
		mk("a first-scraped observation above the threshold once the window has passed", constant(1, span), constant(0, span), t.Window+2*time.Minute),
		mk("a steady stream at most the threshold", ramp(10, span), ramp(10, span), t.Window+2*time.Minute),
		// A slow first observation long ago, then fast ones: the count
		// and the bucket grow alike, so nothing new is above.
		mk("fast observations after a slow one more than the window ago",
			fmt.Sprintf("%s 2+1x%d", constant(1, t.Window+2*time.Minute-scrapeStep), steps(span)),
			fmt.Sprintf("%s 1+1x%d", constant(0, t.Window+2*time.Minute-scrapeStep), steps(span)),
			t.Window+7*time.Minute+45*time.Second),
	}
	return bad, healthy, nil
}

// ageScenarios: a timestamp that stops a minute in while its process
// runs (bad), keeps up with time (healthy), stops while the target is down
// (silent: that is TargetDown's job), or stops as its process finishes and
// lingers (silent).
func ageScenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	l := seriesLabels(t)
	stop := time.Minute
	eval := stop + time.Duration(t.Value*float64(time.Second)) + t.For + time.Minute
	span := eval + time.Minute
	stuck := fmt.Sprintf("0+%sx%d %sx%d", num(scrapeStep.Seconds()), steps(stop)-1, num(stop.Seconds()), steps(span))
	moving := ramp(scrapeStep.Seconds(), span)
	up := func(v float64) InputSeries { return InputSeries{series("up", targetLabels()), constant(v, span)} }
	finished := func(values string) InputSeries {
		return InputSeries{series(telemetry.MetricProcessFinished, targetLabels()), values}
	}
	bad = []scenario{
		{
			name:   "a timestamp that stops moving while the target is up",
			series: []InputSeries{{series(t.Metric, l), stuck}, up(1)},
			eval:   eval,
			labels: l,
		},
		{
			name:   "a timestamp that stops moving while the target is up and its process has not finished",
			series: []InputSeries{{series(t.Metric, l), stuck}, up(1), finished(constant(0, span))},
			eval:   eval,
			labels: l,
		},
	}
	healthy = []scenario{
		{
			name:   "a timestamp that keeps up",
			series: []InputSeries{{series(t.Metric, l), moving}, up(1)},
			eval:   eval,
		},
		{
			name:   "a timestamp that stops moving while the target is down",
			series: []InputSeries{{series(t.Metric, l), stuck}, up(0)},
			eval:   eval,
		},
		{
			name:   "a timestamp that stops moving as its process finishes and lingers",
			series: []InputSeries{{series(t.Metric, l), stuck}, up(1), finished(fmt.Sprintf("%s %s", constant(0, stop-scrapeStep), constant(1, span)))},
			eval:   eval,
		},
	}
	return bad, healthy, nil
}

// targetDownScenarios: up drops to the threshold value a minute in, with
// no word from the process, or after its process (or a later one on the
// same target) scraped as not finished (bad); up stays 1, or drops after
// the process scraped as finished (healthy). A failed scrape makes the
// target's series stale, as Prometheus does.
func targetDownScenarios(t telemetry.Threshold) (bad, healthy []scenario, err error) {
	l := targetLabels()
	down := time.Minute
	eval := down + t.For + time.Minute
	span := eval + time.Minute
	up := InputSeries{series("up", l), fmt.Sprintf("%s %s", constant(1, down-scrapeStep), constant(t.Value, span))}
	finished := func(values string) InputSeries {
		return InputSeries{series(telemetry.MetricProcessFinished, l), values + " stale"}
	}
	// The finished gauge's samples up to the last scrape that reached the
	// target, the last one's value given.
	before := func(last string) string { return fmt.Sprintf("%s %s", constant(0, down-2*scrapeStep), last) }
	bad = []scenario{
		{name: "a target that goes down", series: []InputSeries{up}, eval: eval, labels: l},
		{name: "a target whose process goes down without finishing", series: []InputSeries{up, finished(before("0"))}, eval: eval, labels: l},
		{
			name:   "a target whose next process goes down without finishing",
			series: []InputSeries{up, finished(fmt.Sprintf("1 %s 0", constant(0, down-3*scrapeStep)))},
			eval:   eval,
			labels: l,
		},
	}
	healthy = []scenario{
		{name: "a target that stays up", series: []InputSeries{{series("up", l), constant(1, span)}}, eval: eval},
		{name: "a target whose process finished before it went down", series: []InputSeries{up, finished(before("1"))}, eval: eval},
	}
	return bad, healthy, nil
}

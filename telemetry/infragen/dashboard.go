package infragen

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/grafana-tools/sdk"

	"github.com/tolaria-ml/tolaria/telemetry"
)

// Dashboard identity. The SDK leaves the schema version at 0 and numbers
// panels from package counters, so both are set here explicitly.
const (
	DashboardUID           = "tolaria"
	DashboardTitle         = "tolaria training"
	DashboardSchemaVersion = 36 // Grafana 9
)

// Template variables: the Prometheus datasource and the workers shown.
const (
	VarDatasource = "datasource"
	VarWorker     = "worker"
)

// Threshold colours by severity.
var severityColor = map[string]string{
	telemetry.SeverityWarning:  "orange",
	telemetry.SeverityCritical: "red",
}

// PanelSpec is one dashboard panel before it becomes Grafana JSON.
type PanelSpec struct {
	ID      uint
	Key     string // the telemetry.Panel* key thresholds refer to; "" if none
	Title   string
	Unit    string // Grafana unit id
	Queries []Query
	// Goal, when not 0, is a value the panel draws as a dashed line
	// beside its series: a target to reach, not an alert's threshold.
	Goal float64
}

// goalColor is the colour of a panel's goal line.
const goalColor = "blue"

// Query is one PromQL target of a panel.
type Query struct {
	Expr   string
	Legend string
}

// worker is the selector every panel query filters on.
const worker = `worker=~"$` + VarWorker + `"`

func window(alert string) string {
	for _, t := range telemetry.Thresholds() {
		if t.Alert == alert {
			return telemetry.FormatDuration(t.Window)
		}
	}
	panic("infragen: no threshold named " + alert)
}

// quantiles draws p50 and p99 of a histogram over w, per worker and trial.
func quantiles(metric, w string) []Query {
	var qs []Query
	for _, q := range []struct{ quantile, name string }{{"0.5", "p50"}, {"0.99", "p99"}} {
		qs = append(qs, Query{
			Expr:   fmt.Sprintf("histogram_quantile(%s, sum by (le, worker, trial, agent) (rate(%s_bucket{%s}[%s])))", q.quantile, metric, worker, w),
			Legend: q.name + " {{worker}} {{trial}}{{agent}}",
		})
	}
	return qs
}

// quantilesSinceStart draws p50 and p99 of every observation a histogram
// holds, per worker and trial: for events as rare as captures, which
// mostly happen before the first scrape and so never show in a rate.
func quantilesSinceStart(metric string) []Query {
	var qs []Query
	for _, q := range []struct{ quantile, name string }{{"0.5", "p50"}, {"0.99", "p99"}} {
		qs = append(qs, Query{
			Expr:   fmt.Sprintf("histogram_quantile(%s, sum by (le, worker, trial, agent) (%s_bucket{%s}))", q.quantile, metric, worker),
			Legend: q.name + " {{worker}} {{trial}}{{agent}}",
		})
	}
	return qs
}

// SweepRowTitle is the title of the row of a sweep's own metrics.
const SweepRowTitle = "Sweep"

// BudgetRowTitle is the title of the row of a sweep's device-memory budget
// broker.
const BudgetRowTitle = "Device-memory budgets"

// RLRowTitle is the title of the row of a reinforcement-learning run's
// metrics (tolaria rl).
const RLRowTitle = "Reinforcement learning"

// RowSpec is a row of the dashboard: a title over the panels that follow
// it. The first row has no title (no row panel): its panels open the
// board.
type RowSpec struct {
	ID     uint // the row panel's; 0 for the untitled first row
	Title  string
	Panels []PanelSpec
}

// Rows returns the dashboard's rows in order: the jobs' panels, then the
// sweep's.
func Rows() []RowSpec {
	return []RowSpec{
		{Panels: jobPanels()},
		{ID: 16, Title: SweepRowTitle, Panels: sweepPanels()},
		{ID: 21, Title: BudgetRowTitle, Panels: budgetPanels()},
		{ID: 27, Title: RLRowTitle, Panels: rlPanels()},
	}
}

// Panels returns every panel of the dashboard in order, rows aside.
func Panels() []PanelSpec {
	var ps []PanelSpec
	for _, r := range Rows() {
		ps = append(ps, r.Panels...)
	}
	return ps
}

// sweepPanels draw a sweep coordinator's own metrics. Failures and retries
// are mostly rare events: their panels show totals since the start.
func sweepPanels() []PanelSpec {
	return []PanelSpec{
		{ID: 17, Title: "Trials by state", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (%s) (%s)", telemetry.LabelState, telemetry.MetricSweepTrials), Legend: "{{" + telemetry.LabelState + "}}"},
		}},
		{ID: 18, Title: "Trial failures by reason (since start)", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (%s) (%s)", telemetry.LabelReason, telemetry.MetricSweepFailuresTotal), Legend: "{{" + telemetry.LabelReason + "}}"},
		}},
		{ID: 19, Title: "Trial retries (since start)", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (instance) (%s)", telemetry.MetricSweepRetriesTotal), Legend: "{{instance}}"},
		}},
		{ID: 20, Title: "Time since each worker's last message (heartbeat age)", Unit: "s", Queries: []Query{
			{Expr: telemetry.MetricWorkerHeartbeatAge, Legend: "{{" + telemetry.LabelTrial + "}}"},
		}},
	}
}

// budgetPanels draw a sweep's budget broker, by device. The longest wait
// now is 0 while nothing waits (the timestamp's series is absent then), so
// the panel shows a line rather than a gap, beside the alert's threshold.
func budgetPanels() []PanelSpec {
	dev := "{{" + telemetry.LabelDevice + "}}"
	var waited []Query
	for _, q := range []struct{ quantile, name string }{{"0.5", "p50"}, {"0.99", "p99"}} {
		waited = append(waited, Query{
			Expr: fmt.Sprintf("histogram_quantile(%s, sum by (le, %s) (%s_bucket))",
				q.quantile, telemetry.LabelDevice, telemetry.MetricBudgetWaitSeconds),
			Legend: q.name + " " + dev,
		})
	}
	return []PanelSpec{
		{ID: 22, Title: "Device memory for budgets, and granted", Unit: "bytes", Queries: []Query{
			{Expr: telemetry.MetricBudgetCapacityBytes, Legend: "capacity " + dev},
			{Expr: telemetry.MetricBudgetGrantedBytes, Legend: "granted " + dev},
		}},
		{ID: 23, Title: "Trials waiting for a budget", Unit: "short", Queries: []Query{
			{Expr: telemetry.MetricBudgetWaiting, Legend: dev},
		}},
		{ID: 24, Key: telemetry.PanelBudgetWaitAge, Title: "Longest budget wait now", Unit: "s", Queries: []Query{
			{Expr: fmt.Sprintf("time() - %s or %s * 0", telemetry.MetricBudgetOldestWait, telemetry.MetricBudgetWaiting), Legend: dev},
		}},
		{ID: 25, Title: "Budget wait of granted requests (since start)", Unit: "s", Queries: waited},
		{ID: 26, Title: "Budget refusals and parks (since start)", Unit: "short", Queries: []Query{
			{Expr: telemetry.MetricBudgetRefusalsTotal, Legend: "refused " + dev},
			{Expr: telemetry.MetricBudgetParksTotal, Legend: "parked " + dev},
		}},
	}
}

// rlPanels draw a reinforcement-learning run's agents, each series by its
// agent label. Restarts are rare: their panel shows totals since the
// start.
func rlPanels() []PanelSpec {
	const rateW = "1m"
	agent := "agent {{" + telemetry.LabelAgent + "}}"
	byAgent := func(metric string) Query { return Query{Expr: metric, Legend: agent} }
	rate := func(metric, legend string) Query {
		return Query{Expr: fmt.Sprintf("rate(%s[%s])", metric, rateW), Legend: legend + agent}
	}
	var returns []Query
	for _, q := range []struct{ quantile, name string }{{"0.5", "p50"}, {"0.99", "p99"}} {
		returns = append(returns, Query{
			Expr: fmt.Sprintf("histogram_quantile(%s, sum by (le, %s) (rate(%s_bucket[%s])))",
				q.quantile, telemetry.LabelAgent, telemetry.MetricRLEpisodeReturn, rateW),
			Legend: q.name + " " + agent,
		})
	}
	return []PanelSpec{
		{ID: 28, Title: "Mean return: last 100 episodes, greedy evaluation and the environment's goal", Unit: "short",
			Queries: []Query{byAgent(telemetry.MetricRLMeanReturn),
				{Expr: telemetry.MetricRLGreedyMeanReturn, Legend: "greedy " + agent},
				{Expr: telemetry.MetricRLGoalReturn, Legend: "goal {{" + telemetry.LabelEnv + "}}"}}},
		{ID: 29, Title: "Episode return (" + rateW + ")", Unit: "short", Queries: returns},
		{ID: 30, Title: "Episodes per second", Unit: "short", Queries: []Query{rate(telemetry.MetricRLEpisodesTotal, "")}},
		{ID: 31, Title: "Actor and learner steps per second", Unit: "short", Queries: []Query{
			{Expr: telemetry.MetricRLActorStepsPerSecond, Legend: "actor " + agent},
			{Expr: telemetry.MetricRLLearnerStepsPerSecond, Legend: "learner " + agent},
		}},
		{ID: 32, Title: "Environment and learner steps", Unit: "short", Queries: []Query{
			{Expr: telemetry.MetricRLEnvSteps, Legend: "env " + agent},
			{Expr: telemetry.MetricRLLearnerSteps, Legend: "learner " + agent},
		}},
		{ID: 33, Title: "Weight version lag (actor behind learner)", Unit: "short", Queries: []Query{byAgent(telemetry.MetricRLWeightLag)}},
		{ID: 34, Title: "Weight publishes and syncs per second", Unit: "short", Queries: []Query{
			rate(telemetry.MetricRLPublishesTotal, "publishes "),
			rate(telemetry.MetricRLSyncsTotal, "syncs "),
		}},
		{ID: 35, Title: "Actor restarts (since start)", Unit: "short", Queries: []Query{byAgent(telemetry.MetricRLActorRestartsTotal)}},
		{ID: 36, Title: "Exploration rate (epsilon)", Unit: "percentunit", Queries: []Query{byAgent(telemetry.MetricRLEpsilon)}},
		{ID: 37, Title: "Learner loss (Huber)", Unit: "short", Queries: []Query{byAgent(telemetry.MetricRLLoss)}},
		{ID: 38, Title: "Agents by state", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (%s) (%s)", telemetry.LabelState, telemetry.MetricRLAgents), Legend: "{{" + telemetry.LabelState + "}}"},
		}},
		{ID: 39, Title: "Each agent's state", Unit: "short", Queries: []Query{
			{Expr: telemetry.MetricRLAgentState + " == 1", Legend: agent + " {{" + telemetry.LabelState + "}}"},
		}},
	}
}

// jobPanels draw what jobs (a run's workers, a sweep's trials) report.
// Replay and stage-copy latency panels use the window of the alert whose
// threshold they draw, so the line and the alert judge the same numbers.
// Captures and fallbacks happen mostly at a job's start, before
// Prometheus's first scrape, where rate() and increase() cannot see them:
// their panels show totals. Series are kept apart by worker and, in a
// sweep, by trial, or under tolaria rl by agent (labels that a single
// training run's series lack, so grouping by them changes nothing there).
func jobPanels() []PanelSpec {
	stageW := window("TolariaStageCopySlow")
	replayW := window("TolariaGraphReplaySlow")
	const rateW = "1m"
	sel := func(metric string) string { return metric + "{" + worker + "}" }
	return []PanelSpec{
		{ID: 1, Title: "Graphs enabled and prefetch-to-device disabled", Unit: "bool", Queries: []Query{
			{Expr: sel(telemetry.MetricGraphEnabled), Legend: "graphs enabled {{worker}} {{trial}}{{agent}} ({{device}})"},
			{Expr: sel(telemetry.MetricPrefetchDisabled), Legend: "prefetch off {{worker}} {{trial}}"},
		}},
		{ID: 2, Title: "Eager fallbacks by reason (since start)", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (%s) (%s)", telemetry.LabelReason, sel(telemetry.MetricFallbackTotal)), Legend: "{{" + telemetry.LabelReason + "}}"},
		}},
		{ID: 3, Key: telemetry.PanelCaptureLatency, Title: "Graph capture time (all captures since start)", Unit: "s",
			Queries: quantilesSinceStart(telemetry.MetricCaptureSeconds)},
		{ID: 4, Key: telemetry.PanelReplayLatency, Title: "Graph replay time (" + replayW + ")", Unit: "s",
			Queries: quantiles(telemetry.MetricReplaySeconds, replayW)},
		{ID: 5, Key: telemetry.PanelStageCopyLatency, Title: "Stage copy time (" + stageW + ")", Unit: "s",
			Queries: append(quantiles(telemetry.MetricStageCopySeconds, stageW), Query{
				Expr: fmt.Sprintf("rate(%s_sum{%s}[%s]) / rate(%s_count{%s}[%s])",
					telemetry.MetricStageCopySeconds, worker, stageW, telemetry.MetricStageCopySeconds, worker, stageW),
				Legend: "mean {{worker}} {{trial}}",
			})},
		{ID: 6, Title: "Graph replays per second", Unit: "ops", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (worker, trial, agent) (rate(%s[%s]))", sel(telemetry.MetricReplaysTotal), rateW), Legend: "{{worker}} {{trial}}{{agent}}"},
		}},
		{ID: 7, Title: "Captures and executable updates (since start)", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (worker, trial, agent, %s) (%s)", telemetry.LabelPooled, sel(telemetry.MetricCapturesTotal)), Legend: "captures {{worker}} {{trial}}{{agent}} pooled={{" + telemetry.LabelPooled + "}}"},
			{Expr: fmt.Sprintf("sum by (worker, trial, agent) (%s)", sel(telemetry.MetricExecUpdatesTotal)), Legend: "exec updates {{worker}} {{trial}}{{agent}}"},
		}},
		{ID: 8, Title: "Training samples per second", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (worker, trial) (rate(%s[%s]))", sel(telemetry.MetricSamplesTotal), rateW), Legend: "{{worker}} {{trial}}"},
		}},
		{ID: 9, Title: "Training step time (" + rateW + ")", Unit: "s",
			Queries: quantiles(telemetry.MetricStepSeconds, rateW)},
		{ID: 10, Title: "Training loss", Unit: "short", Queries: []Query{
			{Expr: sel(telemetry.MetricTrainLoss), Legend: "{{worker}} {{trial}}"},
		}},
		{ID: 11, Title: "Eval accuracy", Unit: "percentunit", Queries: []Query{
			{Expr: sel(telemetry.MetricEvalAccuracy), Legend: "{{worker}} {{trial}}"},
		}},
		{ID: 12, Title: "Epoch", Unit: "short", Queries: []Query{
			{Expr: sel(telemetry.MetricTrainEpoch), Legend: "{{worker}} {{trial}}"},
		}},
		{ID: 13, Key: telemetry.PanelLastStepAge, Title: "Time since the last training step", Unit: "s", Queries: []Query{
			{Expr: "time() - " + sel(telemetry.MetricLastStepTimestamp), Legend: "{{worker}} {{trial}}"},
		}},
		{ID: 40, Title: "Checkpoints written (since start)", Unit: "short", Queries: []Query{
			{Expr: fmt.Sprintf("sum by (worker, trial) (%s)", sel(telemetry.MetricCheckpointsTotal)), Legend: "{{worker}} {{trial}}"},
		}},
		{ID: 14, Title: "Device memory and graph pool", Unit: "bytes", Queries: []Query{
			{Expr: sel(telemetry.MetricDeviceMemoryBytes), Legend: "{{" + telemetry.LabelKind + "}} {{worker}} {{trial}}"},
			{Expr: sel(telemetry.MetricPoolReservedBytes), Legend: "graph pool {{worker}} {{trial}}"},
		}},
		{ID: 15, Title: "Metrics targets up", Unit: "bool", Queries: []Query{
			{Expr: fmt.Sprintf("up{job=%q}", telemetry.ScrapeJob), Legend: "{{instance}}"},
		}},
	}
}

// PanelThresholds returns the table rows a panel draws, by rising value.
func PanelThresholds(key string) []telemetry.Threshold {
	var ts []telemetry.Threshold
	for _, t := range telemetry.Thresholds() {
		if key != "" && t.Panel == key {
			ts = append(ts, t)
		}
	}
	slices.SortFunc(ts, func(a, b telemetry.Threshold) int { return cmp.Compare(a.Value, b.Value) })
	return ts
}

func datasourceRef() map[string]string {
	return map[string]string{"type": "prometheus", "uid": "${" + VarDatasource + "}"}
}

// Panel sizes on Grafana's 24-column grid: two panels a line.
const panelWidth, panelHeight, rowHeight = 12, 8, 1

// rowPanel is the row panel titled spec.Title at line y.
func rowPanel(spec RowSpec, y int) *sdk.Panel {
	w, h, x := 2*panelWidth, rowHeight, 0
	p := &sdk.Panel{
		CommonPanel: sdk.CommonPanel{OfType: sdk.RowType, Type: "row", Title: spec.Title, ID: spec.ID},
		RowPanel:    &sdk.RowPanel{Panels: []sdk.Panel{}},
	}
	p.GridPos.W, p.GridPos.H, p.GridPos.X, p.GridPos.Y = &w, &h, &x, &y
	return p
}

// panel is the panel of spec, the index-th of a row whose panels start at
// line top.
func panel(spec PanelSpec, index, top int) (*sdk.Panel, error) {
	p := sdk.NewTimeseries(spec.Title)
	p.ID = spec.ID
	p.IsNew = false
	p.Span = 0
	p.Datasource = datasourceRef()
	w, h, x, y := panelWidth, panelHeight, (index%2)*panelWidth, top+(index/2)*panelHeight
	p.GridPos.W, p.GridPos.H, p.GridPos.X, p.GridPos.Y = &w, &h, &x, &y

	ts := p.TimeseriesPanel
	ts.Options.Legend = sdk.TimeseriesLegendOptions{Calcs: []string{"lastNotNull", "max"}, DisplayMode: "table", Placement: "bottom"}
	ts.Options.Tooltip.Mode = "multi"
	d := &ts.FieldConfig.Defaults
	d.Unit = spec.Unit
	d.Color = sdk.FieldConfigColor{Mode: "palette-classic"}
	d.Custom.DrawStyle = "line"
	d.Custom.LineInterpolation = "linear"
	d.Custom.LineWidth = 1
	d.Custom.FillOpacity = 10
	d.Custom.ShowPoints = "never"
	d.Custom.AxisPlacement = "auto"
	d.Custom.GradientMode = "none"
	d.Custom.LineStyle.Fill = "solid"
	d.Custom.ScaleDistribution.Type = "linear"
	d.Custom.Stacking.Mode = "none"
	d.Custom.ThresholdsStyle.Mode = "off"
	d.Thresholds = sdk.Thresholds{Mode: "absolute", Steps: []sdk.ThresholdStep{{Color: "green"}}}
	for _, t := range PanelThresholds(spec.Key) {
		color, ok := severityColor[t.Severity]
		if !ok {
			return nil, fmt.Errorf("panel %q: threshold %s has unknown severity %q", spec.Title, t.Alert, t.Severity)
		}
		v := t.Value
		d.Thresholds.Steps = append(d.Thresholds.Steps, sdk.ThresholdStep{Color: color, Value: &v})
		d.Custom.ThresholdsStyle.Mode = "line+area"
	}
	if spec.Key != "" && len(d.Thresholds.Steps) == 1 {
		return nil, fmt.Errorf("panel %q: no threshold in the table names panel %q", spec.Title, spec.Key)
	}
	if spec.Goal != 0 {
		if spec.Key != "" {
			return nil, fmt.Errorf("panel %q: a goal line beside the alert thresholds of %q", spec.Title, spec.Key)
		}
		v := spec.Goal
		d.Thresholds.Steps = append(d.Thresholds.Steps, sdk.ThresholdStep{Color: goalColor, Value: &v})
		d.Custom.ThresholdsStyle.Mode = "dashed"
	}
	for i, q := range spec.Queries {
		p.AddTarget(&sdk.Target{
			RefID:        string(rune('A' + i)),
			Datasource:   datasourceRef(),
			Expr:         q.Expr,
			LegendFormat: q.Legend,
		})
	}
	return p, nil
}

func templating() []sdk.TemplateVar {
	refresh := int64(2) // on time range change
	all := &sdk.StringSliceString{Value: []string{"All"}, Valid: true}
	return []sdk.TemplateVar{
		{
			Name:    VarDatasource,
			Label:   "Datasource",
			Type:    "datasource",
			Query:   "prometheus",
			Options: []sdk.Option{},
			Current: sdk.Current{Text: &sdk.StringSliceString{Value: []string{"default"}, Valid: true}, Value: "default"},
		},
		{
			Name:       VarWorker,
			Label:      "Worker",
			Type:       "query",
			Datasource: datasourceRef(),
			Query:      fmt.Sprintf("label_values(%s, %s)", telemetry.MetricGraphEnabled, telemetry.LabelWorker),
			Refresh:    sdk.BoolInt{Value: &refresh},
			IncludeAll: true,
			AllValue:   ".*",
			Multi:      true,
			Sort:       3, // numerical ascending
			Options:    []sdk.Option{},
			Current:    sdk.Current{Text: all, Value: []string{"$__all"}},
		},
	}
}

// Dashboard generates infra/grafana/dashboards/tolaria.json. The output is
// deterministic: the same table gives the same bytes.
func Dashboard() ([]byte, error) {
	b := sdk.NewBoard(DashboardTitle)
	b.ID = 0 // provisioned dashboards carry no database id
	b.UID = DashboardUID
	b.SchemaVersion = DashboardSchemaVersion
	b.Version = 1
	b.Tags = []string{"tolaria", "cuda-graphs"}
	b.Rows = []*sdk.Row{}
	b.Links = []sdk.Link{}
	b.Annotations.List = []sdk.Annotation{}
	b.Time = sdk.Time{From: "now-1h", To: "now"}
	b.Timepicker = sdk.Timepicker{RefreshIntervals: []string{"10s", "30s", "1m", "5m"}, TimeOptions: []string{}}
	b.Refresh = &sdk.BoolString{Value: "30s"}
	b.GraphTooltip = 1 // shared crosshair
	b.Templating.List = templating()

	y := 0
	for _, row := range Rows() {
		if row.Title != "" {
			b.Panels = append(b.Panels, rowPanel(row, y))
			y += rowHeight
		}
		for i, spec := range row.Panels {
			p, err := panel(spec, i, y)
			if err != nil {
				return nil, err
			}
			b.Panels = append(b.Panels, p)
		}
		y += (len(row.Panels) + 1) / 2 * panelHeight
	}

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

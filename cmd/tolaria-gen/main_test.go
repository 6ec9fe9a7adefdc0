package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/telemetry/infragen"
)

var update = flag.Bool("update", false, "rewrite the committed generated files")

// repoRoot is the repository root, relative to this package.
const repoRoot = "../.."

func committed(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestCommittedFilesInSync(t *testing.T) {
	files, err := infragen.Files()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := run([]string{"-out", repoRoot}, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(f.Path)))
		if err != nil {
			t.Errorf("%v; run `make generate`", err)
			continue
		}
		if !bytes.Equal(got, f.Data) {
			t.Errorf("%s differs from what telemetry.Thresholds generates; run `make generate` (or go test ./cmd/tolaria-gen -update) and commit the result", f.Path)
		}
	}
}

func TestRunWritesEveryFile(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run([]string{"-out", dir}, &out); err != nil {
		t.Fatal(err)
	}
	files, err := infragen.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("%s: not written as generated (%v)", f.Path, err)
		}
	}
	if err := run([]string{"stray"}, io.Discard); err == nil {
		t.Error("run accepted a stray argument")
	}
}

// comparison finds the threshold in an alert expression: the bucket an
// AnyAbove rule counts above, else the value of the first comparison.
var (
	bucketBound = regexp.MustCompile(`le="([^"]+)"`)
	comparison  = regexp.MustCompile(`(?:>|==) ([^\s)]+)`)
)

func thresholdIn(expr string) []string {
	if m := bucketBound.FindStringSubmatch(expr); m != nil {
		return m
	}
	return comparison.FindStringSubmatch(expr)
}

func TestAlertRulesMatchTable(t *testing.T) {
	var file infragen.RuleFile
	if err := yaml.Unmarshal(committed(t, infragen.AlertRulesPath), &file); err != nil {
		t.Fatal(err)
	}
	rules := map[string]infragen.Rule{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r
		}
	}
	table := telemetry.Thresholds()
	if len(rules) != len(table) {
		t.Errorf("%s has %d alerts, the table %d", infragen.AlertRulesPath, len(rules), len(table))
	}
	for _, th := range table {
		r, ok := rules[th.Alert]
		if !ok {
			t.Errorf("%s: missing from %s", th.Alert, infragen.AlertRulesPath)
			continue
		}
		m := thresholdIn(r.Expr)
		if m == nil {
			t.Errorf("%s: no comparison in %q", th.Alert, r.Expr)
			continue
		}
		if v, err := strconv.ParseFloat(m[1], 64); err != nil || v != th.Value {
			t.Errorf("%s: rule compares against %s, table says %v", th.Alert, m[1], th.Value)
		}
		if th.Window > 0 {
			if w := "[" + telemetry.FormatDuration(th.Window) + "]"; !strings.Contains(r.Expr, w) {
				t.Errorf("%s: expr %q lacks the table's window %s", th.Alert, r.Expr, w)
			}
		}
		wantFor := ""
		if th.For > 0 {
			wantFor = telemetry.FormatDuration(th.For)
		}
		if r.Expr != th.Expr() || r.For != wantFor || r.Labels["severity"] != th.Severity {
			t.Errorf("%s: rule (%q, for %q, %q) differs from the table (%q, for %q, %q)",
				th.Alert, r.Expr, r.For, r.Labels["severity"], th.Expr(), wantFor, th.Severity)
		}
		if r.Annotations["runbook_url"] != th.RunbookLink() {
			t.Errorf("%s: runbook_url %q, want %q", th.Alert, r.Annotations["runbook_url"], th.RunbookLink())
		}
	}
}

// dashboard is the part of the Grafana JSON the tests read.
type dashboard struct {
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID          uint   `json:"id"`
		Type        string `json:"type"`
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Thresholds struct {
					Steps []struct {
						Color string   `json:"color"`
						Value *float64 `json:"value"`
					} `json:"steps"`
				} `json:"thresholds"`
				Custom struct {
					ThresholdsStyle struct {
						Mode string `json:"mode"`
					} `json:"thresholdsStyle"`
				} `json:"custom"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func TestDashboardThresholdsMatchTable(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(committed(t, infragen.DashboardPath), &d); err != nil {
		t.Fatal(err)
	}
	if d.UID != infragen.DashboardUID || d.SchemaVersion != infragen.DashboardSchemaVersion {
		t.Errorf("uid %q schemaVersion %d", d.UID, d.SchemaVersion)
	}
	keyOf, goalOf := map[uint]string{}, map[uint]float64{}
	for _, spec := range infragen.Panels() {
		keyOf[spec.ID], goalOf[spec.ID] = spec.Key, spec.Goal
	}
	drawn := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		var got []float64
		for _, s := range p.FieldConfig.Defaults.Thresholds.Steps[1:] {
			got = append(got, *s.Value)
		}
		var want []float64
		for _, th := range telemetry.Thresholds() {
			if th.Panel != "" && th.Panel == keyOf[p.ID] {
				want = append(want, th.Value)
				drawn[th.Alert] = true
			}
		}
		if g := goalOf[p.ID]; g != 0 {
			want = append(want, g)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("panel %d %q draws thresholds %v, the table %v", p.ID, p.Title, got, want)
		}
		if len(want) > 0 && p.FieldConfig.Defaults.Custom.ThresholdsStyle.Mode == "off" {
			t.Errorf("panel %d %q hides its thresholds", p.ID, p.Title)
		}
	}
	for _, th := range telemetry.Thresholds() {
		if th.Panel != "" && !drawn[th.Alert] {
			t.Errorf("%s: panel %q is not on the dashboard", th.Alert, th.Panel)
		}
	}
}

func TestDashboardShowsEveryMetric(t *testing.T) {
	var d dashboard
	if err := json.Unmarshal(committed(t, infragen.DashboardPath), &d); err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name+":"+v.Type)
	}
	if !slices.Equal(vars, []string{"datasource:datasource", "worker:query"}) {
		t.Errorf("template variables %v, want a datasource and a worker variable", vars)
	}
	var exprs strings.Builder
	ids := map[uint]bool{}
	for _, p := range d.Panels {
		if p.ID == 0 || ids[p.ID] {
			t.Errorf("panel %q: id %d is zero or repeated", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs.WriteString(tg.Expr + "\n")
			if strings.Contains(tg.Expr, "tolaria_") && !sweepQuery(tg.Expr) && !strings.Contains(tg.Expr, `worker=~"$worker"`) {
				t.Errorf("panel %q: query %q ignores the worker variable", p.Title, tg.Expr)
			}
		}
	}
	for _, name := range slices.Concat(telemetry.MetricNames(), telemetry.SweepMetricNames(), telemetry.BudgetMetricNames(), telemetry.RLMetricNames()) {
		if name != telemetry.MetricBuildInfo && !strings.Contains(exprs.String(), name) {
			t.Errorf("no panel shows %s", name)
		}
	}
}

// sweepQuery reports whether expr reads a coordinator's own metrics (a
// sweep's, its budget broker's, or a tolaria rl run's), which have no
// worker label for the worker variable to filter.
func sweepQuery(expr string) bool {
	for _, name := range slices.Concat(telemetry.SweepMetricNames(), telemetry.BudgetMetricNames(), telemetry.RLMetricNames()) {
		if strings.Contains(expr, name) {
			return true
		}
	}
	return false
}

func TestPromtoolTestsCoverEveryAlert(t *testing.T) {
	var file infragen.RuleTestFile
	if err := yaml.Unmarshal(committed(t, infragen.AlertRulesTestPath), &file); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, test := range file.Tests {
		for _, check := range test.AlertRuleTest {
			if len(check.ExpAlerts) > 0 {
				fires[check.Alertname] = true
			} else {
				silent[check.Alertname] = true
			}
		}
	}
	for _, th := range telemetry.Thresholds() {
		if !fires[th.Alert] || !silent[th.Alert] {
			t.Errorf("%s: promtool tests: fires %v, stays silent %v; want both", th.Alert, fires[th.Alert], silent[th.Alert])
		}
	}
}

func TestPrometheusConfig(t *testing.T) {
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(committed(t, "infra/prometheus/prometheus.yml"), &cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.RuleFiles, filepath.Base(infragen.AlertRulesPath)) {
		t.Errorf("prometheus.yml rule_files %v lacks alert_rules.yml", cfg.RuleFiles)
	}
	target := "127.0.0.1:" + strconv.Itoa(telemetry.DefaultMetricsPort)
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			found = found || (sc.JobName == telemetry.ScrapeJob && slices.Contains(st.Targets, target))
		}
	}
	if !found {
		t.Errorf("prometheus.yml does not scrape job %q at %s", telemetry.ScrapeJob, target)
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(committed(t, "infra/grafana/provisioning/datasources/prometheus.yml"), &ds); err != nil {
		t.Fatal(err)
	}
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("datasource provisioning = %+v, want one prometheus datasource", ds)
	}
	var dash struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal(committed(t, "infra/grafana/provisioning/dashboards/tolaria.yml"), &dash); err != nil {
		t.Fatal(err)
	}
	if dash.APIVersion != 1 || len(dash.Providers) != 1 || dash.Providers[0].Type != "file" || dash.Providers[0].Options.Path == "" {
		t.Errorf("dashboard provisioning = %+v, want one file provider with a path", dash)
	}
}

// headingAnchor is GitHub's anchor for a Markdown heading.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestRunbookHasEveryAlert checks that every runbook_url anchor is a heading
// of docs/runbook.md and that its section quotes the alert's expression, so
// the runbook changes when a threshold does.
func TestRunbookHasEveryAlert(t *testing.T) {
	sections := map[string]string{}
	anchor := ""
	for _, line := range strings.Split(string(committed(t, "docs/runbook.md")), "\n") {
		if strings.HasPrefix(line, "#") {
			anchor = headingAnchor(strings.TrimLeft(line, "#"))
			sections[anchor] = ""
			continue
		}
		sections[anchor] += line + "\n"
	}
	for _, th := range telemetry.Thresholds() {
		section, ok := sections[th.Anchor]
		if !ok {
			t.Errorf("%s: docs/runbook.md has no heading with anchor #%s", th.Alert, th.Anchor)
			continue
		}
		if !strings.Contains(section, "`"+th.Expr()+"`") {
			t.Errorf("%s: the runbook section #%s does not quote the expression `%s`", th.Alert, th.Anchor, th.Expr())
		}
	}
}

// TestGeneratedRulesPassPromtool runs promtool on freshly generated files, so
// a generator change is checked before it is committed.
func TestGeneratedRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed; scripts/check-infra.sh installs it")
	}
	dir := t.TempDir()
	if err := run([]string{"-out", dir}, io.Discard); err != nil {
		t.Fatal(err)
	}
	prom := filepath.Join(dir, "infra", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", filepath.Join(prom, "alert_rules.yml")},
		{"test", "rules", filepath.Join(prom, "alert_rules_test.yml")},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = prom
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

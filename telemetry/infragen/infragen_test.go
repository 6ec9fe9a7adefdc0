package infragen

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/telemetry"
)

func TestFilesAreDeterministic(t *testing.T) {
	first, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	second, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for i := range first {
		if first[i].Path != second[i].Path || !bytes.Equal(first[i].Data, second[i].Data) {
			t.Errorf("%s: two generations differ", first[i].Path)
		}
	}
}

func TestAlertRulesParse(t *testing.T) {
	data, err := AlertRules()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "# Code generated") {
		t.Error("alert rules lack the generated-file header")
	}
	var file RuleFile
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Groups) != 1 || len(file.Groups[0].Rules) != len(telemetry.Thresholds()) {
		t.Fatalf("groups = %+v", file.Groups)
	}
	for i, th := range telemetry.Thresholds() {
		r := file.Groups[0].Rules[i]
		if r.Alert != th.Alert || r.Expr != th.Expr() || r.Annotations["runbook_url"] != th.RunbookLink() {
			t.Errorf("rule %d = %+v, want %s", i, r, th.Alert)
		}
	}
}

func TestDashboardPanels(t *testing.T) {
	data, err := Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		ID            *int   `json:"id"`
		Panels        []struct {
			ID   uint   `json:"id"`
			Type string `json:"type"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID != DashboardUID || d.SchemaVersion != DashboardSchemaVersion || d.ID != nil {
		t.Errorf("uid %q schemaVersion %d id %v; want %q, %d and no id", d.UID, d.SchemaVersion, d.ID, DashboardUID, DashboardSchemaVersion)
	}
	// A titled row is a row panel followed by its panels.
	type want struct {
		id  uint
		typ string
	}
	var wants []want
	for _, row := range Rows() {
		if row.Title != "" {
			wants = append(wants, want{row.ID, "row"})
		}
		for _, p := range row.Panels {
			wants = append(wants, want{p.ID, "timeseries"})
		}
	}
	if len(d.Panels) != len(wants) {
		t.Fatalf("%d panels, want %d", len(d.Panels), len(wants))
	}
	ids := map[uint]bool{}
	for i, p := range d.Panels {
		if p.ID != wants[i].id || p.Type != wants[i].typ {
			t.Errorf("panel %d: id %d type %q, want id %d %s", i, p.ID, p.Type, wants[i].id, wants[i].typ)
		}
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
	}
}

// TestSweepRowsDrawTheirMetrics: the Sweep row has a panel for each of
// the sweep's metric families, the budget row one for each of the
// broker's, and the reinforcement-learning row one for each of tolaria
// rl's.
func TestSweepRowsDrawTheirMetrics(t *testing.T) {
	for title, names := range map[string][]string{
		SweepRowTitle:  telemetry.SweepMetricNames(),
		BudgetRowTitle: telemetry.BudgetMetricNames(),
		RLRowTitle:     telemetry.RLMetricNames(),
	} {
		var row *RowSpec
		for _, r := range Rows() {
			if r.Title == title {
				row = &r
			}
		}
		if row == nil {
			t.Errorf("no row titled %q", title)
			continue
		}
		for _, name := range names {
			found := false
			for _, p := range row.Panels {
				for _, q := range p.Queries {
					found = found || strings.Contains(q.Expr, name)
				}
			}
			if !found {
				t.Errorf("the %s row draws no %s", title, name)
			}
		}
	}
}

func TestEveryKeyedThresholdHasAPanel(t *testing.T) {
	keys := map[string]bool{}
	for _, p := range Panels() {
		if p.Key != "" {
			keys[p.Key] = true
			if len(PanelThresholds(p.Key)) == 0 {
				t.Errorf("panel %q: key %q draws no threshold", p.Title, p.Key)
			}
		}
	}
	for _, th := range telemetry.Thresholds() {
		if th.Panel != "" && !keys[th.Panel] {
			t.Errorf("%s: panel %q is not on the dashboard", th.Alert, th.Panel)
		}
	}
}

func TestRenderLabels(t *testing.T) {
	labels := map[string]string{"worker": "3", "device": "cuda:0"}
	got, err := renderLabels("on {{ $labels.device }} (worker {{ $labels.worker }})", labels)
	if err != nil || got != "on cuda:0 (worker 3)" {
		t.Errorf("renderLabels = %q, %v", got, err)
	}
	if _, err := renderLabels("{{ $value }}", labels); err == nil {
		t.Error("renderLabels accepted a template it cannot render")
	}
}

func TestRuleTestsCoverEveryAlert(t *testing.T) {
	data, err := AlertRulesTest()
	if err != nil {
		t.Fatal(err)
	}
	var file RuleTestFile
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, test := range file.Tests {
		for _, check := range test.AlertRuleTest {
			if len(check.ExpAlerts) > 0 {
				fires[check.Alertname]++
			} else {
				silent[check.Alertname]++
			}
		}
	}
	for _, th := range telemetry.Thresholds() {
		if fires[th.Alert] == 0 || silent[th.Alert] == 0 {
			t.Errorf("%s: %d firing and %d silent tests; want both", th.Alert, fires[th.Alert], silent[th.Alert])
		}
	}
}

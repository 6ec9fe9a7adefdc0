package infragen

import (
	"bytes"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/telemetry"
)

// RuleGroupName is the name of the one rule group in alert_rules.yml.
const RuleGroupName = "tolaria"

// RuleFile is the schema of a Prometheus rule file, as far as tolaria uses it.
type RuleFile struct {
	Groups []RuleGroup `yaml:"groups"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is one alerting rule.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// RuleFor returns the alerting rule of one threshold.
func RuleFor(t telemetry.Threshold) Rule {
	r := Rule{
		Alert:  t.Alert,
		Expr:   t.Expr(),
		Labels: map[string]string{"severity": t.Severity},
		Annotations: map[string]string{
			"summary":     t.Summary,
			"description": t.Description,
			"runbook_url": t.RunbookLink(),
		},
	}
	if t.For > 0 {
		r.For = telemetry.FormatDuration(t.For)
	}
	return r
}

// AlertRules generates infra/prometheus/alert_rules.yml.
func AlertRules() ([]byte, error) {
	group := RuleGroup{Name: RuleGroupName}
	for _, t := range telemetry.Thresholds() {
		group.Rules = append(group.Rules, RuleFor(t))
	}
	return marshalYAML(RuleFile{Groups: []RuleGroup{group}})
}

func marshalYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

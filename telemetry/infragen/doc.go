// Package infragen generates the committed monitoring files from
// telemetry.Thresholds: the Prometheus alert rules and their promtool unit
// tests, and the Grafana dashboard. cmd/tolaria-gen writes them; its tests
// fail when the committed files differ from what this package generates.
//
// It lives apart from telemetry so that binaries serving metrics do not link
// the Grafana SDK.
package infragen

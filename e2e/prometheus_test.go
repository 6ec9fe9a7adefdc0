package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/telemetry/infragen"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// servingAt waits until the process writing stderr logs where it serves
// /metrics and returns that host:port. Processes are started with
// --metrics-addr 127.0.0.1:0 so that the kernel picks a port nothing else
// holds: a port found free and released earlier can be taken by any
// other process on the machine before tolaria binds it.
func servingAt(t *testing.T, stderr *lockedBuffer) string {
	t.Helper()
	var addr string
	waitFor(t, "the address /metrics is served at", func() bool {
		m := servingRE.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return addr
}

var servingRE = regexp.MustCompile(`msg="serving metrics" url=http://([0-9.:]+)/metrics`)

// prometheus is a real Prometheus started with the repository's config,
// adapted to scrape the test's port every second.
type prometheus struct {
	t    *testing.T
	base string
}

func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("TOLARIA_E2E_REQUIRE_PROMETHEUS") != "" {
			t.Fatal("prometheus is not installed: run scripts/install-deps.sh test")
		}
		t.Skip("prometheus is not installed (scripts/install-deps.sh test installs it)")
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "infra/prometheus/prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(raw)
	for old, repl := range map[string]string{
		"scrape_interval: 15s":     "scrape_interval: 1s",
		"evaluation_interval: 15s": "evaluation_interval: 1s",
		"127.0.0.1:9464":           target,
		"- alert_rules.yml":        "- " + filepath.Join(repoRoot(), "infra/prometheus/alert_rules.yml"),
	} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("infra/prometheus/prometheus.yml no longer contains %q; adapt this test", old)
		}
		cfg = strings.ReplaceAll(cfg, old, repl)
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Prometheus cannot be told to pick its own port and say which, so a
	// free one is chosen here; another process may take it first, and then
	// Prometheus exits and is started again on another.
	for attempt := 1; ; attempt++ {
		if p := launchPrometheus(t, bin, cfgPath, dir, attempt); p != nil {
			return p
		}
		if attempt == 3 {
			log, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("Prometheus exited before it was ready, three times:\n%s", log)
		}
	}
}

// launchPrometheus starts Prometheus on a free port and waits until it is
// ready; it returns nil when Prometheus exits first.
func launchPrometheus(t *testing.T, bin, cfgPath, dir string, attempt int) *prometheus {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprintf("data%d", attempt)),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
	})
	p := &prometheus{t: t, base: "http://" + addr}
	exited := false
	waitFor(t, "Prometheus to be ready", func() bool {
		select {
		case <-done:
			exited = true
			return true
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if exited {
		return nil
	}
	return p
}

func (p *prometheus) get(path string, v any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		p.t.Fatalf("GET %s: %s: %s", path, resp.Status, raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		p.t.Fatalf("GET %s: %v", path, err)
	}
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) float() float64 {
	f, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
	return f
}

func (p *prometheus) query(expr string) []sample {
	p.t.Helper()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []sample `json:"result"`
		} `json:"data"`
	}
	p.get("/api/v1/query?query="+url.QueryEscape(expr), &r)
	return r.Data.Result
}

// targets says, for each scrape target, its health and last error.
func (p *prometheus) targets() string {
	var r struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string `json:"scrapeUrl"`
				Health    string `json:"health"`
				LastError string `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	p.get("/api/v1/targets", &r)
	var b strings.Builder
	for _, tg := range r.Data.ActiveTargets {
		fmt.Fprintf(&b, "%s %s %q; ", tg.ScrapeURL, tg.Health, tg.LastError)
	}
	return b.String()
}

// startTraining starts a long synthetic job serving metrics on a port of
// its choosing, in a worker process, and returns that host:port and a
// function that interrupts it.
func startTraining(t *testing.T, extra ...string) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"train", "--device", "cpu", "--isolate", "--enable-graphs", "--dataset", "synthetic",
		"--synthetic-size", "4096", "--epochs", "1000", "--hidden", "64,32", "--log-every", "20",
		"--metrics-addr", "127.0.0.1:0", "--run-dir", filepath.Join(dir, "run")}, extra...)
	cmd, stderr := startRun(t, dir, args...)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("tolaria did not stop on SIGINT:\n%s", stderr)
		}
	}
	t.Cleanup(stop)
	return servingAt(t, stderr), stop
}

func TestPrometheusScrapesEverything(t *testing.T) {
	target, stop := startTraining(t)
	prom := startPrometheus(t, target)

	// Enough scrapes for rates over [1m] and an epoch for accuracy.
	waitFor(t, "scrapes with training progress", func() bool {
		r := prom.query(`count_over_time(tolaria_train_samples_total[1m])`)
		return len(r) > 0 && r[0].float() >= 6 && len(prom.query(`tolaria_eval_accuracy`)) > 0 &&
			len(prom.query(`tolaria_train_loss`)) > 0
	})

	// A healthy run raises no fallback and stays up. (Latency alerts are not
	// checked here: on a loaded CI machine the CPU device's step time is
	// not a health signal; promtool's rule tests cover their silence.)
	for _, name := range []string{"TolariaGraphFallback", "TolariaTargetDown"} {
		if prom.alertActive(name) {
			t.Errorf("%s is active during a healthy run", name)
		}
	}

	for _, name := range telemetry.MetricNames() {
		r := prom.query(fmt.Sprintf(`{__name__=~"%s(_bucket|_sum|_count)?"}`, name))
		if len(r) == 0 {
			t.Errorf("metric %s is missing from Prometheus", name)
			continue
		}
		for _, s := range r {
			if strings.HasPrefix(name, "tolaria_") && name != telemetry.MetricBuildInfo &&
				(s.Metric[telemetry.LabelWorker] == "" || s.Metric[telemetry.LabelDevice] != "cpu") {
				t.Errorf("metric %s lacks the worker and device labels: %v", name, s.Metric)
				break
			}
		}
	}
	// Series created at zero prove nothing: what a graphs run does must
	// have moved. Captures happen before the first scrape; their totals
	// are what Prometheus sees.
	for expr, want := range map[string]func(float64) bool{
		telemetry.MetricGraphEnabled:                          func(v float64) bool { return v == 1 },
		"sum(" + telemetry.MetricCapturesTotal + ")":          func(v float64) bool { return v > 0 },
		"sum(" + telemetry.MetricCaptureSeconds + "_count)":   func(v float64) bool { return v > 0 },
		"sum(" + telemetry.MetricReplaysTotal + ")":           func(v float64) bool { return v > 0 },
		"sum(" + telemetry.MetricReplaySeconds + "_count)":    func(v float64) bool { return v > 0 },
		"sum(" + telemetry.MetricStageCopySeconds + "_count)": func(v float64) bool { return v > 0 },
		"sum(" + telemetry.MetricStepSeconds + "_count)":      func(v float64) bool { return v > 0 },
		"sum(" + telemetry.MetricSamplesTotal + ")":           func(v float64) bool { return v > 0 },
		"sum(" + telemetry.MetricFallbackTotal + ")":          func(v float64) bool { return v == 0 },
		telemetry.MetricTrainEpoch:                            func(v float64) bool { return v >= 1 },
		telemetry.MetricEvalAccuracy:                          func(v float64) bool { return v > 0 && v <= 1 },
		telemetry.MetricPoolReservedBytes:                     func(v float64) bool { return v > 0 },
		telemetry.MetricProcessFinished:                       func(v float64) bool { return v == 0 },
	} {
		r := prom.query(expr)
		if len(r) == 0 || !want(r[0].float()) {
			t.Errorf("%s = %v, not what a healthy graphs run reports", expr, r)
		}
	}
	// The labels that split families: every fallback reason, and the
	// device-memory kinds.
	labelValues := func(metric, label string) map[string]bool {
		got := map[string]bool{}
		for _, s := range prom.query(metric) {
			got[s.Metric[label]] = true
		}
		return got
	}
	for _, reason := range telemetry.FallbackReasons() {
		if !labelValues(telemetry.MetricFallbackTotal, telemetry.LabelReason)[reason] {
			t.Errorf("%s has no series with %s=%q", telemetry.MetricFallbackTotal, telemetry.LabelReason, reason)
		}
	}
	for _, kind := range []string{"in_use", "peak", "limit", "pinned"} {
		if !labelValues(telemetry.MetricDeviceMemoryBytes, telemetry.LabelKind)[kind] {
			t.Errorf("%s has no series with %s=%q", telemetry.MetricDeviceMemoryBytes, telemetry.LabelKind, kind)
		}
	}
	if !labelValues(telemetry.MetricCapturesTotal, telemetry.LabelPooled)["true"] {
		t.Errorf("%s has no pooled=\"true\" series: the graph pool served no capture", telemetry.MetricCapturesTotal)
	}

	var rules struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, Type string
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	prom.get("/api/v1/rules", &rules)
	loaded := 0
	for _, g := range rules.Data.Groups {
		for _, r := range g.Rules {
			loaded++
			if r.Health != "ok" {
				t.Errorf("rule %s health %q", r.Name, r.Health)
			}
		}
	}
	if loaded != len(telemetry.Thresholds()) {
		t.Errorf("Prometheus loaded %d rules, the threshold table has %d", loaded, len(telemetry.Thresholds()))
	}

	for _, pq := range dashboardQueries(t) {
		if pq.row == infragen.SweepRowTitle || pq.row == infragen.BudgetRowTitle {
			continue // a sweep's own metrics: TestPrometheusScrapesASweep
		}
		if pq.row == infragen.RLRowTitle {
			continue // tolaria rl's: TestPrometheusScrapesRL
		}
		expr := strings.NewReplacer(`$worker`, `.*`, `${worker}`, `.*`).Replace(pq.expr)
		r := prom.query(expr)
		if len(r) == 0 {
			t.Errorf("panel %q: query returned no data: %s", pq.title, expr)
			continue
		}
		if math.IsNaN(r[0].float()) {
			t.Errorf("panel %q: query returned NaN: %s", pq.title, expr)
		}
	}
	stop()
}

// A run that ends says so before its target goes, and TolariaTargetDown's
// expression, on a real Prometheus (whose failed scrapes make the target's
// series stale), leaves that target out while its up is 0.
func TestFinishedTargetStaysOutOfTargetDown(t *testing.T) {
	dir := t.TempDir()
	cmd, stderr := startRun(t, dir, "train", "--device", "cpu", "--isolate", "--dataset", "synthetic", "--synthetic-size", "2048",
		"--epochs", "2", "--hidden", "32", "--metrics-addr", "127.0.0.1:0", "--metrics-linger", "60s", "--run-dir", filepath.Join(dir, "run"))
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	prom := startPrometheus(t, servingAt(t, stderr))
	waitFor(t, "the finished run scraped", func() bool {
		r := prom.query(telemetry.MetricProcessFinished)
		return len(r) == 1 && r[0].float() == 1
	})
	// The linger is over at a signal: the target goes.
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("tolaria did not exit on SIGINT while lingering:\n%s", stderr)
	}
	waitFor(t, "the target scraped as down", func() bool { return len(prom.query(`up{job="tolaria"} == 0`)) == 1 })
	var expr string
	for _, th := range telemetry.Thresholds() {
		if th.Alert == "TolariaTargetDown" {
			expr = th.Expr()
		}
	}
	if r := prom.query(expr); len(r) != 0 {
		t.Errorf("TolariaTargetDown's expression %s matches the finished target: %v", expr, r)
	}
	if r := prom.query(`up{job="tolaria"} == 0 unless on (job, instance) ` + telemetry.MetricProcessFinished + ` == 1`); len(r) != 1 {
		t.Errorf("the instant value of %s is still there after the target went down (%v): the check above proves nothing", telemetry.MetricProcessFinished, r)
	}
}

// panelQuery is a query of a dashboard panel, and the title of the row the
// panel is in ("" for the first, untitled one).
type panelQuery struct{ row, title, expr string }

func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "infra/grafana/dashboards/tolaria.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var out []panelQuery
	row := ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title
			continue
		}
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out = append(out, panelQuery{row, p.Title, tg.Expr})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

func TestSlowStageCopyDrivesTheAlert(t *testing.T) {
	target, _ := startTraining(t, "--slow-stage-copy-ms", "5")
	prom := startPrometheus(t, target)
	waitFor(t, "TolariaStageCopySlow pending or firing", func() bool { return prom.alertActive("TolariaStageCopySlow") })
}

// alertActive reports whether the alert is pending or firing.
func (p *prometheus) alertActive(name string) bool {
	var a struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	p.get("/api/v1/alerts", &a)
	for _, al := range a.Data.Alerts {
		if al.Labels["alertname"] == name && (al.State == "pending" || al.State == "firing") {
			return true
		}
	}
	return false
}

// metricsSweep is a trial that crashes at its third step, and again on its
// retry (the fault counts the steps of each worker, and no checkpoint is
// written that early), and one that trains until the sweep is interrupted.
const metricsSweep = `
base:
  dataset: synthetic
  synthetic_size: 4096
  epochs: 1000
  batch_size: 32
  log_every: 20
  enable_graphs: true
  model: {hidden: [64, 32]}
trials:
  - {name: crash}
  - {name: long}
`

// TestPrometheusScrapesASweep: a real Prometheus scrapes a sweep's
// coordinator and sees its trials by state, the crashed trial's two
// failures (reason exit) and one retry, the live worker's heartbeat age,
// every training family labelled with its trial; the failure alert fires;
// and every dashboard query, the Sweep row's included, returns data.
func TestPrometheusScrapesASweep(t *testing.T) {
	dir := t.TempDir()
	stderr, done := startInterruptible(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=3,exit=7,run=crash"},
		"sweep", writeSweepFile(t, dir, metricsSweep), "--device", "cpu", "--parallel", "2", "--retries", "1",
		"--sweep-dir", filepath.Join(dir, "sweep"), "--metrics-addr", "127.0.0.1:0", "--metrics-linger", "0")
	prom := startPrometheus(t, servingAt(t, stderr))

	one := func(expr string) (float64, bool) {
		r := prom.query(expr)
		if len(r) != 1 {
			return 0, false
		}
		return r[0].float(), true
	}
	// Enough scrapes for rates over [1m], as for a single run, and an epoch
	// for accuracy. On a timeout or an early exit the test says which part
	// was missing and what the sweep printed.
	var state string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		failed, ok := one(telemetry.MetricSweepTrials + `{state="failed"}`)
		scrapes, _ := one(`max(count_over_time(` + telemetry.MetricSamplesTotal + `[1m]))`)
		accuracy := len(prom.query(telemetry.MetricEvalAccuracy))
		if ok && failed == 1 && scrapes >= 6 && accuracy > 0 {
			break
		}
		state = fmt.Sprintf("failed trials %v (series: %v), scrapes of samples %v (want >= 6), accuracy series %d",
			failed, ok, scrapes, accuracy)
		select {
		case <-done:
			t.Fatalf("tolaria sweep exited before the crashed trial failed and the long one trained: %s\n%s", state, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the crashed trial failed and the long one training, scraped: %s\nprometheus targets: %s\n%s",
				state, prom.targets(), stderr)
		}
	}
	// Rules are evaluated every second; give it a few.
	for deadline := time.Now().Add(30 * time.Second); !prom.alertActive("TolariaSweepTrialFailed") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}

	for expr, want := range map[string]float64{
		telemetry.MetricSweepTrials + `{state="running"}`:                  1,
		telemetry.MetricSweepTrials + `{state="failed"}`:                   1,
		telemetry.MetricSweepTrials + `{state="pending"}`:                  0,
		telemetry.MetricSweepTrials + `{state="succeeded"}`:                0,
		telemetry.MetricSweepFailuresTotal + `{reason="exit"}`:             2,
		"sum(" + telemetry.MetricSweepFailuresTotal + ")":                  2,
		telemetry.MetricSweepRetriesTotal:                                  1,
		"count(" + telemetry.MetricWorkerHeartbeatAge + ")":                1,
		"count(" + telemetry.MetricSweepFailuresTotal + `{reason="hung"})`: 1, // there at zero
	} {
		if got, ok := one(expr); !ok || got != want {
			t.Errorf("%s = %v (one series: %v), want %v", expr, got, ok, want)
		}
	}
	if age, ok := one(telemetry.MetricWorkerHeartbeatAge + `{trial="long"}`); !ok || age < 0 || age > 30 {
		t.Errorf("the long trial's heartbeat age %v (one series: %v), want at most the 30s heartbeat timeout", age, ok)
	}
	for _, name := range telemetry.MetricNames() {
		if name == telemetry.MetricBuildInfo {
			continue
		}
		if r := prom.query(fmt.Sprintf(`{__name__=~"%s(_bucket|_sum|_count)?", trial="long"}`, name)); len(r) == 0 {
			t.Errorf("metric %s has no series with trial=\"long\"", name)
		}
		for _, s := range prom.query(fmt.Sprintf(`{__name__=~"%s(_bucket|_sum|_count)?"}`, name)) {
			if s.Metric[telemetry.LabelTrial] == "" {
				t.Errorf("metric %s has a series without a trial label: %v", name, s.Metric)
				break
			}
		}
	}

	var alerts struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	prom.get("/api/v1/alerts", &alerts)
	fired := false
	for _, a := range alerts.Data.Alerts {
		if a.Labels["alertname"] == "TolariaSweepTrialFailed" {
			fired = true
			if a.Labels[telemetry.LabelReason] != "exit" || a.State != "firing" {
				t.Errorf("TolariaSweepTrialFailed: labels %v, state %s; want reason exit, firing", a.Labels, a.State)
			}
		}
	}
	if !fired {
		t.Error("TolariaSweepTrialFailed is not active")
	}

	sweepRow, budgetRow := 0, 0
	for _, pq := range dashboardQueries(t) {
		if pq.row == infragen.RLRowTitle {
			continue // tolaria rl's: TestPrometheusScrapesRL
		}
		sweepRow += boolInt(pq.row == infragen.SweepRowTitle)
		budgetRow += boolInt(pq.row == infragen.BudgetRowTitle)
		expr := strings.NewReplacer(`$worker`, `.*`, `${worker}`, `.*`).Replace(pq.expr)
		r := prom.query(expr)
		if len(r) == 0 {
			t.Errorf("panel %q: query returned no data during a sweep: %s", pq.title, expr)
			continue
		}
		// The crashed trial's rates are NaN quantiles (nothing moves);
		// the training one's must not be.
		number := false
		for _, s := range r {
			number = number || !math.IsNaN(s.float())
		}
		if !number {
			t.Errorf("panel %q: query returned only NaN during a sweep: %s", pq.title, expr)
		}
	}
	if sweepRow == 0 || budgetRow == 0 {
		t.Errorf("the dashboard lacks the %s row or the %s row", infragen.SweepRowTitle, infragen.BudgetRowTitle)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startInterruptible starts tolaria with args in dir (env added to a clean
// environment) and, when the test ends, interrupts it and waits for it,
// killing it after 30 s; done is closed when it has exited.
func startInterruptible(t *testing.T, dir string, env []string, args ...string) (stderr *lockedBuffer, done <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "tolaria"), args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	stderr = new(lockedBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("tolaria %s did not stop on SIGINT:\n%s", args[0], stderr)
		}
	})
	return stderr, exited
}

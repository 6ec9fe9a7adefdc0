package sweep

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/worker"
)

// scrape is what a sweep's registry holds now: each family's series as
// label sets (name=value, sorted, joined by commas) with their values.
type scrape map[string]map[string]float64

func scrapeSweep(t *testing.T, s *Run) scrape {
	t.Helper()
	mfs, err := s.families.reg.Registry().Gather()
	if err != nil {
		t.Errorf("Gather: %v", err)
		return nil
	}
	out := scrape{}
	for _, mf := range mfs {
		series := map[string]float64{}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			slices.Sort(ls)
			series[strings.Join(ls, ",")] = sampleValue(m)
		}
		out[mf.GetName()] = series
	}
	return out
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// has reports whether family holds a series whose labels include label.
func (sc scrape) has(family, label string) bool {
	for ls := range sc[family] {
		if slices.Contains(strings.Split(ls, ","), label) {
			return true
		}
	}
	return false
}

// states is the trials-by-state gauge.
func (sc scrape) states() map[string]float64 {
	out := map[string]float64{}
	for _, st := range trialStates() {
		out[st] = sc[telemetry.MetricSweepTrials]["state="+st]
	}
	return out
}

// slowSweep is three trials of a second or more each: long enough for a
// worker's silence to show in its heartbeat age were its messages not
// counted.
const slowSweep = `
base:
  dataset: synthetic
  synthetic_size: 4096
  epochs: 3
  batch_size: 32
  log_every: 4
  model: {hidden: [32]}
trials:
  - {name: a, lr: 0.001}
  - {name: b, lr: 0.003}
  - {name: c, lr: 0.01}
`

// TestSweepMetricsFollowTheTrials: one trial at a time, the trials gauge
// moves as each starts and ends; a training trial's worker has a heartbeat
// age and its training series carry its name; once it has ended, its
// heartbeat age and last-step time are gone.
func TestSweepMetricsFollowTheTrials(t *testing.T) {
	cfg := sweepConfig(t, slowSweep)
	n := len(cfg.Sweep.Trials)
	cfg.Parallel, cfg.MetricsAddr = 1, "127.0.0.1:0"
	var (
		s         *Run
		mu        sync.Mutex
		checked   = map[string]bool{}
		started   = map[string]time.Time{}
		lastAge   = map[string]float64{} // at the trial's last progress report
		lastSince = map[string]float64{} // the trial's time then
		problems  []string
	)
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	cfg.Report = func(u TrialUpdate) {
		mu.Lock()
		defer mu.Unlock()
		sc := scrapeSweep(t, s)
		st := sc.states()
		trial := telemetry.LabelTrial + "=" + u.Trial
		if u.State == TrialRunning && u.Progress == nil {
			started[u.Trial] = time.Now()
		}
		if age, ok := sc[telemetry.MetricWorkerHeartbeatAge][trial]; u.Progress != nil && ok {
			lastAge[u.Trial], lastSince[u.Trial] = age, time.Since(started[u.Trial]).Seconds()
		}
		switch {
		case u.Progress != nil && !checked[u.Trial+" running"]:
			checked[u.Trial+" running"] = true
			want := map[string]float64{"pending": float64(n - 1 - u.Index), "running": 1, "succeeded": float64(u.Index), "failed": 0, "interrupted": 0}
			if !maps.Equal(st, want) {
				fail("trial %s training: trials by state %v, want %v", u.Trial, st, want)
			}
			if age, ok := sc[telemetry.MetricWorkerHeartbeatAge][trial]; !ok || age < 0 || age > 30 {
				fail("trial %s training: heartbeat age %v (present %v)", u.Trial, age, ok)
			}
			if n := len(sc[telemetry.MetricWorkerHeartbeatAge]); n != 1 {
				fail("trial %s training: %d heartbeat ages, want its worker's alone", u.Trial, n)
			}
			if !sc.has(telemetry.MetricSamplesTotal, trial) || !sc.has(telemetry.MetricLastStepTimestamp, trial) {
				fail("trial %s training: its training series do not carry %s", u.Trial, trial)
			}
		case u.Result != nil:
			checked[u.Trial+" ended"] = true
			want := map[string]float64{"pending": float64(n - 1 - u.Index), "running": 0, "succeeded": float64(u.Index + 1), "failed": 0, "interrupted": 0}
			if !maps.Equal(st, want) {
				fail("trial %s ended: trials by state %v, want %v", u.Trial, st, want)
			}
			if sc.has(telemetry.MetricWorkerHeartbeatAge, trial) {
				fail("trial %s ended: its worker's heartbeat age is still there", u.Trial)
			}
			if sc.has(telemetry.MetricLastStepTimestamp, trial) {
				fail("trial %s ended: its last-step time is still there for the stall alert", u.Trial)
			}
			if !sc.has(telemetry.MetricEvalAccuracy, trial) {
				fail("trial %s ended: its final accuracy is gone", u.Trial)
			}
		}
	}
	var err error
	if s, err = Prepare(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background())
	if err != nil || res.Counts["succeeded"] != n {
		t.Fatalf("counts %v, %v", res.Counts, err)
	}
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	for _, tr := range []string{"a", "b", "c"} {
		if !checked[tr+" running"] || !checked[tr+" ended"] {
			t.Errorf("trial %s: checked while training %v, after its end %v", tr, checked[tr+" running"], checked[tr+" ended"])
		}
		// A progress report is a message: the worker was heard from just
		// now, however long it has run, not when it started.
		if lastAge[tr] >= lastSince[tr]/2 {
			t.Errorf("trial %s: heartbeat age %.4fs at its last progress report, %.4fs into the trial; want about 0", tr, lastAge[tr], lastSince[tr])
		}
		t.Logf("trial %s: heartbeat age at its last progress report %.4fs, %.4fs into the trial", tr, lastAge[tr], lastSince[tr])
	}
	mu.Unlock()
	// The same over HTTP, from the server the trials shared.
	body := get(t, s.MetricsURL())
	for _, line := range []string{fmt.Sprintf(`tolaria_sweep_trials{state="succeeded"} %d`, n), `tolaria_sweep_trials{state="running"} 0`,
		`tolaria_sweep_trial_retries_total 0`, `tolaria_sweep_trial_failures_total{reason="hung"} 0`} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// TestSweepMetricsCountAHungTrial: a trial whose worker hangs, and hangs
// again on its retry, counts two failures with reason hung (and no other),
// one retry, and ends failed; no heartbeat age outlives the workers.
func TestSweepMetricsCountAHungTrial(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel, cfg.Retries, cfg.MetricsAddr = 2, 1, "127.0.0.1:0"
	cfg.HeartbeatTimeout = 2 * time.Second
	t.Setenv(jobserver.FaultEnv, "step=2,hang,run=a")
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(context.Background())
	if err != nil || res.Counts["failed"] != 1 || res.Counts["succeeded"] != 3 {
		t.Fatalf("counts %v, %v", res.Counts, err)
	}
	sc := scrapeSweep(t, s)
	for _, reason := range append(failureReasons(), telemetry.SweepFailureOther) {
		want := 0.0
		if reason == worker.ReasonHung {
			want = 2
		}
		got, ok := sc[telemetry.MetricSweepFailuresTotal][telemetry.LabelReason+"="+reason]
		if !ok || got != want {
			t.Errorf("failures{reason=%q} = %v (present %v), want %v", reason, got, ok, want)
		}
	}
	if got := sc[telemetry.MetricSweepRetriesTotal][""]; got != 1 {
		t.Errorf("retries = %v, want 1", got)
	}
	if want := map[string]float64{"pending": 0, "running": 0, "succeeded": 3, "failed": 1, "interrupted": 0}; !maps.Equal(sc.states(), want) {
		t.Errorf("trials by state %v, want %v", sc.states(), want)
	}
	if n := len(sc[telemetry.MetricWorkerHeartbeatAge]); n != 0 {
		t.Errorf("%d heartbeat ages after every worker ended: %v", n, sc[telemetry.MetricWorkerHeartbeatAge])
	}
}

func TestSweepMetricsAddressIsChecked(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.MetricsAddr = "127.0.0.1:http"
	if _, err := Prepare(context.Background(), cfg); !errors.Is(err, refusal.ErrConfig) {
		t.Fatalf("a malformed metrics address: %v, want refusal.ErrConfig", err)
	}
}

func TestFailureReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&train.WorkerFailure{Err: &worker.ProcessError{Reason: worker.ReasonHung}}, worker.ReasonHung},
		{fmt.Errorf("run: %w", &worker.ProcessError{Reason: worker.ReasonCrashed}), worker.ReasonCrashed},
		{&train.WorkerFailure{Err: &worker.Error{Kind: worker.KindNonFinite, Message: "loss is NaN"}}, worker.KindNonFinite},
		{&worker.NoAnswerError{Path: "w"}, failureNoAnswer},
		{refusal.Config(errors.New("run directory refused")), telemetry.SweepFailureOther},
	}
	for _, tt := range tests {
		got := failureReason(tt.err)
		if got != tt.want {
			t.Errorf("failureReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
		if got != telemetry.SweepFailureOther && !slices.Contains(failureReasons(), got) {
			t.Errorf("failureReason(%v) = %q, not one of failureReasons", tt.err, got)
		}
	}
}

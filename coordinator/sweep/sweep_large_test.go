package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestSweepWritesTrialConfigsAsTrialsStart: a prepared sweep holds no
// trial's configuration yet; each is written as its trial starts, so a
// trial running one at a time finds its own and not a later trial's.
func TestSweepWritesTrialConfigsAsTrialsStart(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel = 1
	configs := filepath.Join(cfg.Dir, TrialConfigDir)
	var once sync.Once
	cfg.Report = func(u TrialUpdate) {
		if u.Trial != "a" || u.Progress == nil {
			return
		}
		once.Do(func() {
			if _, err := os.Stat(filepath.Join(configs, "a.yaml")); err != nil {
				t.Errorf("trial a runs without its configuration: %v", err)
			}
			if _, err := os.Stat(filepath.Join(configs, "d.yaml")); err == nil {
				t.Error("trial d's configuration was written before it started")
			}
		})
	}
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if entries, err := os.ReadDir(configs); err != nil || len(entries) != 0 {
		t.Fatalf("a prepared sweep's %s: %d entries, %v; want none", TrialConfigDir, len(entries), err)
	}
	if _, err := s.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tr := range cfg.Sweep.Trials {
		if _, err := os.Stat(filepath.Join(configs, tr.Name+".yaml")); err != nil {
			t.Errorf("trial %s ran and has no configuration: %v", tr.Name, err)
		}
	}
}

// TestSweepRewritesResultsAtItsPace: the results files are not rewritten
// after every trial's end but at most as often as their pace allows (here
// not before an hour has passed: once when the sweep is prepared, once
// when it ends), and a reader never sees a torn results.json.
func TestSweepRewritesResultsAtItsPace(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel = 2
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.pace.minGap = time.Hour
	done := make(chan struct{})
	read := make(chan int)
	go func() {
		reads := 0
		defer func() { read <- reads }()
		for {
			select {
			case <-done:
				return
			default:
			}
			raw, err := os.ReadFile(filepath.Join(cfg.Dir, ResultsJSON))
			var r Results
			if err == nil {
				err = json.Unmarshal(raw, &r)
			}
			if err != nil || len(r.Trials) != 4 {
				t.Errorf("read %d of results.json: %d trials, %v", reads, len(r.Trials), err)
				return
			}
			reads++
		}
	}()
	res, err := s.Run(context.Background())
	close(done)
	<-read
	if err != nil || res.Counts["succeeded"] != 4 {
		t.Fatalf("counts %v, %v", res.Counts, err)
	}
	if s.writes != 2 {
		t.Errorf("the results files were written %d times for 4 trials, want 2 (prepared and ended)", s.writes)
	}
	if disk := readResults(t, cfg.Dir); disk.Counts["succeeded"] != 4 {
		t.Errorf("results.json at the end: counts %v", disk.Counts)
	}
}

func TestResultsPace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := resultsPace{minGap: time.Second, ratio: 10}
	if w := p.wait(t0); w > 0 {
		t.Errorf("before any write: wait %v", w)
	}
	p.wrote(t0, t0.Add(10*time.Millisecond))
	if w := p.wait(t0.Add(10 * time.Millisecond)); w != time.Second {
		t.Errorf("after a quick write: wait %v, want the least gap, 1s", w)
	}
	// A large sweep's rewrite of 300ms waits ten times as long.
	p.wrote(t0, t0.Add(300*time.Millisecond))
	if w := p.wait(t0.Add(300 * time.Millisecond)); w != 3*time.Second {
		t.Errorf("after a 300ms write: wait %v, want 3s", w)
	}
	if w := p.wait(t0.Add(4 * time.Second)); w > 0 {
		t.Errorf("once the gap has passed: wait %v", w)
	}
}

// TestResultsStreamAsMarshalIndent: results.json, written a trial at a
// time, is what json.MarshalIndent makes of the whole.
func TestResultsStreamAsMarshalIndent(t *testing.T) {
	sum := &trainer.Summary{TestAccuracy: 0.5, TestLoss: 1.25, Steps: 10, ParamsSHA256: "ab"}
	rows := []TrialResult{
		{Name: "a<b>&c", State: TrialSucceeded, Device: "cpu", RunDir: "s/a", Config: "s/trials/a.yaml", Overrides: map[string]any{"lr": 0.1, "model.hidden": []any{8, 4}}, Attempts: 2, Summary: sum, Seconds: 1.5},
		{Name: "b", State: TrialFailed, Reason: "exit \"7\"\nline", LogTail: "tail\t\u2028", Overrides: map[string]any{}},
		{Name: "c", State: TrialPending},
	}
	for _, r := range []Results{
		newResults("sweep.yaml", "test_accuracy", rows, time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)),
		newResults("sweep.yaml", "test_loss", rows[2:], time.Time{}),
		{SweepFile: "none", Counts: map[string]int{}},
	} {
		want, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := r.writeJSON(&got); err != nil {
			t.Fatal(err)
		}
		if r.Trials == nil {
			// MarshalIndent says null; a sweep's results list its trials.
			want = bytes.Replace(want, []byte(`"trials": null`), []byte(`"trials": []`), 1)
		}
		if got.String() != string(want)+"\n" {
			t.Errorf("streamed:\n%s\nMarshalIndent:\n%s", got.String(), want)
		}
	}
}

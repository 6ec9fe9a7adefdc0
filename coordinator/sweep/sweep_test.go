package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// smallBase is the base of the small sweeps the tests run: an MLP of 8
// hidden units on 256 synthetic examples, 2 epochs.
const smallBase = `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 2
  batch_size: 32
  log_every: 2
  enable_graphs: true
  model: {hidden: [8]}
`

// testSweep is four small trials on synthetic data, a second or so each.
const testSweep = smallBase + `trials:
  - {name: a, lr: 0.0001}
  - {name: b, lr: 0.003}
  - {name: c, lr: 0.01, model: {hidden: [16]}}
  - {name: d, lr: 0.03}
`

// sweepConfig runs the sweep file text with this test binary as the
// worker.
func sweepConfig(t *testing.T, text string) Config {
	t.Helper()
	sw, err := ReadSweep(writeSweep(t, text))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(serveAsWorkerEnv, "1")
	return Config{Sweep: sw, Dir: filepath.Join(t.TempDir(), "sweep"), Device: "cpu", RankBy: "test_accuracy", Worker: exe, Version: "test"}
}

func runSweep(t *testing.T, ctx context.Context, cfg Config) (Results, *Run) {
	t.Helper()
	s, err := Prepare(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res, s
}

func readResults(t *testing.T, dir string) Results {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, ResultsJSON))
	if err != nil {
		t.Fatal(err)
	}
	var r Results
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSweepRanksTrialsRunInWorkers(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel = 2
	var mu sync.Mutex
	running, most := 0, 0
	cfg.Report = func(u TrialUpdate) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case u.State == TrialRunning && u.Progress == nil:
			running++
			most = max(most, running)
		case u.Result != nil:
			running--
		}
	}
	res, s := runSweep(t, context.Background(), cfg)
	if s.Parallel() != 2 || most != 2 {
		t.Errorf("%d slots, %d trials at once; want 2", s.Parallel(), most)
	}
	onDisk := readResults(t, cfg.Dir)
	if len(onDisk.Trials) != 4 || onDisk.Counts["succeeded"] != 4 || onDisk.RankBy != "test_accuracy" || onDisk.Order != "descending" {
		t.Fatalf("results.json: %+v", onDisk)
	}
	for i, r := range onDisk.Trials {
		if r.State != TrialSucceeded || r.Rank != i+1 || r.Summary == nil || r.Value == nil || *r.Value != r.Summary.TestAccuracy {
			t.Fatalf("row %d: %+v", i, r)
		}
		if i > 0 && *onDisk.Trials[i-1].Value < *r.Value {
			t.Errorf("row %d (%g) ranks below row %d (%g)", i, *r.Value, i-1, *onDisk.Trials[i-1].Value)
		}
		if _, err := os.Stat(filepath.Join(r.RunDir, rundir.SummaryFile)); err != nil || filepath.Dir(r.RunDir) != cfg.Dir {
			t.Errorf("trial %s: run directory %s: %v", r.Name, r.RunDir, err)
		}
		if log, err := os.ReadFile(filepath.Join(r.RunDir, "worker.log")); err != nil || !strings.Contains(string(log), "test worker pid") {
			t.Errorf("trial %s: worker.log %q, %v", r.Name, log, err)
		}
	}
	if len(res.Trials) != 4 || res.Trials[0].Name != onDisk.Trials[0].Name {
		t.Errorf("returned results differ from results.json")
	}
	csv, err := os.ReadFile(filepath.Join(cfg.Dir, ResultsCSV))
	if err != nil || strings.Count(string(csv), "\n") != 5 || !strings.HasPrefix(string(csv), "rank,name,state,test_accuracy,") {
		t.Errorf("results.csv: %q, %v", csv, err)
	}
	// A trial's parameters are those of the same job trained in process,
	// as tolaria train trains it.
	for _, r := range onDisk.Trials {
		var trial Trial
		for _, tr := range cfg.Sweep.Trials {
			if tr.Name == r.Name {
				trial = tr
			}
		}
		spec := trial.Spec
		spec.Device, spec.RunDir = "cpu", filepath.Join(t.TempDir(), r.Name)
		_, sum := trainRun(t, request(t, spec))
		if sum.ParamsSHA256 != r.Summary.ParamsSHA256 {
			t.Errorf("trial %s: params %s in the sweep, %s trained alone", r.Name, r.Summary.ParamsSHA256, sum.ParamsSHA256)
		}
	}
	for _, name := range []string{SweepFileCopy, filepath.Join(TrialConfigDir, "c.yaml")} {
		if _, err := os.Stat(filepath.Join(cfg.Dir, name)); err != nil {
			t.Errorf("the sweep directory lacks %s", name)
		}
	}
}

func TestSweepRecordsAFailedTrial(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel = 2
	t.Setenv(jobserver.FaultEnv, "step=3,exit=7,run=b")
	res, _ := runSweep(t, context.Background(), cfg)
	if res.Counts["succeeded"] != 3 || res.Counts["failed"] != 1 {
		t.Fatalf("counts %v", res.Counts)
	}
	last := res.Trials[3]
	if last.Name != "b" || last.State != TrialFailed || last.Rank != 0 || last.Attempts != 1 {
		t.Fatalf("the failed trial's row: %+v", last)
	}
	if !strings.Contains(last.Reason, "exit status 7") || !strings.Contains(last.LogTail, "fault switch: exiting with 7 after step 3") {
		t.Errorf("reason %q, log tail %q", last.Reason, last.LogTail)
	}
	if csv, _ := os.ReadFile(filepath.Join(cfg.Dir, ResultsCSV)); !strings.Contains(string(csv), "exit status 7") {
		t.Errorf("results.csv lacks the reason: %s", csv)
	}
}

func TestSweepRecordsAKilledWorker(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel = 2
	t.Setenv(jobserver.FaultEnv, "step=2,kill,run=c")
	res, _ := runSweep(t, context.Background(), cfg)
	c := res.Trials[3]
	if c.Name != "c" || c.State != TrialFailed || res.Counts["succeeded"] != 3 {
		t.Fatalf("counts %v, last row %+v", res.Counts, c)
	}
	if !strings.Contains(c.Reason, "signal: killed") || !strings.Contains(c.LogTail, "killing myself after step 2") {
		t.Errorf("reason %q, log tail %q", c.Reason, c.LogTail)
	}
}

// TestSweepRecordsAHungTrial: a trial whose worker stops (SIGSTOP: no
// heartbeat) or wedges (its training blocked while its heartbeats go on)
// fails as hung, found by the heartbeat timeout; the others succeed.
func TestSweepRecordsAHungTrial(t *testing.T) {
	for _, c := range []struct{ fault, reason, log string }{
		{"step=2,hang,run=a", "no heartbeat", "stopping myself after step 2"},
		{"step=2,wedge,run=a", "made no progress", "wedging the work"},
	} {
		t.Run(c.fault, func(t *testing.T) {
			cfg := sweepConfig(t, testSweep)
			cfg.Parallel = 2
			cfg.HeartbeatTimeout = 2 * time.Second
			t.Setenv(jobserver.FaultEnv, c.fault)
			start := time.Now()
			res, _ := runSweep(t, context.Background(), cfg)
			var a TrialResult
			for _, r := range res.Trials {
				if r.Name == "a" {
					a = r
				}
			}
			if a.State != TrialFailed || res.Counts["succeeded"] != 3 {
				var rows []string
				for _, r := range res.Trials {
					rows = append(rows, fmt.Sprintf("%s: %s (%s)", r.Name, r.State, r.Reason))
				}
				t.Fatalf("counts %v; want a failed and the others succeeded:\n%s", res.Counts, strings.Join(rows, "\n"))
			}
			if !strings.Contains(a.Reason, worker.ReasonHung) || !strings.Contains(a.Reason, c.reason) || !strings.Contains(a.LogTail, c.log) {
				t.Errorf("reason %q, log tail %q", a.Reason, a.LogTail)
			}
			// Found by the heartbeat timeout, not by the end of some longer wait.
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("the sweep took %s with a 2s heartbeat timeout", took)
			}
		})
	}
}

func TestSweepRetriesAFailedTrial(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel, cfg.Retries = 2, 1
	// Trial b fails at its 10th step, after the first epoch's checkpoint
	// (8 steps an epoch); the retry resumes from it and has 8 steps left,
	// so the fault, counted per invocation, does not fire again.
	t.Setenv(jobserver.FaultEnv, "step=10,exit=7,run=b")
	res, _ := runSweep(t, context.Background(), cfg)
	var b TrialResult
	for _, r := range res.Trials {
		if r.Name == "b" {
			b = r
		}
	}
	if b.State != TrialSucceeded || b.Attempts != 2 || res.Counts["succeeded"] != 4 || b.Summary.ResumedFromStep != 8 {
		t.Fatalf("trial b after a retry: %+v, summary %+v", b, b.Summary)
	}
	if log, _ := os.ReadFile(filepath.Join(b.RunDir, "worker.log")); strings.Count(string(log), "test worker pid") != 2 {
		t.Errorf("worker.log of two attempts: %s", log)
	}
	// It ends with the parameters of a run that never failed.
	spec := cfg.Sweep.Trials[1].Spec
	spec.Device, spec.RunDir = "cpu", filepath.Join(t.TempDir(), "b")
	_, sum := trainRun(t, request(t, spec))
	if sum.ParamsSHA256 != b.Summary.ParamsSHA256 {
		t.Errorf("params %s after a retry, %s uninterrupted", b.Summary.ParamsSHA256, sum.ParamsSHA256)
	}
}

func TestSweepInterrupted(t *testing.T) {
	text := strings.Replace(testSweep, "epochs: 2", "epochs: 2000", 1)
	cfg := sweepConfig(t, text)
	res := interruptSweep(t, cfg)
	if res.Counts["interrupted"] != 2 || res.Counts["pending"] != 2 {
		t.Fatalf("counts %v", res.Counts)
	}
	for _, r := range res.Trials {
		switch r.State {
		case TrialInterrupted:
			if r.Summary == nil || !r.Summary.Interrupted || !strings.Contains(r.Reason, "checkpoint saved") {
				t.Errorf("interrupted row %+v", r)
			}
			if _, err := os.Stat(filepath.Join(r.RunDir, trainer.CheckpointFile)); err != nil {
				t.Errorf("trial %s: no checkpoint: %v", r.Name, err)
			}
			if log, _ := os.ReadFile(filepath.Join(r.RunDir, "worker.log")); !strings.Contains(string(log), "held test worker") {
				t.Errorf("trial %s ran in a worker that does not hold it: %s", r.Name, log)
			}
		case TrialPending:
			if !strings.Contains(r.Reason, "not started") {
				t.Errorf("pending row %+v", r)
			}
		}
	}
}

// interruptSweep runs cfg two trials at a time and cancels it once both
// train in their second epoch. Its workers hold each trial in its third
// epoch until the cancel reaches it (see serveHeld): however slowly the
// second trial starts, the first cannot end before it, and neither ends
// before the cancel.
func interruptSweep(t *testing.T, cfg Config) Results {
	t.Helper()
	cfg.Parallel = 2
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Setenv(holdEnv, "1")
	defer os.Unsetenv(holdEnv)
	// Cancel once both running trials train in epoch 2, so each has an
	// epoch's checkpoint to keep: cancelling when the first got there
	// could catch the second before its worker said hello.
	var (
		once sync.Once
		mu   sync.Mutex
		far  = map[string]bool{}
	)
	cfg.Report = func(u TrialUpdate) {
		if u.Progress == nil || u.Progress.Epoch < 2 {
			return
		}
		mu.Lock()
		far[u.Trial] = true
		both := len(far) == cfg.Parallel
		mu.Unlock()
		if both {
			once.Do(cancel)
		}
	}
	res, _ := runSweep(t, ctx, cfg)
	return res
}

// resumeConfig is cfg resuming its sweep directory, as tolaria sweep
// --resume reads it.
func resumeConfig(t *testing.T, cfg Config) Config {
	t.Helper()
	sw, _, err := LoadDir(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sweep, cfg.Resume, cfg.Report = sw, true, nil
	return cfg
}

func TestSweepResumesAnInterruptedSweep(t *testing.T) {
	// Long enough that no trial ends before the cancel reaches it.
	text := strings.Replace(testSweep, "epochs: 2", "epochs: 150", 1)
	cfg := sweepConfig(t, text)
	first := interruptSweep(t, cfg)
	if first.Counts["interrupted"] != 2 || first.Counts["pending"] != 2 {
		t.Fatalf("counts after the interrupt %v", first.Counts)
	}
	was := map[string]TrialResult{}
	for _, r := range first.Trials {
		was[r.Name] = r
	}
	res, _ := runSweep(t, context.Background(), resumeConfig(t, cfg))
	if res.Counts["succeeded"] != 4 || res.SweepFile != cfg.Sweep.Path {
		t.Fatalf("resumed sweep: counts %v, sweep file %s", res.Counts, res.SweepFile)
	}
	if disk := readResults(t, cfg.Dir); disk.Counts["succeeded"] != 4 || disk.Trials[0].Rank != 1 || disk.Trials[3].Rank != 4 {
		t.Errorf("results.json after resuming: %+v", disk)
	}
	for i, tr := range cfg.Sweep.Trials {
		var r TrialResult
		for _, row := range res.Trials {
			if row.Name == tr.Name {
				r = row
			}
		}
		switch was[tr.Name].State {
		case TrialInterrupted:
			if r.Attempts != 2 || r.Summary.ResumedFromStep < 8 {
				t.Errorf("trial %s resumed: attempts %d, resumed from step %d", r.Name, r.Attempts, r.Summary.ResumedFromStep)
			}
			// It ends with the parameters of a run never interrupted.
			spec := cfg.Sweep.Trials[i].Spec
			spec.Device, spec.RunDir = "cpu", filepath.Join(t.TempDir(), tr.Name)
			_, sum := trainRun(t, request(t, spec))
			if sum.ParamsSHA256 != r.Summary.ParamsSHA256 {
				t.Errorf("trial %s: params %s after resuming, %s uninterrupted", r.Name, r.Summary.ParamsSHA256, sum.ParamsSHA256)
			}
		case TrialPending:
			if r.Attempts != 1 || r.Summary.ResumedFromStep != 0 {
				t.Errorf("trial %s started: attempts %d, resumed from step %d", r.Name, r.Attempts, r.Summary.ResumedFromStep)
			}
		}
	}
	// Every trial succeeded: there is nothing left, and nothing changes.
	before, _ := os.ReadFile(filepath.Join(cfg.Dir, ResultsJSON))
	if _, err := Prepare(context.Background(), resumeConfig(t, cfg)); !errors.Is(err, ErrNothingToResume) {
		t.Errorf("resuming a finished sweep: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg.Dir, ResultsJSON)); string(after) != string(before) {
		t.Error("resuming a finished sweep rewrote results.json")
	}
}

// TestSweepResumesAKilledSweep: a sweep killed outright leaves its
// running trials' attempts started in the journal and never ended, and
// results.json as it last rewrote it (here: those trials pending, as a
// kill before the first rewrite leaves them). The resumed sweep reads
// the journal: each such attempt is recorded interrupted, in the journal
// and results.json, before anything runs, and counted: the trial's next
// attempt is its second.
func TestSweepResumesAKilledSweep(t *testing.T) {
	text := strings.Replace(testSweep, "epochs: 2", "epochs: 150", 1)
	cfg := sweepConfig(t, text)
	interruptSweep(t, cfg)
	res := readResults(t, cfg.Dir)
	killed := map[string]bool{}
	for i, r := range res.Trials {
		if r.State == TrialInterrupted {
			killed[r.Name] = true
			res.Trials[i].State, res.Trials[i].Attempts, res.Trials[i].Summary, res.Trials[i].Reason = TrialPending, 0, nil, ""
		}
	}
	if len(killed) != 2 {
		t.Fatalf("counts after the interrupt %v", res.Counts)
	}
	if err := res.write(cfg.Dir); err != nil {
		t.Fatal(err)
	}
	dropJournalEnds(t, cfg.Dir)

	s, err := Prepare(context.Background(), resumeConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, r := range readResults(t, cfg.Dir).Trials {
		if killed[r.Name] && (r.State != TrialInterrupted || r.Attempts != 1 || !strings.Contains(r.Reason, "stopped during attempt 1 without recording its end")) {
			t.Errorf("a killed trial, once the sweep is prepared to resume: %+v", r)
		}
	}
	interrupted := 0
	entries, _ := readJournal(cfg.Dir)
	for _, e := range entries {
		if e.Event == journalInterrupted && killed[e.Trial] && e.Attempt == 1 {
			interrupted++
		}
	}
	if interrupted != 2 {
		t.Errorf("the journal records %d interrupted attempts, want 2", interrupted)
	}
	got, err := s.Run(context.Background())
	if err != nil || got.Counts["succeeded"] != 4 {
		t.Fatalf("counts after resuming a killed sweep %v, %v: %+v", got.Counts, err, got.Trials)
	}
	for _, r := range got.Trials {
		want := 1
		if killed[r.Name] {
			want = 2
		}
		if r.Attempts != want {
			t.Errorf("trial %s: attempts %d, want %d", r.Name, r.Attempts, want)
		}
	}
}

// dropJournalEnds removes the ends from a sweep's journal, as a kill
// during the attempts leaves it, and leaves a line cut short at its end.
func dropJournalEnds(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, JournalFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(raw), "\n") {
		if !strings.Contains(line, `"event":"end"`) {
			kept = append(kept, line)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(kept, "")+`{"time":"2026-01-01T00:00:00Z","event":"sta`), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSweepResumeKeepsSucceededTrials(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Parallel = 2
	// Trial b fails at its 10th step, after its first epoch's checkpoint.
	t.Setenv(jobserver.FaultEnv, "step=10,exit=7,run=b")
	first, _ := runSweep(t, context.Background(), cfg)
	if first.Counts["failed"] != 1 || first.Counts["succeeded"] != 3 {
		t.Fatalf("counts %v", first.Counts)
	}
	kept := map[string]string{}
	for _, r := range first.Trials {
		raw, _ := json.Marshal(r)
		kept[r.Name] = string(raw)
	}
	res, _ := runSweep(t, context.Background(), resumeConfig(t, cfg))
	if res.Counts["succeeded"] != 4 {
		t.Fatalf("counts after resuming %v", res.Counts)
	}
	for _, r := range readResults(t, cfg.Dir).Trials {
		if r.Name == "b" {
			if r.Attempts != 2 || r.Summary.ResumedFromStep != 8 {
				t.Errorf("trial b re-run: attempts %d, resumed from step %d", r.Attempts, r.Summary.ResumedFromStep)
			}
			continue
		}
		// Rank aside (b now ranks among them), a succeeded row is as it was.
		r.Rank = 0
		var was TrialResult
		if err := json.Unmarshal([]byte(kept[r.Name]), &was); err != nil {
			t.Fatal(err)
		}
		was.Rank = 0
		a, _ := json.Marshal(r)
		w, _ := json.Marshal(was)
		if string(a) != string(w) {
			t.Errorf("trial %s changed on resume:\n%s\nwas\n%s", r.Name, a, w)
		}
	}
}

func TestResumeSweepRefuses(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	notSweep := t.TempDir()
	if err := os.WriteFile(filepath.Join(notSweep, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{"", "sweep_dir: is required to resume a sweep"},
		{filepath.Join(t.TempDir(), "none"), "no such file or directory"},
		{notSweep, "is not a sweep directory"},
	} {
		if _, _, err := LoadDir(c.dir); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadDir(%q): got %v, want refusal.ErrConfig with %q", c.dir, err, c.want)
		}
	}
	// A sweep held by another: refused before anything is written.
	held, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	before, _ := os.ReadFile(filepath.Join(cfg.Dir, ResultsJSON))
	_, err = Prepare(context.Background(), resumeConfig(t, cfg))
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), fmt.Sprintf("in use by another tolaria (pid %d, tolaria sweep)", os.Getpid())) {
		t.Errorf("resuming a held sweep: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(cfg.Dir, ResultsJSON)); string(after) != string(before) {
		t.Error("a refused resume rewrote results.json")
	}
}

func TestPrepareSweepRefuses(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bigBatch := strings.Replace(testSweep, "{name: d, lr: 0.03}", "{name: d, batch_size: 4096}", 1)
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"rank key", func(c *Config) { c.RankBy = "accuracy" }, "rank_by: must be one of samples_per_second, test_accuracy, test_loss"},
		{"sweep dir in use", func(c *Config) { c.Dir = full }, "is not empty"},
		{"parallel over slots", func(c *Config) { c.Device, c.GPUs, c.PerDevice, c.Parallel = "cuda", []int{0, 1}, 1, 3 }, "parallel: 3 is more than the 2 device slots"},
		{"gpus twice", func(c *Config) { c.Device, c.GPUs = "cuda", []int{1, 1} }, "devices: must list distinct"},
		{"a trial's batch", func(c *Config) {
			sw, err := ReadSweep(writeSweep(t, bigBatch))
			if err != nil {
				t.Fatal(err)
			}
			c.Sweep = sw
		}, `trial "d": graphs.warmup_batches: 2 covers the whole run`},
		// Deep enough for the sweep directory and its trials' configurations,
		// too deep for the files of a trial's run.
		{"sweep dir too deep", func(c *Config) {
			for len(c.Dir) < maxPathBytes-runDirRoom {
				c.Dir = filepath.Join(c.Dir, strings.Repeat("d", 200))
			}
		}, `is too deep: trial "a"'s run directory`},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := cfg
			bad.Dir = filepath.Join(t.TempDir(), "sweep")
			c.edit(&bad)
			_, err := Prepare(context.Background(), bad)
			if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want refusal.ErrConfig with %q", err, c.want)
			}
			if bad.Dir != full {
				if _, err := os.Stat(bad.Dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused sweep created %s", bad.Dir)
				}
			}
		})
	}
}

func TestRankOrdersByKey(t *testing.T) {
	sum := func(acc, loss float64) *trainer.Summary { return &trainer.Summary{TestAccuracy: acc, TestLoss: loss} }
	rows := []TrialResult{
		{Name: "fail", State: TrialFailed},
		{Name: "x", State: TrialSucceeded, Summary: sum(0.5, 0.9)},
		{Name: "y", State: TrialSucceeded, Summary: sum(0.8, 0.2)},
		{Name: "w", State: TrialSucceeded, Summary: sum(0.5, 0.1)},
		{Name: "stop", State: TrialInterrupted, Summary: sum(0.99, 0.01)},
	}
	names := func(rs []TrialResult) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.Name)
		}
		return strings.Join(s, " ")
	}
	if got := names(rank(rows, "test_accuracy")); got != "y w x fail stop" {
		t.Errorf("by accuracy: %s", got)
	}
	if got := names(rank(rows, "test_loss")); got != "w y x fail stop" {
		t.Errorf("by loss: %s", got)
	}
	r := rank(rows, "test_loss")
	if r[0].Rank != 1 || r[2].Rank != 3 || r[3].Rank != 0 || r[4].Value != nil {
		t.Errorf("ranks: %+v", r)
	}
	if !RankAscending("train_loss") || RankAscending("samples_per_second") {
		t.Error("loss-like keys rank ascending")
	}
}

// sweepSlots are the slots the local launcher lays out for the sweep.
func sweepSlots(cfg Config) ([]launch.Slot, error) {
	cfg.Sweep = &Sweep{Trials: []Trial{{Name: "a"}}}
	l, err := launch.Local().New(context.Background(), cfg.launchConfig("", "", slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	return l.Slots(context.Background())
}

func TestSlotsSpreadOverDevices(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   Config
		slots string
	}{
		{"cpu default", Config{Device: "cpu"}, "cpu"},
		{"cpu parallel", Config{Device: "cpu", Parallel: 3}, "cpu cpu cpu"},
		{"cuda default", Config{Device: "cuda"}, "cuda:0"},
		{"one per gpu", Config{Device: "cuda", GPUs: []int{0, 2, 3}}, "cuda:0 cuda:2 cuda:3"},
		{"two per gpu, interleaved", Config{Device: "cuda", GPUs: []int{0, 1}, PerDevice: 2}, "cuda:0 cuda:1 cuda:0 cuda:1"},
		{"parallel below the slots", Config{Device: "cuda", GPUs: []int{0, 1}, PerDevice: 2, Parallel: 3}, "cuda:0 cuda:1 cuda:0"},
	} {
		slots, err := sweepSlots(c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, s := range slots {
			got = append(got, s.String())
		}
		if strings.Join(got, " ") != c.slots {
			t.Errorf("%s: slots %q, want %q", c.name, got, c.slots)
		}
	}
	if env := (launch.Slot{Device: "cuda", GPU: 3}).Env(); len(env) != 1 || env[0] != "CUDA_VISIBLE_DEVICES=3" {
		t.Errorf("a GPU slot's environment: %q", env)
	}
	if env := (launch.Slot{Device: "cpu", GPU: -1}).Env(); env != nil {
		t.Errorf("a CPU slot's environment: %q", env)
	}
	if env := (launch.Slot{Device: "cuda", GPU: -1}).Env(); env != nil {
		t.Errorf("a GPU slot that names no GPU (an evaluation's): %q", env)
	}
	_, err := sweepSlots(Config{Device: "cpu", PerDevice: 1, Parallel: 2})
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "parallel: 2 is more than the 1 device slots") {
		t.Errorf("parallel above the slots: %v", err)
	}
}

func TestPrepareSweepNeedsAWorker(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	cfg.Worker = filepath.Join(t.TempDir(), "no-worker")
	_, err := Prepare(context.Background(), cfg)
	if !errors.Is(err, refusal.ErrSetup) || !strings.Contains(err.Error(), "tolaria-worker") {
		t.Fatalf("no worker: %v", err)
	}
	if _, err := os.Stat(cfg.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a sweep without a worker created %s", cfg.Dir)
	}
}

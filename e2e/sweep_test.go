package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/trainer"
)

// e2eSweep is four small trials on synthetic data, a second or so each.
const e2eSweep = `
base:
  dataset: synthetic
  synthetic_size: 512
  epochs: 2
  batch_size: 32
  log_every: 4
  enable_graphs: true
  model: {hidden: [16]}
trials:
  - {name: a, lr: 0.0001}
  - {name: b, lr: 0.003}
  - {name: c, lr: 0.01, model: {hidden: [32, 16]}}
  - {name: d, lr: 0.03, optimizer: sgd}
`

func writeSweepFile(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "sweep.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func readSweepResults(t *testing.T, dir string) sweep.Results {
	t.Helper()
	return readJSON[sweep.Results](t, filepath.Join(dir, sweep.ResultsJSON))
}

// TestSweepRanksTrialsAsTrainTrainsThem: four trials, two at a time, in
// worker processes; results.json ranks them by test accuracy, and each
// trial ends with the parameters that tolaria train gives its resolved
// configuration.
func TestSweepRanksTrialsAsTrainTrainsThem(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, e2eSweep)
	sweepDir := filepath.Join(dir, "sweep")
	r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", sweepDir)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	res := readSweepResults(t, sweepDir)
	if len(res.Trials) != 4 || res.Counts["succeeded"] != 4 || res.RankBy != "test_accuracy" {
		t.Fatalf("results: %+v", res)
	}
	for i, row := range res.Trials {
		if row.Rank != i+1 || row.Value == nil || row.Summary == nil || row.Device != "cpu" {
			t.Fatalf("row %d: %+v", i, row)
		}
		if i > 0 && *res.Trials[i-1].Value < *row.Value {
			t.Errorf("%s (%g) ranks above %s (%g)", res.Trials[i-1].Name, *res.Trials[i-1].Value, row.Name, *row.Value)
		}
		if !strings.Contains(r.stderr, "trial "+row.Name+": started on cpu") || !strings.Contains(r.stderr, "trial "+row.Name+": succeeded") {
			t.Errorf("no start and end lines for trial %s:\n%s", row.Name, r.stderr)
		}
		alone := filepath.Join(dir, "alone-"+row.Name)
		tr := tolaria(t, dir, nil, "train", "--config", filepath.Join(sweepDir, sweep.TrialConfigDir, row.Name+".yaml"), "--run-dir", alone)
		if tr.code != 0 {
			t.Fatalf("tolaria train with trial %s's configuration: exit %d\n%s", row.Name, tr.code, tr.stderr)
		}
		if sum := readSummary(t, filepath.Join(alone, "summary.json")); sum.ParamsSHA256 != row.Summary.ParamsSHA256 {
			t.Errorf("trial %s: params %s in the sweep, %s from tolaria train", row.Name, row.Summary.ParamsSHA256, sum.ParamsSHA256)
		}
	}
	if !strings.Contains(r.stdout, "1     "+res.Trials[0].Name) {
		t.Errorf("the printed ranking does not start with %s:\n%s", res.Trials[0].Name, r.stdout)
	}
	csv, err := os.ReadFile(filepath.Join(sweepDir, sweep.ResultsCSV))
	if err != nil || strings.Count(string(csv), "\n") != 5 {
		t.Errorf("results.csv: %q, %v", csv, err)
	}
}

// TestSweepTrialFileTrainsAsGiven: a trial's trials/<name>.yaml is taken
// by tolaria train --config as it is, with no --run-dir: it names no run
// directory (nor resume, nor a step limit), so the run goes to train's
// default runs/<time>, leaves the trial's run directory as it was, and
// ends with the trial's parameters.
func TestSweepTrialFileTrainsAsGiven(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, `
base:
  dataset: synthetic
  synthetic_size: 256
  epochs: 1
  batch_size: 32
  log_every: 1000
  enable_graphs: true
  model: {hidden: [16]}
trials:
  - {name: a, lr: 0.003}
`)
	sweepDir := filepath.Join(dir, "sweep")
	if r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--sweep-dir", sweepDir); r.code != 0 {
		t.Fatalf("sweep: exit %d\n%s", r.code, r.stderr)
	}
	row := readSweepResults(t, sweepDir).Trials[0]
	trialFile := filepath.Join(sweepDir, sweep.TrialConfigDir, "a.yaml")
	raw, err := os.ReadFile(trialFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"run_dir:", "resume:", "max_steps:"} {
		if strings.Contains(string(raw), key) {
			t.Errorf("%s sets %s, a key of one invocation:\n%s", trialFile, key, raw)
		}
	}
	before := snapshot(t, row.RunDir)
	tr := tolaria(t, dir, nil, "train", "--config", trialFile)
	if tr.code != 0 {
		t.Fatalf("tolaria train --config %s: exit %d\n%s", trialFile, tr.code, tr.stderr)
	}
	sameFiles(t, before, snapshot(t, row.RunDir))
	runs, _ := filepath.Glob(filepath.Join(dir, "runs", "*", "summary.json"))
	if len(runs) != 1 {
		t.Fatalf("train's runs: %v; want one under runs/\n%s", runs, tr.stderr)
	}
	if sum := readSummary(t, runs[0]); sum.ParamsSHA256 != row.Summary.ParamsSHA256 {
		t.Errorf("params %s from tolaria train --config %s, %s in the sweep", sum.ParamsSHA256, trialFile, row.Summary.ParamsSHA256)
	}
}

// TestSweepSurvivesAFailedTrial: the worker of trial b exits with code 7
// at its third step (the test-only fault switch); the other three finish,
// b's row carries the reason and its log's tail, and tolaria exits 3.
func TestSweepSurvivesAFailedTrial(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, e2eSweep)
	sweepDir := filepath.Join(dir, "sweep")
	r := tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=3,exit=7,run=b"}, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", sweepDir)
	if r.code != 3 {
		t.Fatalf("exit %d, want 3\n%s", r.code, r.stderr)
	}
	res := readSweepResults(t, sweepDir)
	if res.Counts["succeeded"] != 3 || res.Counts["failed"] != 1 {
		t.Fatalf("counts %v", res.Counts)
	}
	b := res.Trials[3]
	if b.Name != "b" || b.State != sweep.TrialFailed || b.Rank != 0 {
		t.Fatalf("last row %+v", b)
	}
	if !strings.Contains(b.Reason, "exit status 7") || !strings.Contains(b.LogTail, "test-only fault switch: exiting") {
		t.Errorf("reason %q, log tail %q", b.Reason, b.LogTail)
	}
	if !strings.Contains(r.stderr, "1 of 4 trials failed") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
}

// TestSweepRefusesBadInput: a bad sweep file is refused with exit 2,
// naming the file, the trial and the key, and nothing is written.
func TestSweepRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, strings.Replace(e2eSweep, "{name: c, lr: 0.01,", "{name: c, lr: 0.01, momentun: 0.9,", 1))
	sweepDir := filepath.Join(dir, "sweep")
	r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--sweep-dir", sweepDir)
	if r.code != 2 || !strings.Contains(r.stderr, "sweep file "+file+`: trial "c": unknown key momentun`) {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(sweepDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused sweep wrote %s", sweepDir)
	}
}

// TestSweepInterruptLeavesNothingRunning: SIGINT mid-sweep stops the two
// running trials with a checkpoint, records them interrupted and the
// others pending, exits 130, and no worker process is left.
// TestSweepInterruptLeavesNothingRunning: SIGINT stops every worker, the
// running trials checkpoint, and tolaria sweep --resume finishes the
// sweep, resuming them and starting the others.
func TestSweepInterruptLeavesNothingRunning(t *testing.T) {
	dir := t.TempDir()
	// Some seconds a trial: long enough to interrupt, short enough to
	// finish on resume.
	file := writeSweepFile(t, dir, strings.Replace(e2eSweep, "epochs: 2", "epochs: 1000", 1))
	sweepDir := filepath.Join(dir, "sweep")
	cmd, stderr := startRun(t, dir, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", sweepDir)
	waitFor(t, "two trials past an epoch", func() bool {
		return strings.Count(stderr.String(), ": epoch 1/1000") >= 2
	})
	pids := workerPIDs(t, sweepDir)
	if len(pids) != 2 {
		t.Fatalf("worker pids %v in the worker logs", pids)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	status, err := waitWithin(cmd, time.Minute)
	if err != nil || status.ExitStatus() != 130 {
		t.Fatalf("after SIGINT: %v, %v\n%s", status, err, stderr)
	}
	if want := "continue with tolaria sweep --resume --sweep-dir " + sweepDir; !strings.Contains(stderr.String(), want) {
		t.Errorf("after SIGINT, stderr lacks %q:\n%s", want, stderr)
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("worker %d outlived the sweep", pid)
		}
	}
	res := readSweepResults(t, sweepDir)
	if res.Counts["interrupted"] != 2 || res.Counts["pending"] != 2 {
		t.Fatalf("counts %v", res.Counts)
	}
	for _, row := range res.Trials {
		if row.State != sweep.TrialInterrupted {
			continue
		}
		if _, err := os.Stat(filepath.Join(row.RunDir, trainer.CheckpointFile)); err != nil {
			t.Errorf("interrupted trial %s has no checkpoint: %v", row.Name, err)
		}
	}

	if r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", sweepDir, file); r.code != 2 || !strings.Contains(r.stderr, "takes no sweep file") {
		t.Errorf("--resume with a sweep file: exit %d\n%s", r.code, r.stderr)
	}
	r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", sweepDir, "--device", "cpu", "--parallel", "2")
	if r.code != 0 {
		t.Fatalf("--resume: exit %d\n%s", r.code, r.stderr)
	}
	resumed := readSweepResults(t, sweepDir)
	if resumed.Counts["succeeded"] != 4 {
		t.Fatalf("after --resume: counts %v", resumed.Counts)
	}
	for _, row := range resumed.Trials {
		interrupted := false
		for _, was := range res.Trials {
			interrupted = interrupted || (was.Name == row.Name && was.State == sweep.TrialInterrupted)
		}
		if resumedFrom := row.Summary.ResumedFromStep; interrupted != (resumedFrom > 0) {
			t.Errorf("trial %s (interrupted: %v) resumed from step %d", row.Name, interrupted, resumedFrom)
		}
	}
	if r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", sweepDir, "--device", "cpu"); r.code != 0 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Errorf("--resume of a finished sweep: exit %d\n%s", r.code, r.stderr)
	}
	if r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", dir); r.code != 2 || !strings.Contains(r.stderr, "is not a sweep directory") {
		t.Errorf("--resume of a directory that is not a sweep's: exit %d\n%s", r.code, r.stderr)
	}
}

// workerPIDs reads the pids that the workers logged in the sweep's run
// directories.
func workerPIDs(t *testing.T, sweepDir string) []int {
	t.Helper()
	return pidsInLogs(filepath.Join(sweepDir, "*", "worker.log"), `worker_pid=(\d+)`)
}

// pidsInLogs collects, once each and in order, the pids that pattern's
// first group finds in the files glob names.
func pidsInLogs(glob, pattern string) []int {
	logs, _ := filepath.Glob(glob)
	re := regexp.MustCompile(pattern)
	seen := map[int]bool{}
	var pids []int
	for _, l := range logs {
		raw, _ := os.ReadFile(l)
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			if pid, _ := strconv.Atoi(m[1]); !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// TestSweepRefusesATrialLargerThanTheDevice: with --device-memory as the
// CPU's stand-in for a GPU's memory, a trial whose bill is larger than the
// whole device fails at once, naming its bill by kind; the others
// succeed, and the sweep exits 3.
func TestSweepRefusesATrialLargerThanTheDevice(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, e2eSweep+"  - {name: big, model: {hidden: [1024, 1024]}}\n")
	sweepDir := filepath.Join(dir, "sweep")
	r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--parallel", "2", "--device-memory", "1MiB", "--sweep-dir", sweepDir)
	if r.code != 3 {
		t.Fatalf("exit %d, want 3\n%s", r.code, r.stderr)
	}
	res := readSweepResults(t, sweepDir)
	if res.Counts["succeeded"] != 4 || res.Counts["failed"] != 1 {
		t.Fatalf("counts %v", res.Counts)
	}
	big := res.Trials[4]
	if big.Name != "big" || big.State != sweep.TrialFailed || big.Attempts != 1 {
		t.Fatalf("last row %+v", big)
	}
	for _, want := range []string{"trial big needs parameters", "optimizer_state", "staging_inputs", "more than device cpu has for budgets in all (1.0 MiB)"} {
		if !strings.Contains(big.Reason, want) {
			t.Errorf("reason %q does not say %q", big.Reason, want)
		}
	}
	if !strings.Contains(r.stderr, "trial big: failed: trial big needs") || !strings.Contains(r.stderr, "1 of 5 trials failed") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
}

// TestSweepKilledOutrightReadsTrueOnResume: SIGKILL of the coordinator
// while two trials train leaves no record of their ends. The resumed
// sweep records each killed attempt as interrupted (in its journal and
// results.json), counts it, resumes the trial from its checkpoint as its
// second attempt, and finishes the sweep.
func TestSweepKilledOutrightReadsTrueOnResume(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, strings.Replace(e2eSweep, "epochs: 2", "epochs: 1000", 1))
	sweepDir := filepath.Join(dir, "sweep")
	cmd, stderr := startRun(t, dir, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", sweepDir)
	waitFor(t, "two trials past their second epoch", func() bool {
		return strings.Count(stderr.String(), ": epoch 2/1000") >= 2
	})
	pids := workerPIDs(t, sweepDir)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = waitWithin(cmd, time.Minute)
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	// The workers notice their coordinator is gone and stop.
	waitFor(t, "the killed sweep's workers to stop", func() bool {
		for _, pid := range pids {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				return false
			}
		}
		return true
	})
	var killed []string
	for _, m := range regexp.MustCompile(`trial (\S+): epoch 2/1000`).FindAllStringSubmatch(stderr.String(), -1) {
		if !slices.Contains(killed, m[1]) {
			killed = append(killed, m[1])
		}
	}
	if len(killed) != 2 || len(pids) != 2 {
		t.Fatalf("trials %v with workers %v at the kill", killed, pids)
	}

	r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", sweepDir, "--device", "cpu", "--parallel", "2")
	if r.code != 0 {
		t.Fatalf("--resume: exit %d\n%s", r.code, r.stderr)
	}
	res := readSweepResults(t, sweepDir)
	if res.Counts["succeeded"] != 4 {
		t.Fatalf("after --resume: counts %v", res.Counts)
	}
	journal, err := os.ReadFile(filepath.Join(sweepDir, sweep.JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range res.Trials {
		wasKilled := slices.Contains(killed, row.Name)
		switch {
		case wasKilled && (row.Attempts != 2 || row.Summary.ResumedFromStep == 0):
			t.Errorf("killed trial %s: attempts %d, resumed from step %d; want 2 attempts, resumed from its checkpoint", row.Name, row.Attempts, row.Summary.ResumedFromStep)
		case !wasKilled && row.Attempts != 1:
			t.Errorf("trial %s: attempts %d, want 1", row.Name, row.Attempts)
		}
		if wasKilled != strings.Contains(r.stderr, "trial "+row.Name+": started on cpu (attempt 2)") {
			t.Errorf("trial %s (killed: %v): the resumed sweep's lines:\n%s", row.Name, wasKilled, r.stderr)
		}
		recorded := regexp.MustCompile(`"event":"interrupted","trial":"` + regexp.QuoteMeta(row.Name) + `","attempt":1,.*stopped during attempt 1`)
		if wasKilled != recorded.Match(journal) {
			t.Errorf("trial %s (killed: %v): the journal records no interrupted first attempt:\n%s", row.Name, wasKilled, journal)
		}
	}
}

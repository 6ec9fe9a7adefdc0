package sweep

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
)

// copyTree copies the directory from to to, as cp -a does.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, raw, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestACopiedSweepResumesWhereItIs: a sweep interrupted in one directory,
// copied to another and the first removed, resumes in the copy to the
// end, and every row of its results.json and results.csv names its run
// directory and configuration in the copy, trials that ran before the
// copy and trials that ran only after it alike.
func TestACopiedSweepResumesWhereItIs(t *testing.T) {
	text := strings.Replace(testSweep, "epochs: 2", "epochs: 150", 1)
	cfg := sweepConfig(t, text)
	first := interruptSweep(t, cfg)
	if first.Counts["interrupted"] != 2 || first.Counts["pending"] != 2 {
		t.Fatalf("counts after the interrupt %v", first.Counts)
	}
	moved := filepath.Join(t.TempDir(), "moved")
	copyTree(t, cfg.Dir, moved)
	if err := os.RemoveAll(cfg.Dir); err != nil {
		t.Fatal(err)
	}
	cfg.Dir = moved
	res, _ := runSweep(t, context.Background(), resumeConfig(t, cfg))
	if res.Counts["succeeded"] != 4 {
		t.Fatalf("resumed in the copy: counts %v", res.Counts)
	}
	disk := readResults(t, moved)
	for _, r := range append(res.Trials, disk.Trials...) {
		if want := filepath.Join(moved, r.Name); r.RunDir != want {
			t.Errorf("trial %s: run_dir %s, want %s", r.Name, r.RunDir, want)
		}
		if want := filepath.Join(moved, TrialConfigDir, r.Name+".yaml"); r.Config != want {
			t.Errorf("trial %s: config %s, want %s", r.Name, r.Config, want)
		} else if !fileExists(r.Config) {
			t.Errorf("trial %s: its config %s does not exist", r.Name, r.Config)
		}
	}
	f, err := os.Open(filepath.Join(moved, ResultsCSV))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, h := range table[0] {
		if h == "run_dir" {
			col = i
		}
	}
	for _, row := range table[1:] {
		if !strings.HasPrefix(row[col], moved+string(filepath.Separator)) {
			t.Errorf("results.csv names run_dir %s, not one in %s", row[col], moved)
		}
	}
}

// startOnAFullDisk prepares cfg's sweep with its first results.json
// failing to be written as on a full disk, and returns Prepare's error,
// which carries the write's ENOSPC.
func startOnAFullDisk(t *testing.T, cfg Config) error {
	t.Helper()
	cfg.writeResultsFiles = func(Results, string) error {
		return &os.PathError{Op: "write", Path: ResultsJSON, Err: syscall.ENOSPC}
	}
	_, err := Prepare(context.Background(), cfg)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a start on a full disk: %v; want the write's ENOSPC", err)
	}
	return err
}

// TestAFailedStartLeavesNoSweepBehind: a new sweep whose first
// results.json cannot be written (a full disk) removes what it wrote, a
// directory (and parent) it made or its entries in an empty directory
// that was there, says so, and the same sweep then starts there.
func TestAFailedStartLeavesNoSweepBehind(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct {
		name, dir, want string
		existed         bool
	}{
		{"made", filepath.Join(root, "new", "sweep"), "made for it, is removed", false},
		{"empty", filepath.Join(root, "empty"), "is empty again", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := sweepConfig(t, testSweep)
			cfg.Dir = c.dir
			if c.existed {
				if err := os.Mkdir(c.dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := startOnAFullDisk(t, cfg)
			if !strings.Contains(err.Error(), "the sweep did not start") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("a full disk at the first results.json: %v", err)
			}
			entries, statErr := os.ReadDir(c.dir)
			switch {
			case c.existed && (statErr != nil || len(entries) > 0):
				t.Errorf("the directory that was there empty holds %v (%v) after a failed start", entries, statErr)
			case !c.existed && !errors.Is(statErr, os.ErrNotExist):
				t.Errorf("the directory made for the sweep is still there: %v", entries)
			case !c.existed && fileExists(filepath.Dir(c.dir)):
				t.Errorf("the parent made for the sweep, %s, is still there", filepath.Dir(c.dir))
			}
			if !fileExists(root) {
				t.Fatal("a directory that was there before the sweep was removed")
			}
			s, err := Prepare(context.Background(), cfg)
			if err != nil {
				t.Fatalf("the same sweep once the disk has room: %v", err)
			}
			defer s.Close()
			if res := readResults(t, c.dir); len(res.Trials) != 4 {
				t.Errorf("results.json after the second start: %+v", res)
			}
		})
	}
}

// TestADamagedResultsFileIsRebuiltFromTheJournal: a finished sweep whose
// results.json is garbled, empty or gone is still a sweep directory: its
// rows come back from the journal (resuming finds nothing to do, and the
// file is written again, the damaged one kept aside). Without a journal
// that records its trials, the refusal says the file is damaged and how
// to go on.
func TestADamagedResultsFileIsRebuiltFromTheJournal(t *testing.T) {
	cfg := sweepConfig(t, strings.Replace(testSweep, "epochs: 2", "epochs: 1", 1))
	runSweep(t, context.Background(), cfg)
	good := readResults(t, cfg.Dir)
	path := filepath.Join(cfg.Dir, ResultsJSON)
	damages := []string{`{"trials": [{"name": "a", "sta`, "", "gone"}
	for i, damage := range damages {
		if damage == "gone" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(path, []byte(damage), 0o644); err != nil {
			t.Fatal(err)
		}
		load := Config{Resume: true, Dir: cfg.Dir, RankBy: "test_accuracy"}
		if err := load.Load("", 0, false); err != nil {
			t.Fatalf("%q: --resume: %v", damage, err)
		}
		var logged strings.Builder
		again := resumeConfig(t, cfg)
		// The first resume is given its rank key, the others take the
		// default.
		again.rankByGiven = i == 0
		again.Logger = slog.New(slog.NewTextHandler(&logged, nil))
		if _, err := Prepare(context.Background(), again); !errors.Is(err, ErrNothingToResume) {
			t.Fatalf("%q: resuming a finished sweep whose results.json was damaged: %v", damage, err)
		}
		if !strings.Contains(logged.String(), "ranked by test_accuracy, the rank key given now") && i == 0 ||
			!strings.Contains(logged.String(), "ranked by test_accuracy, the default rank key") && i > 0 {
			t.Errorf("%q: the warning does not name the key the rebuilt results are ranked by: %s", damage, logged.String())
		}
		got := readResults(t, cfg.Dir)
		if got.Counts["succeeded"] != 4 || len(got.Trials) != 4 {
			t.Fatalf("%q: rebuilt results.json: %+v", damage, got)
		}
		for i, r := range got.Trials {
			if w := good.Trials[i]; r.Name != w.Name || r.Rank != w.Rank || r.Summary.ParamsSHA256 != w.Summary.ParamsSHA256 || r.RunDir != w.RunDir {
				t.Errorf("%q: rebuilt row %d: %s rank %d, want %s rank %d", damage, i, r.Name, r.Rank, w.Name, w.Rank)
			}
		}
		// Each rebuild keeps its own damaged file: the first as
		// results.json.damaged, the second as results.json.damaged-2.
		aside := path + ".damaged"
		if i > 0 {
			aside = fmt.Sprintf("%s-%d", aside, i+1)
		}
		if kept, err := os.ReadFile(aside); damage != "gone" && (err != nil || string(kept) != damage) {
			t.Errorf("%q: the damaged file is not kept aside as %s: %q, %v", damage, aside, kept, err)
		}
	}
	if kept, err := os.ReadFile(path + ".damaged"); err != nil || string(kept) != damages[0] {
		t.Errorf("a second rebuild replaced the first one's damaged file: %q, %v", kept, err)
	}
	// Trials that ran, and a journal that does not record them.
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cfg.Dir, JournalFile)); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadDir(cfg.Dir)
	for _, want := range []string{cfg.Dir + " is a sweep directory whose results.json is damaged", "journal.jsonl does not record trials a, b, c, d", "restore results.json", "tolaria train --resume --run-dir"} {
		if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("a damaged results.json and no journal: %v, want %q", err, want)
		}
	}
}

// TestASweepLeftByAFailedStartResumes: the directory a sweep of an
// earlier release left when it failed to start (sweep.yaml, an empty
// journal, no results.json) resumes: every trial starts.
func TestASweepLeftByAFailedStartResumes(t *testing.T) {
	cfg := sweepConfig(t, strings.Replace(testSweep, "epochs: 2", "epochs: 1", 1))
	for _, name := range []string{SweepFileCopy, JournalFile} {
		raw := cfg.Sweep.Raw
		if name == JournalFile {
			raw = nil
		}
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.Dir, name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, _ := runSweep(t, context.Background(), resumeConfig(t, cfg))
	if res.Counts["succeeded"] != 4 {
		t.Fatalf("a sweep left by a failed start, resumed: %v", res.Counts)
	}
	if disk := readResults(t, cfg.Dir); disk.Counts["succeeded"] != 4 {
		t.Errorf("its results.json: %v", disk.Counts)
	}
}

// TestASweepDirectoryOfAnotherKindIsNamed: --sweep-dir naming a file, a
// trial's run directory, a tolaria train run or a tolaria rl run is
// refused saying what it is and what to do with it.
func TestASweepDirectoryOfAnotherKindIsNamed(t *testing.T) {
	root := t.TempDir()
	write := func(path, text string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Dir(path)
	}
	file := filepath.Join(root, "file")
	write(file, "x")
	sweepDir := filepath.Join(root, "sweep")
	write(filepath.Join(sweepDir, SweepFileCopy), "base: {dataset: synthetic}\ntrials: [{name: a}]\n")
	write(filepath.Join(sweepDir, ResultsJSON), `{"trials": [{"name": "a"}]}`)
	trial := write(filepath.Join(sweepDir, "a", "config.yaml"), "data: {dataset: synthetic}\n")
	userFile := write(filepath.Join(root, "work", SweepFileCopy), "base: {dataset: synthetic}\ntrials: [{name: a}]\n")
	train := write(filepath.Join(root, "train", "config.yaml"), "data: {dataset: synthetic}\n")
	rl := write(filepath.Join(root, "rl", "config.yaml"), "env: CartPole-v1\nnum_agents: 1\nseed: 1\n")
	for _, c := range []struct{ dir, want string }{
		{file, file + " is a file, not a directory"},
		{trial, fmt.Sprintf(`is not a sweep directory: it is the run directory of trial "a" of the sweep in %s; continue the sweep with tolaria sweep --resume --sweep-dir %s, or this trial's run alone with tolaria train --resume --run-dir %s`, sweepDir, sweepDir, trial)},
		{train, "is not a sweep directory: it is a tolaria train run (it has config.yaml); continue it with tolaria train --resume --run-dir " + train},
		{rl, "is not a sweep directory: it is a tolaria rl run; continue it with tolaria rl --resume --run-dir " + rl},
		{root, "is not a sweep directory (it has no sweep.yaml or results.json)"},
		// A sweep file of the user's own named as a sweep keeps its copy.
		{userFile, userFile + " is not a sweep directory (it has no results.json)"},
	} {
		if _, _, err := LoadDir(c.dir); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadDir(%s): %v, want %q", c.dir, err, c.want)
		}
	}
	if _, err := planSweepDir(file, time.Now()); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), file+" is a file, not a directory") {
		t.Errorf("a new sweep in a file: %v", err)
	}
	if _, _, err := LoadDir(sweepDir); err != nil {
		t.Errorf("the sweep directory itself: %v", err)
	}
}

// TestADataRefusalNamesTheSweepFilesKey: a trial whose data files are
// missing is refused naming data.dir in the sweep file, not a flag of
// tolaria train that tolaria sweep does not have.
func TestADataRefusalNamesTheSweepFilesKey(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none")
	cfg := sweepConfig(t, "base: {dataset: fashion-mnist, schedule: {epochs: 1}, data: {dir: "+missing+"}}\ntrials: [{name: a}]\n")
	_, err := Prepare(context.Background(), cfg)
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "set data.dir in the sweep file") || strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("a trial without its data: %v", err)
	}
	if fileExists(cfg.Dir) {
		t.Errorf("a refused sweep made its directory %s", cfg.Dir)
	}
}

package rundir

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

var now = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// refused checks that err is a configuration refusal of the given kind
// that names key.
func refused(t *testing.T, err, kind error, key field.Name) {
	t.Helper()
	if !errors.Is(err, refusal.ErrConfig) || !errors.Is(err, kind) || !field.Is(err, key) {
		t.Fatalf("got %v; want %v about %s, wrapped in refusal.ErrConfig", err, kind, key)
	}
}

func writeCheckpoint(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, trainer.CheckpointFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPlanRunDirWritesNothing(t *testing.T) {
	t.Chdir(t.TempDir())
	d, err := Plan("", false, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join("runs", "20260304-050607"); d.Path() != want {
		t.Fatalf("generated %q, want %q", d.Path(), want)
	}
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Plan(dir, false, now); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"runs", dir} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("planning created %s", p)
		}
	}
}

func TestPlanRunDirRefusals(t *testing.T) {
	_, err := Plan("", true, now)
	if !errors.Is(err, refusal.ErrConfig) || !field.Is(err, "resume") || !strings.Contains(err.Error(), "run_dir") {
		t.Fatalf("resume without a directory: %v", err)
	}
	empty := t.TempDir()
	_, err = Plan(empty, true, now)
	refused(t, err, ErrNoCheckpoint, "resume")

	held := t.TempDir()
	writeCheckpoint(t, held)
	_, err = Plan(held, false, now)
	refused(t, err, ErrExists, "run_dir")
	if !strings.Contains(err.Error(), "use resume") {
		t.Errorf("the refusal does not say how to continue the run: %v", err)
	}
	if _, err := Plan(held, true, now); err != nil {
		t.Fatalf("resume of a run with a checkpoint: %v", err)
	}
}

func TestClaimLocksOutASecondRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	first := claimNew(t, dir)
	// flock(2) locks belong to open files, so a second claim from this
	// process is refused as one from another process would be.
	_, err := Plan(dir, false, now)
	refused(t, err, ErrBusy, "run_dir")
	if !strings.Contains(err.Error(), "pid ") {
		t.Errorf("the refusal does not name the owner: %v", err)
	}
	second := &Dir{path: dir}
	refused(t, second.Claim(), ErrBusy, "run_dir")

	releaseAndClaimAgain(t, first, dir)
}

// claimNew plans and claims dir for a fresh run.
func claimNew(t *testing.T, dir string) *Dir {
	t.Helper()
	d, err := Plan(dir, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Claim(); err != nil {
		t.Fatal(err)
	}
	return d
}

// releaseAndClaimAgain releases first, then plans and claims dir afresh,
// as the same command run again would.
func releaseAndClaimAgain(t *testing.T, first *Dir, dir string) {
	t.Helper()
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Plan(dir, false, now)
	if err != nil {
		t.Fatalf("planned again after the release: %v", err)
	}
	if err := again.Claim(); err != nil {
		t.Fatalf("claimed again after the release: %v", err)
	}
	_ = again.Release()
}

// TestClaimRechecksUnderTheLock: a run that appeared between planning and
// claiming is still refused.
func TestClaimRechecksUnderTheLock(t *testing.T) {
	dir := t.TempDir()
	d, err := Plan(dir, false, now)
	if err != nil {
		t.Fatal(err)
	}
	writeCheckpoint(t, dir)
	refused(t, d.Claim(), ErrExists, "run_dir")
	if err := d.Release(); err != nil {
		t.Fatal(err)
	}
	if again, err := Plan(dir, true, now); err != nil {
		t.Fatalf("a refused claim kept the lock: %v", err)
	} else if err := again.Claim(); err != nil {
		t.Fatalf("a refused claim kept the lock: %v", err)
	} else {
		again.Release()
	}
}

func TestGeneratedNamesAreNotShared(t *testing.T) {
	t.Chdir(t.TempDir())
	var paths []string
	for range 3 {
		d, err := Plan("", false, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Claim(); err != nil {
			t.Fatal(err)
		}
		defer d.Release()
		paths = append(paths, d.Path())
	}
	base := filepath.Join("runs", "20260304-050607")
	if want := []string{base, base + "-2", base + "-3"}; strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Fatalf("claimed %v, want %v", paths, want)
	}
}

func TestRunDirFiles(t *testing.T) {
	dir := t.TempDir()
	d, err := Plan(dir, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Claim(); err != nil {
		t.Fatal(err)
	}
	defer d.Release()
	path, err := d.WriteConfig([]byte("epochs: 2\n"), now)
	if err != nil || path != filepath.Join(dir, ConfigFile) {
		t.Fatalf("WriteConfig: %s, %v", path, err)
	}
	if err := d.WriteSummary(trainer.Summary{Steps: 7, ParamsSHA256: "abc", Interrupted: true}); err != nil { // a stopped run's
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, SummaryFile))
	if !strings.Contains(string(raw), `"steps": 7`) || !strings.HasSuffix(string(raw), "}\n") {
		t.Fatalf("summary.json:\n%s", raw)
	}
	ev, err := d.OpenEvents()
	if err != nil {
		t.Fatal(err)
	}
	ev.Close()
	if cks, err := d.Checkpoints(); err != nil || len(cks) != 0 {
		t.Fatalf("checkpoints of a new run: %v, %v", cks, err)
	}
	writeCheckpoint(t, dir)
	os.WriteFile(filepath.Join(dir, ".checkpoint.tlck.123.tmp"), nil, 0o644) // a write in progress
	if cks, err := d.Checkpoints(); err != nil || len(cks) != 1 || cks[0] != d.CheckpointPath() {
		t.Fatalf("checkpoints: %v, %v; want [%s]", cks, err, d.CheckpointPath())
	}

	// A resumed run keeps the run's config.yaml and records its own.
	_, err = Plan(dir, true, now)
	refused(t, err, ErrBusy, "run_dir")
	d.Release()
	resumed, err := Plan(dir, true, now)
	if err != nil {
		t.Fatal(err)
	}
	path, err = resumed.WriteConfig([]byte("epochs: 3\n"), now)
	if err != nil || filepath.Base(path) != "config.resume-20260304-050607.000.yaml" {
		t.Fatalf("WriteConfig on resume: %s, %v", path, err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, ConfigFile)); string(raw) != "epochs: 2\n" {
		t.Fatalf("resume replaced config.yaml with %q", raw)
	}
}

func TestWriteSummaryCreatesItsDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out", "sum.json")
	if err := WriteSummary(path, trainer.Summary{Device: "cpu"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

// TestFreshRunRefusesADirectoryOfSomeoneElses: files that no tolaria made
// (no lock file) are not overwritten; an empty directory, and one a
// tolaria run stopped before its first checkpoint, are taken.
func TestFreshRunRefusesADirectoryOfSomeoneElses(t *testing.T) {
	users := t.TempDir()
	for _, name := range []string{ConfigFile, SummaryFile} {
		if err := os.WriteFile(filepath.Join(users, name), []byte("mine\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Plan(users, false, now)
	refused(t, err, ErrNotARun, "run_dir")
	if !strings.Contains(err.Error(), ConfigFile) || !strings.Contains(err.Error(), "empty or new") {
		t.Errorf("the refusal does not name the files or what to do: %v", err)
	}
	d := &Dir{path: users}
	refused(t, d.Claim(), ErrNotARun, "run_dir")
	if raw, _ := os.ReadFile(filepath.Join(users, ConfigFile)); string(raw) != "mine\n" {
		t.Errorf("the user's %s was changed: %q", ConfigFile, raw)
	}

	if _, err := Plan(t.TempDir(), false, now); err != nil {
		t.Errorf("an empty directory: %v", err)
	}
	early := t.TempDir()
	first := &Dir{path: early}
	if err := first.Claim(); err != nil {
		t.Fatal(err)
	}
	if _, err := first.WriteConfig([]byte("epochs: 1\n"), now); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := Plan(early, false, now); err != nil {
		t.Errorf("a run stopped before its first checkpoint: %v", err)
	}
}

// TestClaimRemovesStaleTemporaryFiles: the temporary file of a write cut
// short (a checkpoint's, full-size) goes when the directory is claimed;
// the run's own files stay.
func TestClaimRemovesStaleTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoint(t, dir)
	if err := os.WriteFile(filepath.Join(dir, LockFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stale := []string{".checkpoint.tlck.123456.tmp", ".summary.json.99.tmp"}
	for _, name := range stale {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, 1<<16), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d, err := Plan(dir, true, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Claim(); err != nil {
		t.Fatal(err)
	}
	defer d.Release()
	for _, name := range stale {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s was left", name)
		}
	}
	if !slices.Equal(d.Stale(), stale) {
		t.Errorf("Stale() = %v, want %v", d.Stale(), stale)
	}
	if _, err := os.Stat(d.CheckpointPath()); err != nil {
		t.Errorf("the checkpoint went too: %v", err)
	}
}

// TestResumeOfAFinishedRunIsRefused: a run whose summary says it ended is
// not resumed; one with no summary (killed after its last checkpoint) or
// a stopped run's summary is.
func TestResumeOfAFinishedRunIsRefused(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoint(t, dir)
	d, err := Plan(dir, true, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CheckUnfinished(); err != nil {
		t.Fatalf("a run without a summary: %v", err)
	}
	if err := d.WriteSummary(trainer.Summary{Steps: 7, Interrupted: true}); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckUnfinished(); err != nil {
		t.Fatalf("a stopped run: %v", err)
	}
	if err := d.WriteSummary(trainer.Summary{Steps: 9}); err != nil {
		t.Fatal(err)
	}
	err = d.CheckUnfinished()
	refused(t, err, trainer.ErrCheckpoint, "resume")
	if !strings.Contains(err.Error(), "complete") {
		t.Errorf("the refusal does not say the run is complete: %v", err)
	}
}

// TestWorkerLogAloneIsNoRefusal: a directory holding only worker.log (a
// caller that opened the worker's log before the run) is taken; the log is
// appended to, never overwritten.
func TestWorkerLogAloneIsNoRefusal(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, WorkerLogFile), []byte("=== earlier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := Plan(dir, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Claim(); err != nil {
		t.Fatal(err)
	}
	d.Release()
}

// data.json records the dataset, its directory and its files with
// absolute paths, and reads back; a run without one reads as such.
func TestDataRecord(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadData(dir); ok || err != nil {
		t.Fatalf("a run without data.json: ok %v, %v", ok, err)
	}
	d, err := Plan(dir, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Claim(); err != nil {
		t.Fatal(err)
	}
	defer d.Release()
	t.Chdir(dir)
	files := []data.SourceFile{{Path: "corpus/a", Size: 3, SHA256: "aa"}, {Path: "corpus/b", Size: 4, SHA256: "bb"}}
	if err := d.WriteData(DataRecord{Dataset: "text", DataDir: "corpus", Files: files}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadData(dir)
	want := DataRecord{Dataset: "text", DataDir: filepath.Join(dir, "corpus"), Files: []data.SourceFile{
		{Path: filepath.Join(dir, "corpus/a"), Size: 3, SHA256: "aa"}, {Path: filepath.Join(dir, "corpus/b"), Size: 4, SHA256: "bb"}}}
	if !ok || err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadData: %+v, %v, %v; want %+v", got, ok, err, want)
	}
	if files[0].Path != "corpus/a" {
		t.Error("WriteData changed its caller's files")
	}
	if err := d.WriteData(DataRecord{Dataset: "synthetic"}); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, DataFile)); !strings.Contains(string(raw), `"files": []`) || strings.Contains(string(raw), "data_dir") {
		t.Errorf("the synthetic dataset's data.json:\n%s", raw)
	}
	os.WriteFile(filepath.Join(dir, DataFile), []byte("{"), 0o644)
	if _, _, err := ReadData(dir); err == nil || !strings.Contains(err.Error(), DataFile) {
		t.Errorf("a damaged data.json: %v", err)
	}
}

// Spec reads a run's config.yaml in the nested layout, and in the flat
// one a run of an earlier release recorded.
func TestSpecReadsNestedAndFlatConfig(t *testing.T) {
	for name, text := range map[string]string{
		"nested": "data: {dataset: synthetic}\nschedule: {epochs: 3}\noptimizer: {kind: sgd, lr: 0.05}\nmodel: {hidden: [8]}\nrun_dir: elsewhere\nresume: true\n",
		"flat":   "dataset: synthetic\nepochs: 3\noptimizer: sgd\nlr: 0.05\nmodel: {hidden: [8]}\nrun_dir: elsewhere\nresume: true\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Spec(dir)
			if err != nil {
				t.Fatal(err)
			}
			if s.Dataset != "synthetic" || s.Epochs != 3 || s.Optimizer != "sgd" || s.LR != 0.05 || len(s.Hidden) != 1 || s.RunDir != dir || s.Resume {
				t.Errorf("read %+v", s)
			}
		})
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ConfigFile), []byte("epochs: 0\n"), 0o644)
	if _, err := Spec(dir); !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "epochs: must be in 1..10000") || strings.Contains(err.Error(), "schedule.epochs") {
		t.Errorf("a flat config.yaml out of bounds: %v, want its flat key named", err)
	}
}

// Package rundir is a run's directory: its files, its lock, the refusals
// of a directory a run cannot take, and the job its config.yaml records.
// Every coordinator activity that writes a run uses it.
package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Files of a run directory.
const (
	ConfigFile  = "config.yaml"
	EventsFile  = "events.jsonl"
	SummaryFile = "summary.json"
	// WorkerLogFile receives the worker process's standard error and
	// structured log, appended by every start with a header line.
	WorkerLogFile = "worker.log"
	// LockFile marks a run directory in use; the lock goes with the
	// process, however it ends.
	LockFile = ".tolaria.lock"
	// checkpointExt ends the name of every checkpoint file.
	checkpointExt = ".tlck"
)

// Refusals of a run directory, each inside a field.Error that names the
// setting to change (run_dir or resume) and wrapped in ErrConfig.
var (
	ErrBusy         = errors.New("in use by another tolaria")
	ErrExists       = errors.New("already holds a run")
	ErrNoCheckpoint = errors.New("has no checkpoint")
	ErrNotARun      = errors.New("holds files that are not a tolaria run's")
)

// Dir is one run's directory: config.yaml, events.jsonl, the
// checkpoint and summary.json. A run plans it (nothing is written), then
// claims it (created and locked against a second tolaria) before writing.
type Dir struct {
	path      string
	resume    bool
	generated bool // named runs/<time> by Plan; Claim may add a suffix
	lock      *flock.Flock
	stale     []string // temporary files of interrupted writes, removed by Claim
}

// Plan checks a run directory before anything is written: a fresh
// run refuses one that already holds a run, so nothing of an earlier run
// is overwritten; a resumed run needs its checkpoint. An empty dir names
// runs/<now> without creating it.
func Plan(dir string, resume bool, now time.Time) (*Dir, error) {
	if dir == "" {
		if resume {
			return nil, refusal.Config(field.Errorf("resume", "needs %s pointing at the run to resume", field.Name("run_dir")))
		}
		return &Dir{path: filepath.Join("runs", now.UTC().Format("20060102-150405")), generated: true}, nil
	}
	d := &Dir{path: dir, resume: resume}
	if owner, busy := d.busy(); busy {
		return nil, d.busyErr(owner)
	}
	return d, d.check()
}

// Path is the directory; after Claim, the one created.
func (d *Dir) Path() string { return d.path }

// busy reports whether another process holds the directory's lock, and
// what it wrote there. It creates nothing.
func (d *Dir) busy() (owner string, busy bool) {
	l := flock.New(filepath.Join(d.path, LockFile), flock.SetFlag(os.O_RDONLY))
	ok, err := l.TryRLock()
	if err != nil { // no lock file: nobody has claimed the directory
		return "", false
	}
	if ok {
		_ = l.Close()
		return "", false
	}
	return d.owner(), true
}

func (d *Dir) owner() string {
	raw, _ := os.ReadFile(filepath.Join(d.path, LockFile))
	return strings.TrimSpace(string(raw))
}

func (d *Dir) busyErr(owner string) error {
	return refusal.Config(field.Errorf("run_dir", "%s is %w (%s); wait for it or choose another %s",
		d.path, ErrBusy, owner, field.Name("run_dir")))
}

// check refuses a directory of another kind (CheckKind), a fresh run in a
// directory that holds one, or that holds files of someone else's (a
// tolaria run directory has its lock file from the start), and a resumed
// run in one without a checkpoint.
func (d *Dir) check() error {
	use := UseNew
	if d.resume {
		use = UseResume
	}
	if err := CheckKind(d.path, use); err != nil {
		return err
	}
	_, err := os.Stat(d.CheckpointPath())
	switch {
	case !d.resume && err == nil && d.finished():
		// --resume would be refused too: say so now, not after it.
		return refusal.Config(field.Errorf("run_dir", "%s %w, and it is complete (its %s says so): there is nothing to resume, and a run resumes only with the settings it was written with (its epochs included); choose another %s for a new run",
			d.path, ErrExists, SummaryFile, field.Name("run_dir")))
	case d.resume && errors.Is(err, os.ErrNotExist):
		return refusal.Config(field.Errorf("resume", "%s %w (%s); start without %s or point %s at an earlier run",
			d.path, ErrNoCheckpoint, trainer.CheckpointFile, field.Name("resume"), field.Name("run_dir")))
	case !d.resume && err == nil:
		return refusal.Config(field.Errorf("run_dir", "%s %w (%s); use %s to continue it, or choose another %s",
			d.path, ErrExists, trainer.CheckpointFile, field.Name("resume"), field.Name("run_dir")))
	case !d.resume:
		return d.checkOwn()
	}
	return nil
}

// CheckIdle refuses the run directory dir when another tolaria holds it
// (a run training in it, an evaluation of it), naming the holder: what
// it writes would change the run under a reader. todo says what to do
// instead. It creates nothing.
func CheckIdle(dir, todo string) error {
	d := &Dir{path: dir}
	if owner, busy := d.busy(); busy {
		return d.busyTodo(owner, todo)
	}
	return nil
}

// CheckFree refuses the run directory dir, for a run of its own, when
// another tolaria holds it, naming the holder as Plan does: wait for it
// or choose another run_dir. An activity that locks its directory itself
// (tolaria rl) calls it before anything else about the directory, since
// every other answer would be refused in turn. It creates nothing.
func CheckFree(dir string) error {
	d := &Dir{path: dir}
	if owner, busy := d.busy(); busy {
		return d.busyErr(owner)
	}
	return nil
}

// Hold locks the existing run directory dir for an activity that reads
// the run and writes beside it (activity names it, "tolaria eval"): a
// directory another tolaria holds is refused as CheckIdle refuses it,
// and while dir is held a run (or another such activity) is refused in
// turn, naming the activity. Release gives it back.
func Hold(dir, activity, todo string) (*Dir, error) {
	d := &Dir{path: dir, resume: true}
	l := flock.New(filepath.Join(dir, LockFile), flock.SetPermissions(0o644))
	ok, err := l.TryLock()
	if err != nil {
		return nil, d.claimFailed(err)
	}
	if !ok {
		return nil, d.busyTodo(d.owner(), todo)
	}
	if err := os.WriteFile(l.Path(), fmt.Appendf(nil, "pid %d, %s", os.Getpid(), activity), 0o644); err != nil {
		_ = l.Close()
		return nil, d.claimFailed(err)
	}
	d.lock = l
	return d, nil
}

func (d *Dir) busyTodo(owner, todo string) error {
	return refusal.Config(field.Errorf("run_dir", "%s is %w (%s); %s", d.path, ErrBusy, owner, todo))
}

// CheckUnfinished refuses to resume a run that ended and kept its summary
// (one that was not interrupted). A run killed after its last checkpoint
// has none, and resuming it finishes it. A run calls it once its
// checkpoint has been checked against the configuration, so a checkpoint
// of another model is refused as such first.
func (d *Dir) CheckUnfinished() error {
	if d.resume && d.finished() {
		return refusal.Config(field.Errorf("resume", "%s: %w: the run is complete (its %s says so); there is nothing to resume; start a new run in another %s",
			d.path, trainer.ErrCheckpoint, SummaryFile, field.Name("run_dir")))
	}
	return nil
}

func (d *Dir) finished() bool {
	raw, err := os.ReadFile(filepath.Join(d.path, SummaryFile))
	if err != nil {
		return false
	}
	var s struct {
		Interrupted bool `json:"interrupted"`
	}
	return json.Unmarshal(raw, &s) == nil && !s.Interrupted
}

// checkOwn refuses an existing directory with files in it and no lock
// file: not a tolaria run, so not tolaria's to write into.
func (d *Dir) checkOwn() error {
	entries, err := os.ReadDir(d.path)
	if err != nil {
		return nil // none yet: a fresh run makes it its own
	}
	var names []string
	for _, e := range entries {
		// A checkpoint makes it a run (check says which refusal applies).
		if e.Name() == LockFile || e.Name() == trainer.CheckpointFile {
			return nil
		}
		if e.Name() == WorkerLogFile {
			continue // appended to, never overwritten: the caller's, or a run's started early
		}
		names = append(names, e.Name())
	}
	if len(names) == 0 {
		return nil
	}
	if len(names) > 5 {
		names = append(names[:5], "...")
	}
	return refusal.Config(field.Errorf("run_dir", "%s %w (%s) and was not made by tolaria, which would overwrite them; give an empty or new %s",
		d.path, ErrNotARun, strings.Join(names, ", "), field.Name("run_dir")))
}

// Claim creates the directory (a generated name gets a suffix rather than
// sharing a directory with a run started in the same second), locks it
// against a second tolaria and checks it again under the lock. Release
// gives it back.
func (d *Dir) Claim() error {
	if err := d.create(); err != nil {
		return d.claimFailed(err)
	}
	if !d.resume {
		// Before the lock file exists, which marks the directory tolaria's.
		if err := d.checkOwn(); err != nil {
			return err
		}
	}
	l := flock.New(filepath.Join(d.path, LockFile), flock.SetPermissions(0o644))
	ok, err := l.TryLock()
	if err != nil {
		return d.claimFailed(err)
	}
	if !ok {
		return d.busyErr(d.owner())
	}
	// flock(2) locks belong to the open file, so writing the owner through
	// another descriptor keeps the lock.
	if err := os.WriteFile(l.Path(), fmt.Appendf(nil, "pid %d", os.Getpid()), 0o644); err != nil {
		_ = l.Close()
		return d.claimFailed(err)
	}
	if err := d.check(); err != nil {
		_ = l.Close()
		return err
	}
	d.lock = l
	d.removeStale()
	return nil
}

// removeStale removes the temporary files that writes cut short (a kill
// during a checkpoint's write leaves a full-size one) left behind. Only
// the lock's holder writes in the directory, so none is in use.
func (d *Dir) removeStale() {
	entries, _ := os.ReadDir(d.path)
	for _, e := range entries {
		if name := e.Name(); e.Type().IsRegular() && atomicfile.IsTemp(name) {
			if os.Remove(filepath.Join(d.path, name)) == nil {
				d.stale = append(d.stale, name)
			}
		}
	}
}

// Stale lists the temporary files Claim removed.
func (d *Dir) Stale() []string { return d.stale }

func (d *Dir) create() error {
	if !d.generated {
		return os.MkdirAll(d.path, 0o755)
	}
	base := d.path
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return err
	}
	for i := 2; ; i++ {
		err := os.Mkdir(d.path, 0o755)
		if err == nil || !errors.Is(err, os.ErrExist) || i > 1000 {
			return err
		}
		d.path = fmt.Sprintf("%s-%d", base, i)
	}
}

// Release unlocks a claimed directory.
func (d *Dir) Release() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}

// WriteConfig records the resolved configuration (raw, in the layout of a
// configuration file). A resumed run keeps the original config.yaml, the
// base of its own configuration, and records its own next to it.
func (d *Dir) WriteConfig(raw []byte, now time.Time) (string, error) {
	name := ConfigFile
	if d.resume {
		name = fmt.Sprintf("config.resume-%s.yaml", now.UTC().Format("20060102-150405.000"))
	}
	path := filepath.Join(d.path, name)
	return path, atomicfile.WriteFile(path, raw, 0o644)
}

// OpenEvents opens the events log for appending.
func (d *Dir) OpenEvents() (*os.File, error) {
	return os.OpenFile(filepath.Join(d.path, EventsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
}

// OpenWorkerLog opens the worker's log for appending.
func (d *Dir) OpenWorkerLog() (*os.File, error) {
	return os.OpenFile(filepath.Join(d.path, WorkerLogFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
}

// WriteSummary records the run's outcome as summary.json.
func (d *Dir) WriteSummary(s trainer.Summary) error {
	return WriteSummary(filepath.Join(d.path, SummaryFile), s)
}

// CheckpointPath is where the trainer keeps the run's checkpoint.
func (d *Dir) CheckpointPath() string { return filepath.Join(d.path, trainer.CheckpointFile) }

// ResumableStep is the step of the run's checkpoint when it is one a run
// can be resumed from (it loads and verifies), and false when there is
// none or it is damaged.
func (d *Dir) ResumableStep() (int, bool) {
	ck, err := trainer.LoadCheckpoint(d.CheckpointPath())
	if err != nil {
		return 0, false
	}
	return ck.Step, true
}

// Checkpoints lists the checkpoint files in the directory, sorted.
func (d *Dir) Checkpoints() ([]string, error) {
	entries, err := os.ReadDir(d.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), checkpointExt) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(d.path, e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

// WriteSummary writes s as indented JSON to path, creating its directory.
func WriteSummary(path string, s trainer.Summary) error {
	raw, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(raw, '\n'), 0o644)
}

// DataFile records the files a run's data was read from.
const DataFile = "data.json"

// DataRecord is data.json: the dataset a run trained on and the files it
// read, each with its size and SHA-256 as the training process read it
// (none for the synthetic dataset, which is made from the seed). An
// evaluation compares the files it reads with them.
type DataRecord struct {
	Dataset string            `json:"dataset"`
	DataDir string            `json:"data_dir,omitempty"`
	Files   []data.SourceFile `json:"files"`
}

// WriteData records the run's data as data.json, its paths made
// absolute (a relative one says nothing once read from another
// directory). A resumed run writes it again: its training set is the
// checkpoint's (the checkpoint's fingerprint refuses another), and the
// record says what the latest start read.
func (d *Dir) WriteData(r DataRecord) error {
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	if r.DataDir != "" {
		r.DataDir = abs(r.DataDir)
	}
	files := make([]data.SourceFile, len(r.Files))
	for i, f := range r.Files {
		files[i] = f
		files[i].Path = abs(f.Path)
	}
	r.Files = files
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(d.path, DataFile), append(raw, '\n'), 0o644)
}

// ReadData reads the data.json of the run in dir; ok is false when the run
// has none (one trained before runs recorded their files).
func ReadData(dir string) (r DataRecord, ok bool, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, DataFile))
	if errors.Is(err, os.ErrNotExist) {
		return DataRecord{}, false, nil
	}
	if err != nil {
		return DataRecord{}, false, err
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return DataRecord{}, false, fmt.Errorf("%s: %w", filepath.Join(dir, DataFile), err)
	}
	return r, true, nil
}

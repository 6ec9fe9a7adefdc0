// Package sweep runs a sweep for the tolaria command: it reads the sweep
// file, places each trial on a device slot through the launcher, runs it
// as a training run (package train) with a device-memory budget from the
// broker (package budget), and keeps results.json, results.csv and the
// journal that lets an interrupted sweep resume. It registers its own
// metric families and knows no other activity.
package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/job/jobconfig"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Config is a sweep as a command asks for it.
type Config struct {
	Sweep *Sweep
	// Dir is the sweep directory; "" names sweeps/<time>. It must not
	// exist or be empty, unless Resume.
	Dir string
	// Resume continues the sweep in Dir (Sweep is the one LoadDir
	// read from it): succeeded trials are kept as they are, interrupted
	// and failed ones resume from their checkpoints (or start again
	// without one) and pending ones start.
	Resume bool
	// Device is auto, cpu or cuda. auto takes GPU 0 when a CUDA worker can
	// open one (GPUs, when given, name more), and the CPU otherwise.
	Device string
	// GPUs are the CUDA devices to use, by index (CUDA_VISIBLE_DEVICES).
	GPUs []int
	// PerDevice is how many trials share a device at once; 0 means one on
	// a GPU and Parallel on the CPU.
	PerDevice int
	// Parallel bounds the trials running at once; 0 means one per device
	// slot (devices times PerDevice).
	Parallel int
	// Retries is how many times a failed trial starts again, from its
	// checkpoint when it has one.
	Retries int
	// RankBy is the summary key trials are ranked by (see RankKeys).
	RankBy string
	// Worker is the tolaria-worker binary; "" looks next to this program.
	Worker string
	// WorkerStart bounds a worker's start-up (see Placement).
	WorkerStart time.Duration
	// HeartbeatTimeout is how long a trial's worker may be silent, or make
	// no progress, before it is taken for hung, killed and its trial
	// failed (see Placement);
	// 0 is worker.DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// MetricsAddr serves the sweep's /metrics there (see
	// telemetry.ListenAddress): its trials by state, failures by reason,
	// retries and workers' heartbeat ages, and every trial's training
	// metrics with a trial label; "" serves none.
	MetricsAddr string
	// DeviceMemory caps the device memory the trials' budgets may take on
	// each device, in bytes; 0 takes what the device reports free. On the
	// CPU it stands in for a GPU's memory (see budget.Config).
	DeviceMemory int64
	// MinResidence is the least time a trial keeps its device-memory
	// budget before the broker may park it to make room for a trial of
	// its own priority (see budget.Config); 0 is
	// budget.DefaultMinResidence.
	MinResidence time.Duration
	// PriorityKey, when set, gives each trial the value of this key among
	// its overrides (a number) as its priority for device memory, in
	// place of its priority: (see Trial.Priority).
	PriorityKey string
	// Launch is where trials run, its settings bound in (see launch.Named):
	// the zero Kind is worker processes on this machine; Slurm's submits
	// tasks of a job array, Parallel then the array's limit of tasks
	// running at once (0: none), each task on CUDA asking for one GPU.
	Launch launch.Kind
	// ReuseWorkers keeps each local worker process for the trials that
	// follow on its device slot (tolaria-worker serve --keep), a free slot
	// taking the next trial of the shape an idle worker holds, so each
	// shape's trials run one after another on one worker (see
	// trialQueue): the worker keeps its device, driver context and graph
	// pool, resets between trials, and a trial of the same step signature
	// as the one before captures by updating the pooled executables. Results are
	// bitwise those of a worker per trial. Local launcher only.
	ReuseWorkers bool
	// DryRun prepares nothing: Prepare checks everything and returns a
	// Run whose DryRun says what would be submitted (Slurm only).
	DryRun  bool
	Version string
	Logger  *slog.Logger
	// Report receives every change of a trial (start, progress, end), one
	// at a time, for a display; nil reports nothing.
	Report func(TrialUpdate)

	// writeResultsFiles writes results.json and results.csv into a
	// directory; nil is Results.write. The package's tests give one that
	// fails, as a full disk does.
	writeResultsFiles func(r Results, dir string) error
	// hooks are the package's tests' seams into the claim of the sweep
	// directory; the zero value is the real thing.
	hooks claimHooks
	// rankByGiven: RankBy was given for this run (see Load), not the
	// default; said of a ranking rebuilt with it.
	rankByGiven bool
}

// claimHooks let the package's tests act where another tolaria, or a
// failing machine, could act during a sweep's claim of its directory.
type claimHooks struct {
	// beforeClaim runs once everything is checked, just before the
	// directory is claimed: the time a worker's checks take, in which
	// another sweep may take or fill the directory.
	beforeClaim func()
	// mkdir stands in for os.Mkdir, flock for the exclusive lock of the
	// lock file l, a refusal tried again briefly (tryLock; false: another
	// still holds it).
	mkdir func(path string) error
	flock func(l *flock.Flock) (bool, error)
	// removed is told of each entry unclaim removes, in turn.
	removed func(path string)
	// now is the time a sweep given no directory is named by.
	now func() time.Time
}

func (h claimHooks) makeDir(path string) error {
	if h.mkdir != nil {
		return h.mkdir(path)
	}
	return os.Mkdir(path, 0o755)
}

func (h claimHooks) lock(l *flock.Flock) (bool, error) {
	if h.flock != nil {
		return h.flock(l)
	}
	return tryLock(l, lockFor)
}

// TrialUpdate is a change of one trial.
type TrialUpdate struct {
	Trial   string
	Index   int // the trial's place in the sweep
	State   TrialState
	Device  string
	Attempt int
	// Progress is set while the trial trains.
	Progress *trainer.Progress
	// Result is set when the trial ends.
	Result *TrialResult
	// Budget is set when the trial's device-memory request starts to wait,
	// or is granted after a wait.
	Budget *BudgetUpdate
}

// Validate checks the settings, naming the one at fault in a field.Error
// wrapped in refusal.ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Sweep == nil || len(c.Sweep.Trials) == 0:
		return refusal.Config(errors.New("sweep: no trials"))
	case c.Device != "auto" && c.Device != "cpu" && c.Device != "cuda":
		return refusal.Config(field.Errorf("device", "must be auto, cpu or cuda, got %q", c.Device))
	case c.Device == "cpu" && len(c.GPUs) > 0:
		return refusal.Config(field.Errorf("devices", "names GPUs, which %s cpu does not use; give one or the other", field.Name("device")))
	case c.PerDevice < 0:
		return refusal.Config(field.Errorf("per_device", "must be at least 1, got %d", c.PerDevice))
	case c.Parallel < 0:
		return refusal.Config(field.Errorf("parallel", "must be at least 1, got %d", c.Parallel))
	case c.DeviceMemory < 0:
		return refusal.Config(field.Errorf("device_memory", "cannot be negative (%d); give a size such as 8GiB, or 0 for what the device reports", c.DeviceMemory))
	case c.MinResidence < 0:
		return refusal.Config(field.Errorf("min_residence", "cannot be negative (%s); give a duration such as 10s, or 0 for the default", c.MinResidence))
	case c.Retries < 0 || c.Retries > 100:
		return refusal.Config(field.Errorf("retries", "must be in 0..100, got %d", c.Retries))
	case c.ReuseWorkers && c.Launch.OrLocal().Name != launch.LocalName:
		return refusal.Config(field.Errorf("reuse_workers", "keeps worker processes on this machine; the %s launcher starts a task per trial; leave it off with %s %s",
			c.Launch.OrLocal().Name, field.Name("launcher"), c.Launch.OrLocal().Name))
	}
	kind := c.Launch.OrLocal()
	if kind.Check != nil {
		if err := kind.Check(c.launchConfig(c.Dir, c.Worker, nil)); err != nil {
			return err
		}
	}
	if _, ok := rankKeys[c.RankBy]; !ok {
		return refusal.Config(field.Errorf("rank_by", "must be one of %s, got %q", strings.Join(RankKeys(), ", "), c.RankBy))
	}
	if c.MetricsAddr != "" {
		// A malformed address is refused here; a busy port when it is bound.
		if _, err := telemetry.ListenAddress(c.MetricsAddr); err != nil {
			return refusal.Config(field.Errorf("metrics_addr", "%s: %w", c.MetricsAddr, err))
		}
	}
	seen := map[int]bool{}
	for _, g := range c.GPUs {
		if g < 0 || seen[g] {
			return refusal.Config(field.Errorf("devices", "must list distinct GPU indices such as 0,1, got %v", c.GPUs))
		}
		seen[g] = true
	}
	if devices, per := len(c.GPUs), c.PerDevice; devices > 0 && per > 0 && c.Parallel > devices*per {
		return refusal.Config(field.Errorf("parallel", "%d is more than the %d device slots (%d GPUs times %s %d); raise %s or lower %s",
			c.Parallel, devices*per, devices, field.Name("per_device"), per, field.Name("per_device"), field.Name("parallel")))
	}
	return nil
}

// launchConfig is the sweep's placement as its launcher takes it: dir
// is the sweep directory, path the worker binary.
func (c Config) launchConfig(dir, path string, log *slog.Logger) launch.Config {
	names := make([]string, len(c.Sweep.Trials))
	for i, t := range c.Sweep.Trials {
		names[i] = t.Name
	}
	kind := c.Launch.OrLocal()
	return launch.Config{Worker: path, Device: c.Device, GPUs: c.GPUs, PerDevice: c.PerDevice, Parallel: c.Parallel,
		Workers: len(c.Sweep.Trials), DeviceMemory: c.DeviceMemory, Dir: dir, DirField: "sweep_dir", Own: filepath.Join(dir, kind.Name),
		Names: names, WorkerStart: c.WorkerStart, HeartbeatTimeout: c.HeartbeatTimeout, Probe: true, DryRun: c.DryRun, Logger: log}
}

// trialWorker is trial i's worker: its spools and worker.log in its run
// directory.
func (s *Run) trialWorker(i int, t Trial) launch.Worker {
	dir := filepath.Join(s.dir, t.Name)
	return launch.Worker{Index: i, Spools: filepath.Join(dir, "spool"), Log: filepath.Join(dir, "worker.log")}
}

// Run is a sweep prepared: validated, its directory claimed and its
// trials' configurations written. Run runs it.
type Run struct {
	cfg  Config
	dir  string
	file string // the sweep file results.json names
	lock *lockFile
	// named is when a sweep given no directory was named (sweeps/<time>).
	named time.Time
	// claimed: the lock is this sweep's; madeDir is the outermost
	// directory it made for dir, dir itself or a parent ("": dir was
	// there), which a failed start removes.
	claimed bool
	madeDir string
	// lockBefore is what the lock file said before this sweep wrote its
	// own holder there, which a sweep refused after its claim puts back.
	lockBefore []byte
	slots      *launch.Slots
	log        *slog.Logger
	// metrics are the sweep's, shared by its trials' runs; they serve
	// nothing without Config.MetricsAddr.
	metrics *train.Metrics
	// families are the sweep's own metric families on metrics' registry;
	// nil when metrics serve nothing.
	families *sweepFamilies
	// broker keeps the books of device memory between the trials' workers.
	broker *budget.Broker
	// launcher places and starts the trials' workers.
	launcher launch.Launcher
	// planned are the trials' checks by a worker (checkTrials), by index.
	planned []jobserver.Planned

	mu   sync.Mutex // guards rows, counts and their metrics
	rows []TrialResult
	// counts are the rows by state, kept as the rows change.
	counts map[TrialState]int
	// changed wakes Run's results writer when a row has changed.
	changed chan struct{}
	// pace bounds how often the results files are rewritten. Only their
	// one writer at a time uses it and writes: Prepare, then Run's
	// results writer, then Run's end.
	pace resultsPace
	// writes counts the rewrites of the results files.
	writes int
	// sideBySide is how many trials run at once on this machine's CPU,
	// which divide its cores (see cpuThreads); set by Run.
	sideBySide int
	// journal records attempts' starts and trials' ends as they happen;
	// journalErr is its first failure (guarded by mu).
	journal    *journal
	journalErr error

	reportMu sync.Mutex // Report sees one update at a time

	// kept are the workers kept for later trials (Config.ReuseWorkers).
	kept keptWorkers
}

// Prepare checks everything before anything is written (the
// settings, every trial's job on its data, the device) and then claims
// the sweep directory and writes the sweep file, each trial's resolved
// configuration (trials/<name>.yaml) and results.json with every trial
// pending. Close releases the directory.
func Prepare(ctx context.Context, cfg Config) (_ *Run, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Run{cfg: cfg, log: cfg.Logger, file: cfg.Sweep.Path, changed: make(chan struct{}, 1),
		pace: resultsPace{minGap: resultsMinGap, ratio: resultsCostRatio}}
	changed := func(device string) { s.families.budgetBooks(device, s.broker.Books(device)) }
	if err := setPriorities(cfg.Sweep, cfg.PriorityKey); err != nil {
		return nil, err
	}
	if s.broker, err = budget.New(budget.Config{DeviceMemory: cfg.DeviceMemory, MinResidence: cfg.MinResidence, Changed: changed}); err != nil {
		return nil, err
	}
	// A directory another tolaria holds is said to be so first: a new
	// sweep and --resume are refused there alike, whatever it holds.
	if err := checkFree(cfg.Dir); err != nil {
		return nil, err
	}
	if cfg.Resume {
		if _, _, err := LoadDir(cfg.Dir); err != nil {
			return nil, err
		}
		s.dir = cfg.Dir
	} else {
		s.named = time.Now()
		if cfg.hooks.now != nil {
			s.named = cfg.hooks.now()
		}
		if s.dir, err = planSweepDir(cfg.Dir, s.named); err != nil {
			return nil, err
		}
	}
	if err := checkPathLengths(s.dir, cfg.Sweep.Trials); err != nil {
		return nil, err
	}
	path, err := worker.Find(cfg.Worker)
	if err != nil {
		// Every trial runs in a worker process, CPU trials too.
		return nil, refusal.Setup(fmt.Errorf("a sweep runs each trial in a tolaria-worker process: %w", err))
	}
	if s.planned, err = checkTrials(ctx, cfg.Sweep, &worker.Process{Path: path, HelloTimeout: cfg.WorkerStart, HeartbeatTimeout: cfg.HeartbeatTimeout}); err != nil {
		return nil, err
	}
	if err := s.place(ctx, path); err != nil {
		return nil, err
	}
	if cfg.DryRun {
		ws := make([]launch.Worker, len(cfg.Sweep.Trials))
		for i, t := range cfg.Sweep.Trials {
			ws[i] = s.trialWorker(i, t)
		}
		s.launcher.Plan(ws)
		return s, nil
	}
	// Bound before anything is written, so a busy port leaves no trace.
	if s.metrics, s.families, err = serveSweepMetrics(ctx, cfg.MetricsAddr, cfg.Version, s.log); err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			return
		}
		switch {
		case s.claimed && !cfg.Resume && !fileExists(filepath.Join(s.dir, ResultsJSON)):
			err = s.unclaim(err)
		case s.claimed:
			// A refused sweep leaves the lock file saying what it said.
			_ = s.lock.write(s.lockBefore)
		}
		_ = s.Close()
	}()
	if cfg.hooks.beforeClaim != nil {
		cfg.hooks.beforeClaim()
	}
	planned := s.dir
	if err := s.claim(); err != nil {
		return nil, err
	}
	if s.dir != planned {
		// Another sweep took the name meanwhile; this one's is the next.
		if err := s.place(ctx, path); err != nil {
			return nil, err
		}
	}
	if s.journal, err = openJournal(s.dir); err != nil {
		return nil, err
	}
	if cfg.Resume {
		return s, s.loadRows()
	}
	return s, s.writeFiles()
}

// place makes the launcher of the sweep's trials in its directory, with
// the worker binary path, and takes its slots.
func (s *Run) place(ctx context.Context, path string) error {
	launcher, err := s.cfg.Launch.OrLocal().New(ctx, s.cfg.launchConfig(s.dir, path, s.log))
	if err != nil {
		return err
	}
	all, err := launcher.Slots(ctx)
	if err != nil {
		return err
	}
	s.launcher, s.slots = launcher, launch.NewSlots(all)
	return nil
}

// unclaim removes what a new sweep wrote before it failed to start (its
// results.json not yet in place): a directory it made, with any parent it
// made, or its own entries in a directory that was there, empty, before.
// Left as it was, nothing accepted the directory: a new sweep found it not
// empty, --resume no sweep in it. The lock file goes last, still held:
// gone sooner, a second sweep could lock a new one and have its own files
// removed by this one. It returns err saying what was done.
func (s *Run) unclaim(err error) error {
	if s.journal != nil {
		_ = s.journal.close()
		s.journal = nil
	}
	var rmErr error
	entries, _ := os.ReadDir(s.dir)
	for _, e := range entries {
		name := e.Name()
		ours := s.madeDir != "" || slices.Contains(reservedNames(), name) || atomicfile.IsTemp(name)
		if ours && name != sweepLock {
			rmErr = errors.Join(rmErr, s.removeEntry(filepath.Join(s.dir, name)))
		}
	}
	if rmErr == nil {
		rmErr = s.removeEntry(s.lock.Path())
	}
	removed, taken := false, false
	if rmErr == nil && s.madeDir != "" {
		// Not empty: another sweep has taken the directory since its lock
		// file went, and it is that one's now.
		if e := os.Remove(s.dir); e == nil {
			removed = true
			removeParents(s.dir, s.madeDir)
		} else if errors.Is(e, syscall.ENOTEMPTY) || errors.Is(e, fs.ErrExist) {
			taken = true
		} else {
			rmErr = e
		}
	}
	switch {
	case rmErr != nil:
		return fmt.Errorf("%w; the sweep did not start, and what it wrote in %s could not be removed (%v): remove it, then run the same command again", err, s.dir, rmErr)
	case removed:
		return fmt.Errorf("%w; the sweep did not start: %s, made for it, is removed, so the same command can run again once the cause is fixed", err, s.dir)
	case taken:
		return fmt.Errorf("%w; the sweep did not start: what it wrote in %s is removed, but the directory, made for it, is left: another tolaria has taken it since; once the cause is fixed, run the same command with another %s",
			err, s.dir, field.Name("sweep_dir"))
	}
	return fmt.Errorf("%w; the sweep did not start: what it wrote in %s is removed (the directory is empty again), so the same command can run again once the cause is fixed", err, s.dir)
}

// removeEntry removes path, an entry of the sweep directory, whole.
func (s *Run) removeEntry(path string) error {
	err := os.RemoveAll(path)
	if err == nil && s.cfg.hooks.removed != nil {
		s.cfg.hooks.removed(path)
	}
	return err
}

// removeParents removes the parents of dir up to made, the outermost
// directory made for it, while they are empty: another sweep may have
// made its own directory in sweeps/ meanwhile.
func removeParents(dir, made string) {
	for p := filepath.Dir(filepath.Clean(dir)); len(p) >= len(made); p = filepath.Dir(p) {
		if os.Remove(p) != nil {
			return
		}
	}
}

// DryRun is, for a sweep prepared with Config.DryRun, the batch
// script of its job array and the sbatch command that would submit it.
func (s *Run) DryRun() (script string, command []string) {
	if s.launcher == nil {
		return "", nil
	}
	return s.launcher.Describe()
}

// ErrNothingToResume is LoadDir's and Prepare's answer for a
// sweep whose every trial succeeded.
var ErrNothingToResume = errors.New("nothing to resume: every trial succeeded")

// LoadDir reads the sweep a sweep directory holds (its sweep.yaml)
// and its results.json, refusing a directory that is not a sweep's (and
// naming what it is: a file, a training run, a trial's run). The rows
// are as the file has them: their run directories and configurations are
// where the sweep was when it wrote them (a resumed sweep places them in
// the directory as it is now). A results.json that is missing or damaged is
// rebuilt from the journal when the journal records every trial that has
// a run directory (see rebuildResults); the rebuilt Results' Damaged says
// why, and its RankBy is "".
func LoadDir(dir string) (*Sweep, Results, error) {
	var res Results
	if dir == "" {
		return nil, res, refusal.Config(field.Errorf("sweep_dir", "is required to resume a sweep: give the directory the sweep wrote"))
	}
	info, err := os.Stat(dir)
	if err != nil {
		return nil, res, refusal.Config(field.Errorf("sweep_dir", "%w; give the directory of the sweep to resume", err))
	}
	if !info.IsDir() {
		return nil, res, refusal.Config(field.Errorf("sweep_dir", "%s is a file, not a directory; give the directory a tolaria sweep wrote", dir))
	}
	// A sweep's journal is there before its sweep.yaml: without
	// results.json, the two tell a sweep's directory from one that holds
	// a sweep file of the user's own.
	hasSweep := fileExists(filepath.Join(dir, SweepFileCopy))
	if !fileExists(filepath.Join(dir, ResultsJSON)) && !(hasSweep && fileExists(filepath.Join(dir, JournalFile))) {
		missing := ResultsJSON
		if !hasSweep {
			if other := otherKind(dir); other != "" {
				return nil, res, refusal.Config(field.Errorf("sweep_dir", "%s is not a sweep directory: %s", dir, other))
			}
			missing = SweepFileCopy + " or " + ResultsJSON
		}
		return nil, res, refusal.Config(field.Errorf("sweep_dir", "%s is not a sweep directory (it has no %s); give the directory a tolaria sweep wrote", dir, missing))
	}
	// Accepted once, at whatever size it was allowed: no limit now.
	sw, err := ReadSweepMax(filepath.Join(dir, SweepFileCopy), 0)
	if err != nil {
		return nil, res, refusal.Config(field.Errorf("sweep_dir", "%s is not a sweep directory: %w", dir, err))
	}
	raw, err := os.ReadFile(filepath.Join(dir, ResultsJSON))
	if err == nil {
		err = json.Unmarshal(raw, &res)
		if err == nil && res.Trials == nil {
			err = errors.New("it lists no trials")
		}
	}
	if err != nil {
		if res, err = rebuildResults(dir, sw, err); err != nil {
			return nil, res, err
		}
	}
	if _, err := matchRows(sw, res); err != nil {
		return nil, res, refusal.Config(field.Errorf("sweep_dir", "%s: %w", dir, err))
	}
	return sw, res, nil
}

// otherKind says what dir, which holds no sweep, is instead (a trial's
// run directory, a run of tolaria train or tolaria rl) and what to do
// with it; "" for none of these.
func otherKind(dir string) string {
	parent := filepath.Dir(filepath.Clean(dir))
	if fileExists(filepath.Join(parent, SweepFileCopy)) && fileExists(filepath.Join(parent, ResultsJSON)) {
		return fmt.Sprintf("it is the run directory of trial %q of the sweep in %s; continue the sweep with tolaria sweep --resume --sweep-dir %s, or this trial's run alone with tolaria train --resume --run-dir %s",
			filepath.Base(filepath.Clean(dir)), parent, shellword.Quote(parent), shellword.Quote(dir))
	}
	config := filepath.Join(dir, rundir.ConfigFile)
	if !fileExists(config) {
		return ""
	}
	_, err := job.ReadRunConfig(dir, config, nil)
	if other := (*job.OtherRunError)(nil); errors.As(err, &other) {
		return fmt.Sprintf("it is a %s run; continue it with %s --resume --run-dir %s", other.Command, other.Command, shellword.Quote(dir))
	}
	return fmt.Sprintf("it is a tolaria train run (it has %s); continue it with tolaria train --resume --run-dir %s", rundir.ConfigFile, shellword.Quote(dir))
}

// placeRows sets each row's run directory and configuration to trial's
// in dir, the sweep directory as it is now. A reason that named the run
// directory where it was (interrupted ... checkpoint saved in ...) names
// it where it is.
func placeRows(dir string, rows []TrialResult) {
	for i := range rows {
		r := &rows[i]
		run := filepath.Join(dir, r.Name)
		if r.RunDir != "" && r.RunDir != run {
			r.Reason = strings.ReplaceAll(r.Reason, r.RunDir, run)
		}
		r.RunDir, r.Config = run, trialConfigPath(dir, r.Name)
	}
}

// rebuildResults makes the rows of dir's sweep again, when its
// results.json is missing or damaged (why), from its sweep file: every
// trial pending, for loadRows to bring up to date with the journal. That
// is all of a trial's story only when the journal records every trial
// that has a run directory; a journal that does not (a sweep from before
// journals) is refused, saying how to go on.
func rebuildResults(dir string, sw *Sweep, why error) (Results, error) {
	res := Results{SweepFile: filepath.Join(dir, SweepFileCopy), Damaged: fmt.Sprintf("%s was damaged (%v)", ResultsJSON, why)}
	if errors.Is(why, os.ErrNotExist) {
		res.Damaged = fmt.Sprintf("%s was missing", ResultsJSON)
	}
	entries, err := readJournal(dir)
	if err != nil {
		return res, refusal.Config(field.Errorf("sweep_dir", "%s is a sweep directory whose %s, and its %s, cannot be read (%v, %v); fix what keeps them from being read, then resume again",
			dir, ResultsJSON, JournalFile, why, err))
	}
	journaled := map[string]bool{}
	for _, e := range entries {
		journaled[e.Trial] = true
	}
	var missing []string
	for _, t := range sw.Trials {
		res.Trials = append(res.Trials, TrialResult{Name: t.Name, State: TrialPending, Overrides: overrides(t)})
		if fileExists(filepath.Join(dir, t.Name)) && !journaled[t.Name] {
			missing = append(missing, t.Name)
		}
	}
	if len(missing) > 0 {
		return res, refusal.Config(field.Errorf("sweep_dir", "%s is a sweep directory whose %s is damaged (%v), and its %s does not record trials %s (their runs began before the journal did), so the results cannot be rebuilt: "+
			"restore %s from a copy and resume again, or run the sweep file (%s) again in a new directory; each trial's run can be continued alone with tolaria train --resume --run-dir %s",
			dir, ResultsJSON, why, JournalFile, strings.Join(missing, ", "), ResultsJSON, filepath.Join(dir, SweepFileCopy), shellword.Quote(filepath.Join(dir, missing[0]))))
	}
	return res, nil
}

// matchRows orders the rows of results.json as the sweep's trials.
func matchRows(sw *Sweep, res Results) ([]TrialResult, error) {
	byName := map[string]TrialResult{}
	for _, r := range res.Trials {
		byName[r.Name] = r
	}
	rows := make([]TrialResult, len(sw.Trials))
	for i, t := range sw.Trials {
		r, ok := byName[t.Name]
		if !ok || len(res.Trials) != len(sw.Trials) {
			return nil, fmt.Errorf("%s and %s do not name the same trials; it was not written by this sweep", ResultsJSON, SweepFileCopy)
		}
		rows[i] = r
	}
	return rows, nil
}

// loadRows takes the rows of a resumed sweep from its results.json, read
// again now that the directory is held, brought up to date with its
// journal. An attempt that started and never ended (the sweep was killed
// during it) is recorded interrupted, in the journal and in the results,
// and counted.
func (s *Run) loadRows() error {
	_, res, err := LoadDir(s.dir)
	if err != nil {
		return err
	}
	rows, err := matchRows(s.cfg.Sweep, res)
	if err != nil {
		return refusal.Config(field.Errorf("sweep_dir", "%s: %w", s.dir, err))
	}
	for i := range rows {
		rows[i].Rank, rows[i].Value = 0, nil // ranked again as they are written
	}
	was := slices.Clone(rows)
	entries, err := readJournal(s.dir)
	if err != nil {
		return err
	}
	stopped := replayJournal(rows, entries)
	// The journal's rows name the directory they ran in, which may have
	// been copied or moved since.
	placeRows(s.dir, rows)
	for _, st := range stopped {
		if err := s.recordStopped(&rows[st.row], st); err != nil {
			return err
		}
	}
	for i := range rows {
		if rows[i].State == TrialRunning { // a sweep's from before journals
			rows[i].State, rows[i].Reason = TrialInterrupted, "interrupted: the sweep stopped without recording the trial's end"
		}
	}
	s.setRows(rows)
	s.file = res.SweepFile
	if res.Damaged != "" {
		// A sweep that failed to start may have left none.
		if err := os.MkdirAll(filepath.Join(s.dir, TrialConfigDir), 0o755); err != nil {
			return err
		}
		key := "the rank key given now"
		if !s.cfg.rankByGiven {
			key = "the default rank key"
		}
		rebuilt := fmt.Sprintf("%s; rebuilt from %s and %s, ranked by %s, %s (the one it was ranked by is lost with the file)",
			res.Damaged, SweepFileCopy, JournalFile, s.cfg.RankBy, key)
		kept := keptDamagedName(s.dir)
		if err := os.Rename(filepath.Join(s.dir, ResultsJSON), kept); err == nil {
			rebuilt += "; the damaged file is kept as " + kept
		}
		s.log.Warn(rebuilt)
	}
	if res.Damaged != "" || !reflect.DeepEqual(was, rows) {
		if err := s.writeResults(); err != nil {
			return err
		}
	}
	for _, r := range s.rows {
		if r.State != TrialSucceeded {
			return nil
		}
	}
	return fmt.Errorf("%s: %w", s.dir, ErrNothingToResume)
}

// keptDamagedName is where a damaged results.json in dir is kept:
// results.json.damaged, or the first of results.json.damaged-2, -3 and on
// that is free, so a second rebuild keeps the first one's file.
func keptDamagedName(dir string) string {
	base := filepath.Join(dir, ResultsJSON+".damaged")
	name := base
	for i := 2; ; i++ {
		if _, err := os.Lstat(name); err != nil {
			return name // free, or not to be known: the rename says which
		}
		name = fmt.Sprintf("%s-%d", base, i)
	}
}

// recordStopped records an attempt that never ended as interrupted: the
// sweep was stopped (killed) during it. Its time, until its run directory
// was last written, counts in the trial's.
func (s *Run) recordStopped(r *TrialResult, st stopped) error {
	r.State, r.Attempts = TrialInterrupted, max(r.Attempts, st.attempt)
	r.Reason = fmt.Sprintf("interrupted: the sweep stopped during attempt %d without recording its end (was it killed?)", st.attempt)
	if _, err := os.Stat(filepath.Join(r.RunDir, trainer.CheckpointFile)); err == nil {
		r.Reason += "; it resumes from its checkpoint"
	}
	if last := lastWritten(r.RunDir); last.After(st.started) && !st.started.IsZero() {
		r.Seconds += last.Sub(st.started).Seconds()
	}
	s.log.Warn("a trial's attempt never ended: the sweep was stopped during it; counted as interrupted", "trial", r.Name, "attempt", st.attempt)
	return s.journal.add(journalEntry{Time: time.Now().UTC(), Event: journalInterrupted, Trial: r.Name, Attempt: st.attempt, Reason: r.Reason})
}

// journalAdd appends e to the journal, keeping its first failure for Run
// to report; a trial goes on without its entry.
func (s *Run) journalAdd(e journalEntry) {
	err := s.journal.add(e)
	if err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journalErr == nil {
		s.journalErr = fmt.Errorf("%s: %w", JournalFile, err)
	}
}

// fileExists reports whether path names a file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// isDir reports whether path names a directory.
func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

// planSweepDir refuses a directory that holds anything; "" names
// sweeps/<now> (the first of its names free now: claim takes it).
func planSweepDir(dir string, now time.Time) (string, error) {
	if dir == "" {
		for i := 1; ; i++ {
			name := defaultSweepDir(now, i)
			_, err := os.Stat(name)
			switch {
			case errors.Is(err, os.ErrNotExist):
				return name, nil
			case err != nil:
				return "", defaultDirErr(name, err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return dir, nil
	case err != nil && !isDir(dir):
		return "", refusal.Config(field.Errorf("sweep_dir", "%s is a file, not a directory; give a new or empty directory for the sweep", dir))
	case err != nil:
		return "", refusal.Config(field.Errorf("sweep_dir", "%w", err))
	}
	if len(entries) == 1 && entries[0].Name() == sweepLock {
		// A claim that failed as another took the directory can leave
		// its empty lock file, which no sweep holds (checkFree): nothing.
		if info, err := entries[0].Info(); err == nil && info.Mode().IsRegular() && info.Size() == 0 {
			entries = nil
		}
	}
	return dir, refuseEntries(dir, entries)
}

// defaultDirErr refuses name, a sweep directory chosen under sweeps/,
// that could not be looked into: sweeps a file, or unreadable.
func defaultDirErr(name string, err error) error {
	parent := filepath.Dir(name)
	if info, e := os.Stat(parent); e == nil && !info.IsDir() {
		return refusal.Config(field.Errorf("sweep_dir", "no %s given, so the sweep goes under %s, but %s is a file, not a directory; move it aside or give a %s",
			field.Name("sweep_dir"), parent, parent, field.Name("sweep_dir")))
	}
	return refusal.Config(field.Errorf("sweep_dir", "no %s given, so the sweep goes under %s, which cannot be looked into (%w); fix its permissions or give a %s",
		field.Name("sweep_dir"), parent, err, field.Name("sweep_dir")))
}

// defaultSweepDir is the i-th name (from 1) of a sweep given no
// directory at now: sweeps/<time>, then sweeps/<time>-2, -3 and on.
func defaultSweepDir(now time.Time, i int) string {
	base := filepath.Join("sweeps", now.UTC().Format("20060102-150405"))
	if i <= 1 {
		return base
	}
	return fmt.Sprintf("%s-%d", base, i)
}

// refuseEntries refuses dir, for a new sweep, when it holds entries.
func refuseEntries(dir string, entries []os.DirEntry) error {
	switch {
	case len(entries) > 0 && fileExists(filepath.Join(dir, ResultsJSON)):
		return refusal.Config(field.Errorf("sweep_dir", "%s holds a sweep (its %s); continue it with %s, or give a new or empty directory for a new sweep, so its results are not overwritten",
			dir, ResultsJSON, field.Name("sweep_resume")))
	case len(entries) > 0:
		return refusal.Config(field.Errorf("sweep_dir", "%s is not empty; give a new or empty directory, so no earlier sweep's results are overwritten", dir))
	}
	return nil
}

// maxPathBytes is the longest path Linux opens (PATH_MAX, less its NUL).
const maxPathBytes = 4095

// runDirRoom is what the paths tolaria writes under a run directory add
// to it, with a margin: config.resume-<time>.yaml, and a Slurm attempt's
// spool/<token>-<attempt>/<file>.
const runDirRoom = 128

// checkPathLengths refuses a sweep directory so deep that a trial's run
// directory would have no room for its files: they would fail one by one
// once the sweep had started, not before anything is written.
func checkPathLengths(dir string, trials []Trial) error {
	longest := ""
	for _, t := range trials {
		if len(t.Name) > len(longest) {
			longest = t.Name
		}
	}
	if n := len(filepath.Join(dir, longest)) + runDirRoom; n > maxPathBytes {
		return refusal.Config(field.Errorf("sweep_dir", "%s is too deep: trial %q's run directory and its files need paths of up to %d bytes, more than the %d the system allows; give a shorter %s",
			dir, longest, n, maxPathBytes, field.Name("sweep_dir")))
	}
	return nil
}

// checkTrials plans every trial on its data in a worker process (see
// jobserver.PlanJobs), so a batch larger than the training set or missing
// data files are refused before anything starts, and this process loads no
// dataset: the trials that name the same data share one load there. It
// returns each trial's check, which its run takes as done
// (train.Request.Planned).
func checkTrials(ctx context.Context, sw *Sweep, w *worker.Process) ([]jobserver.Planned, error) {
	specs := make([]job.Spec, len(sw.Trials))
	for i, t := range sw.Trials {
		specs[i] = t.Spec
	}
	plans, err := jobserver.PlanJobs(ctx, w, specs)
	if err != nil {
		return nil, fmt.Errorf("sweep file %s: planning the trials in the worker %s: %w", sw.Path, w.Path, err)
	}
	for i, t := range sw.Trials {
		p := plans[i]
		// The worker's refusal speaks to tolaria train, whose flag names
		// the data; a sweep's trials take theirs from the sweep file.
		p.Error = strings.ReplaceAll(p.Error, "pass --data-dir", "set data.dir in the sweep file (in base: or the trial)")
		p.Error = strings.ReplaceAll(p.Error, "--data-dir", "data.dir (in the sweep file)")
		if err := p.Err(); err != nil {
			return nil, refusal.Config(fmt.Errorf("sweep file %s: trial %q: %w", sw.Path, t.Name, err))
		}
	}
	return plans, nil
}

// sweepLock marks a sweep directory in use. Its holder writes there who
// it is ("pid 123, tolaria sweep"), so a tolaria refused the directory
// names the process to wait for.
const sweepLock = ".tolaria-sweep.lock"

// sweepHolder is what a sweep writes in its lock file after its own pid.
const sweepHolder = "tolaria sweep"

// checkFree refuses the sweep directory dir when another tolaria holds
// it, naming the holder (see busyErr). It creates nothing; "" (a
// directory still to be named) and a directory without a lock file are
// free.
func checkFree(dir string) error {
	if dir == "" {
		return nil
	}
	l := flock.New(filepath.Join(dir, sweepLock), flock.SetFlag(os.O_RDONLY))
	ok, err := l.TryRLock()
	if err != nil { // no lock file: no sweep has claimed the directory
		return nil
	}
	if ok {
		_ = l.Close()
		return nil
	}
	return busyErr(dir)
}

// busyErr refuses dir, held by another tolaria, naming the holder its
// lock file records (a sweep from before holders were recorded wrote
// none): whatever the directory holds, nothing can be done with it until
// that one ends.
func busyErr(dir string) error {
	raw, _ := os.ReadFile(filepath.Join(dir, sweepLock))
	holder := strings.TrimSpace(string(raw))
	if holder == "" {
		holder = sweepHolder
	}
	return refusal.Config(field.Errorf("sweep_dir", "%s is %w (%s); wait for it or choose another %s",
		dir, rundir.ErrBusy, holder, field.Name("sweep_dir")))
}

// claim creates the sweep directory and locks it against a second
// tolaria, recording this one in the lock file. A new sweep looks at the
// directory again once the lock is held: another sweep may have run there
// since it was planned, and what planning would refuse now is refused.
// A claim that fails leaves no trace: the lock file and the directory go
// when this claim made them.
func (s *Run) claim() error {
	made := ""
	if !s.cfg.Resume {
		var err error
		if made, err = s.makeDir(); err != nil {
			return rundir.ClaimFailed("sweep_dir", s.dir, err)
		}
	}
	path := filepath.Join(s.dir, sweepLock)
	l, ok, err := lockSweepFile(path, s.cfg.hooks.lock)
	switch {
	case err != nil:
		removeMade(s.dir, made)
		return rundir.ClaimFailed("sweep_dir", s.dir, fmt.Errorf("locking %s: %w", path, err))
	case !ok:
		// Taken since checkFree looked: the lock file is the holder's.
		removeMade(s.dir, made)
		return busyErr(s.dir)
	}
	if !s.cfg.Resume {
		if err := s.recheck(); err != nil {
			s.abandon(l, made)
			return err
		}
	}
	before, err := l.read()
	if err == nil {
		if err = l.write(fmt.Appendf(nil, "pid %d, %s", os.Getpid(), sweepHolder)); err != nil && !l.created {
			_ = l.write(before)
		}
	}
	if err != nil {
		s.abandon(l, made)
		return rundir.ClaimFailed("sweep_dir", s.dir, err)
	}
	s.lock, s.claimed, s.madeDir, s.lockBefore = l, true, made, before
	return nil
}

// makeDir makes a new sweep's directory, and any parent missing, and
// returns the outermost directory it made ("" when the directory was
// there). The directory itself is made exclusively, so one made by
// another meanwhile is never taken for this sweep's: a directory given
// (--sweep-dir) is then used as found; a name the sweep chose
// (sweeps/<time>) is passed over for the next (-2, -3 and on).
func (s *Run) makeDir() (string, error) {
	parent := filepath.Dir(filepath.Clean(s.dir))
	made := ""
	for i, tries := 1, 0; ; {
		if m := firstMissing(parent); m != "" && (made == "" || len(m) < len(made)) {
			made = m
		}
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return "", err
		}
		err := s.cfg.hooks.makeDir(s.dir)
		switch {
		case err == nil && made != "":
			return made, nil
		case err == nil:
			return s.dir, nil
		case errors.Is(err, fs.ErrExist) && s.cfg.Dir == "":
			i++
			s.dir = defaultSweepDir(s.named, i)
		case errors.Is(err, fs.ErrExist):
			return "", nil
		case errors.Is(err, fs.ErrNotExist) && tries < 3:
			// A failed sweep removed the parent it had made, empty,
			// meanwhile: made again.
			tries++
		default:
			return "", err
		}
	}
}

// recheck looks at a new sweep's directory again, its lock held: it must
// hold nothing but the lock file, as it held nothing when planned.
func (s *Run) recheck() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return rundir.ClaimFailed("sweep_dir", s.dir, err)
	}
	entries = slices.DeleteFunc(entries, func(e os.DirEntry) bool { return e.Name() == sweepLock })
	return refuseEntries(s.dir, entries)
}

// abandon gives up a claim that failed before the directory was this
// sweep's: the lock file goes when the claim made it, then the lock, then
// the directory and parents made (see removeMade).
func (s *Run) abandon(l *lockFile, made string) {
	l.abandon()
	removeMade(s.dir, made)
}

// removeMade removes dir and its parents up to made, the outermost
// directory made for it, while they are empty: what another put there
// meanwhile stays. "" made nothing.
func removeMade(dir, made string) {
	if made != "" && os.Remove(dir) == nil {
		removeParents(dir, made)
	}
}

// firstMissing is the outermost directory of path that does not exist
// (path itself when only it is missing), "" when path exists.
func firstMissing(path string) string {
	missing := ""
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			return missing
		}
		missing = p
		if filepath.Dir(p) == p {
			return missing
		}
	}
}

// writeFiles keeps the sweep file and writes results.json with every
// trial pending. Each trial's resolved configuration is written as the
// trial first starts (writeTrialConfig): written up front, a large
// sweep's configurations cost minutes and hundreds of megabytes before
// its first trial started.
func (s *Run) writeFiles() error {
	if err := atomicfile.WriteFile(filepath.Join(s.dir, SweepFileCopy), s.cfg.Sweep.Raw, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.dir, TrialConfigDir), 0o755); err != nil {
		return err
	}
	rows := make([]TrialResult, 0, len(s.cfg.Sweep.Trials))
	for _, t := range s.cfg.Sweep.Trials {
		rows = append(rows, TrialResult{Name: t.Name, State: TrialPending, RunDir: filepath.Join(s.dir, t.Name), Config: s.trialConfigPath(t), Overrides: overrides(t)})
	}
	s.setRows(rows)
	return s.writeResults()
}

// overrides are t's settings changed from base, as results.json has them.
func overrides(t Trial) map[string]any {
	over := make(map[string]any, len(t.Overrides))
	for k, v := range t.Overrides {
		over[string(k)] = v
	}
	return over
}

// trialConfigPath is where trial t's resolved configuration goes.
func (s *Run) trialConfigPath(t Trial) string { return trialConfigPath(s.dir, t.Name) }

// trialConfigPath is where the resolved configuration of the trial named
// name goes in the sweep directory dir.
func trialConfigPath(dir, name string) string {
	return filepath.Join(dir, TrialConfigDir, name+".yaml")
}

// writeTrialConfig writes the resolved configuration of a trial about to
// run on spec's device, unless an earlier attempt (or the sweep a resumed
// one continues) wrote it: it stays the configuration the trial first
// ran with. It is a file for tolaria train --config (see
// trialConfigFile); nothing of the sweep reads it back.
func (s *Run) writeTrialConfig(t Trial, spec job.Spec) error {
	path := s.trialConfigPath(t)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	raw, err := trialConfigFile(spec)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, raw, 0o644)
}

// trialConfigFile is spec's configuration file less the keys of one
// invocation (jobconfig.PerInvocation: run_dir, resume,
// schedule.max_steps): tolaria train --config takes it as it is, its run
// going where train puts a new run (runs/<time>, or --run-dir), not into
// the trial's run directory, which holds the trial's run already.
func trialConfigFile(spec job.Spec) ([]byte, error) {
	raw, err := spec.ConfigFile()
	if err != nil {
		return nil, err
	}
	var root map[string]any
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	for _, key := range jobconfig.PerInvocation {
		m := root
		path := strings.Split(string(key), ".")
		for _, section := range path[:len(path)-1] {
			m, _ = m[section].(map[string]any)
		}
		delete(m, path[len(path)-1])
	}
	return yaml.Marshal(root)
}

// Dir is the sweep directory.
func (s *Run) Dir() string { return s.dir }

// Devices says where trials run, e.g. "cpu" or "cuda:0, cuda:1".
func (s *Run) Devices() string { return s.slots.Devices() }

// Parallel is the number of trials that run at once (with the Slurm
// launcher, at most: Slurm starts them as its nodes free up).
func (s *Run) Parallel() int {
	if s.cfg.Parallel > 0 {
		return min(s.cfg.Parallel, s.slots.Len())
	}
	return s.slots.Len()
}

// MetricsURL is the sweep's metrics endpoint, or "" when none is served
// (or the sweep is closed).
func (s *Run) MetricsURL() string {
	if s.metrics == nil {
		return ""
	}
	return s.metrics.URL()
}

// Linger keeps /metrics up for d after the sweep (see train.Metrics.Linger); a
// closed sweep serves nothing more.
func (s *Run) Linger(ctx context.Context, d time.Duration) {
	if s.metrics != nil {
		s.metrics.Linger(ctx, d)
	}
}

// Close stops the metrics server and releases the sweep directory.
func (s *Run) Close() error {
	var errs []error
	if s.metrics != nil {
		errs = append(errs, s.metrics.Close())
		s.metrics = nil
	}
	if s.journal != nil {
		errs = append(errs, s.journal.close())
		s.journal = nil
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
		s.lock = nil
	}
	return errors.Join(errs...)
}

// writeResults rewrites results.json and results.csv from the rows as
// they are now; the rows are copied, so trials go on changing them while
// it writes. Its callers take turns (see Run.pace).
func (s *Run) writeResults() error {
	s.mu.Lock()
	rows := slices.Clone(s.rows)
	s.mu.Unlock()
	start := time.Now()
	write := s.cfg.writeResultsFiles
	if write == nil {
		write = Results.write
	}
	err := write(newResults(s.file, s.cfg.RankBy, rows, start), s.dir)
	s.pace.wrote(start, time.Now())
	s.writes++
	return err
}

// How often the results files are rewritten while trials run: each
// rewrite costs time in the number of trials, so rewriting after every
// trial's end cost a large sweep time in the square of its trials. The
// files are rewritten once more when the sweep ends.
const (
	// resultsMinGap is the least time between two rewrites.
	resultsMinGap = time.Second
	// resultsCostRatio makes the gap at least this many times the last
	// rewrite's duration, so rewriting takes at most a small part of the
	// coordinator's time however large the sweep.
	resultsCostRatio = 10
)

// resultsPace says when the results files may next be rewritten.
type resultsPace struct {
	minGap time.Duration
	ratio  int
	last   time.Time     // when the last rewrite ended
	took   time.Duration // how long it took
}

// wait is how long after now the next rewrite is due (0 or less: now).
func (p *resultsPace) wait(now time.Time) time.Duration {
	gap := max(p.minGap, time.Duration(p.ratio)*p.took)
	return p.last.Add(gap).Sub(now)
}

func (p *resultsPace) wrote(start, end time.Time) { p.last, p.took = end, end.Sub(start) }

// writeResultsPaced rewrites the results files after rows change, no
// sooner than the pace allows, until stop is closed. It returns the first
// error of a rewrite.
func (s *Run) writeResultsPaced(stop <-chan struct{}) error {
	var first error
	for {
		select {
		case <-s.changed:
		case <-stop:
			return first
		}
		if wait := s.pace.wait(time.Now()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return first
			}
		}
		if err := s.writeResults(); err != nil && first == nil {
			first = err
		}
	}
}

// setRows takes rows as the sweep's and counts them; mu is not held.
func (s *Run) setRows(rows []TrialResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows, s.counts = rows, map[TrialState]int{}
	for _, r := range rows {
		s.counts[r.State]++
	}
	s.families.setTrials(s.counts)
}

// putRow replaces row i, keeping the counts and the metrics, and wakes
// the results writer; the caller holds mu.
func (s *Run) putRow(i int, r TrialResult) {
	s.counts[s.rows[i].State]--
	s.counts[r.State]++
	s.rows[i] = r
	s.families.setTrials(s.counts)
	select {
	case s.changed <- struct{}{}:
	default: // a wake-up is pending already
	}
}

func (s *Run) report(u TrialUpdate) {
	if s.cfg.Report == nil {
		return
	}
	s.reportMu.Lock()
	defer s.reportMu.Unlock()
	s.cfg.Report(u)
}

// Run runs every trial, each in a tolaria-worker process of its own on
// a slot, and rewrites results.json and results.csv as each ends. A
// trial's failure is recorded with its reason and the tail of its
// worker's log, and the others go on. Cancelling ctx asks every running
// worker to checkpoint and stop; those trials are recorded interrupted
// and the trials not started stay pending. A resumed sweep's succeeded
// trials are not run again. Run returns once every worker has been
// reaped; the error is one writing the results.
func (s *Run) Run(ctx context.Context) (Results, error) {
	// A resumed sweep's succeeded trials stand as they are; a display
	// hears of them once.
	for i := range s.rows {
		if r := s.rows[i]; r.State == TrialSucceeded {
			s.report(TrialUpdate{Trial: r.Name, Index: i, State: r.State, Device: r.Device, Attempt: r.Attempts, Result: &r})
		}
	}
	s.mu.Lock()
	s.families.setTrials(s.counts)
	s.mu.Unlock()
	stopWriter, writerDone := make(chan struct{}), make(chan error, 1)
	go func() { writerDone <- s.writeResultsPaced(stopWriter) }()
	var planned []launch.Worker
	for i, t := range s.cfg.Sweep.Trials {
		if s.rows[i].State != TrialSucceeded {
			planned = append(planned, s.trialWorker(i, t))
		}
	}
	s.launcher.Plan(planned)
	s.sideBySide = min(s.Parallel(), len(planned))
	// A Ctrl-C reaches the trials only once the launcher will start no
	// worker any more (see launch.Launcher.Hold).
	ctx, stop := s.launcher.Hold(ctx)
	defer stop()
	defer launch.ReleaseAll(ctx, s.launcher, planned)
	var wg sync.WaitGroup
	queue := s.queue()
	for queue.Left() > 0 {
		sl, err := s.slots.Take(ctx)
		if err != nil || ctx.Err() != nil {
			break
		}
		i, kw := s.assign(queue, sl)
		t := s.cfg.Sweep.Trials[i]
		s.setRow(i, func(r *TrialResult) { r.State, r.Device = TrialRunning, sl.String() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := s.runTrial(ctx, i, t, sl, kw)
			s.journalAdd(journalEntry{Time: time.Now().UTC(), Event: journalEnd, Trial: t.Name, Attempt: res.Attempts, Device: res.Device, Row: &res})
			s.mu.Lock()
			s.putRow(i, res)
			s.mu.Unlock()
			s.report(TrialUpdate{Trial: t.Name, Index: i, State: res.State, Device: res.Device, Attempt: res.Attempts, Result: &res})
			// Before the slot is free: the trial that takes it sees the
			// shape no longer running (its kept worker is idle already).
			queue.done(i)
			s.slots.Give(sl)
		}()
	}
	wg.Wait()
	// No trial runs: the kept workers end (their input closed, reaped).
	s.kept.closeAll()
	close(stopWriter)
	writeErr := <-writerDone
	// Every worker is reaped and the results writer stopped: what follows
	// runs alone.
	var unstarted []TrialUpdate
	for i := range s.rows {
		if s.rows[i].State == TrialPending {
			s.rows[i].Reason = "not started: the sweep was interrupted"
			r := s.rows[i]
			unstarted = append(unstarted, TrialUpdate{Trial: r.Name, Index: i, State: TrialPending, Result: &r})
		}
	}
	if err := s.writeResults(); err != nil && writeErr == nil {
		writeErr = err
	}
	if writeErr == nil {
		writeErr = s.journalErr
	}
	for _, u := range unstarted {
		s.report(u)
	}
	return newResults(s.file, s.cfg.RankBy, s.rows, time.Now()), writeErr
}

func (s *Run) setRow(i int, f func(*TrialResult)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[i]
	f(&r)
	s.putRow(i, r)
}

// queue is the trials to run (those not succeeded), for the slots to
// take in turn (see trialQueue).
func (s *Run) queue() *trialQueue {
	var todo []int
	for i := range s.cfg.Sweep.Trials {
		if s.rows[i].State != TrialSucceeded {
			todo = append(todo, i)
		}
	}
	if !s.cfg.ReuseWorkers {
		return newTrialQueue(todo, nil)
	}
	return newTrialQueue(todo, func(i int) string { return shapeOf(s.cfg.Sweep.Trials[i].Spec) })
}

// assign is the trial free slot sl runs next and, with
// Config.ReuseWorkers, the idle kept worker that serves its first attempt
// (nil: a fresh worker).
func (s *Run) assign(q *trialQueue, sl launch.Slot) (int, *keptWorker) {
	if !s.cfg.ReuseWorkers {
		i, _ := q.next(nil, nil)
		return i, nil
	}
	return s.kept.assign(q, sl)
}

// runTrial runs one trial until it succeeds, is interrupted or has failed
// 1+Retries times; kw, when not nil, is the idle kept worker its first
// attempt runs on (see assign).
func (s *Run) runTrial(ctx context.Context, i int, t Trial, sl launch.Slot, kw *keptWorker) TrialResult {
	s.mu.Lock()
	res := s.rows[i]
	s.mu.Unlock()
	// A resumed sweep counts on from the trial's earlier attempts.
	before, beforeSeconds := res.Attempts, res.Seconds
	s.warnStartsOver(t, res)
	started := time.Now()
	for attempt := 1; ; attempt++ {
		res.Attempts = before + attempt
		// Recorded before the worker starts: a sweep killed during the
		// attempt reads it, when resumed, as interrupted.
		s.journalAdd(journalEntry{Time: time.Now().UTC(), Event: journalStart, Trial: t.Name, Attempt: res.Attempts, Device: sl.String()})
		s.setRow(i, func(r *TrialResult) { r.State, r.Attempts, r.Device = TrialRunning, res.Attempts, sl.String() })
		s.report(TrialUpdate{Trial: t.Name, Index: i, State: TrialRunning, Device: sl.String(), Attempt: res.Attempts})
		if attempt > 1 && s.cfg.ReuseWorkers {
			kw = s.kept.take(sl, shapeOf(t.Spec))
		}
		a := s.attempt(ctx, i, t, sl, res.Attempts, kw)
		prev := res.Summary
		res.State, res.Reason, res.LogTail, res.Summary, res.Device = a.state, a.reason, a.logTail, a.summary, sl.String()
		res.CPUThreads = a.cpuThreads
		if a.unstarted {
			// Nothing ran: the trial's figures stay its earlier attempt's.
			res.Summary = prev
		}
		if res.State == TrialFailed {
			s.families.trialFailed(a.why)
		}
		if res.State != TrialFailed || attempt > s.cfg.Retries || ctx.Err() != nil {
			break
		}
		if a.why == worker.KindUsage || (a.why == worker.KindCheckpoint && !a.unread) || (a.why == worker.KindNoDevice && !sl.Remote()) {
			// Refused input, a checkpoint refused for its content (the
			// next attempt resumes from the same file), or no device on
			// this machine's slot: another attempt would fail the same
			// way. A checkpoint that could not be read, or restored, may
			// be read the next time, or be gone and the trial start
			// fresh.
			s.log.Warn("trial failed; not starting it again: the failure would repeat", "trial", t.Name, "reason", a.reason)
			break
		}
		s.log.Warn("trial failed; starting it again", "trial", t.Name, "attempt", attempt, "reason", a.reason)
		s.families.trialRetried()
	}
	res.Seconds = beforeSeconds + time.Since(started).Seconds()
	return res
}

// warnStartsOver warns, as a resumed sweep takes up trial t (its row
// r), that the trial starts over from step 0 though the journal says it
// had run: its run directory is gone (removed, or not copied with the
// sweep), or holds no checkpoint where the trial's last attempt trained
// and kept one.
func (s *Run) warnStartsOver(t Trial, r TrialResult) {
	if r.Attempts == 0 {
		return
	}
	dir := filepath.Join(s.dir, t.Name)
	had := fmt.Sprintf("the sweep's journal records %s at it", plural(r.Attempts, "earlier attempt"))
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.log.Warn(fmt.Sprintf("trial %s's run directory %s is gone; the trial starts over from step 0 (%s)", t.Name, dir, had), "trial", t.Name)
	case err != nil:
		s.log.Warn(fmt.Sprintf("trial %s's run directory %s cannot be looked at (%v), so no checkpoint of it is found; the trial starts over from step 0 (%s)", t.Name, dir, err, had), "trial", t.Name)
	case !info.IsDir():
		s.log.Warn(fmt.Sprintf("trial %s's run directory %s is a file, not a directory; the trial starts over from step 0 (%s)", t.Name, dir, had), "trial", t.Name)
	case !fileExists(filepath.Join(dir, trainer.CheckpointFile)) && r.Summary != nil && r.Summary.Steps > 0:
		s.log.Warn(fmt.Sprintf("trial %s's run directory %s has no %s, though its last attempt trained %d steps; the trial starts over from step 0 (%s)",
			t.Name, dir, trainer.CheckpointFile, r.Summary.Steps, had), "trial", t.Name)
	}
}

// outcome is how one attempt at a trial ended.
type outcome struct {
	state   TrialState
	reason  string
	why     string // a failure's reason in a word, for the metrics (see failureReason)
	logTail string
	summary *trainer.Summary
	// unstarted: the attempt's worker never ran, so nothing trained.
	unstarted bool
	// unread: a refused checkpoint (why worker.KindCheckpoint) that was
	// not read or not restored, its content not judged (see
	// worker.Error.Unread): it is retried, and no advice to discard it
	// is given.
	unread bool
	// cpuThreads is the kernel threads its worker's CPU device had; 0
	// off this machine's CPU.
	cpuThreads int
}

// Reasons a sweep counts a failed attempt by besides the worker's own
// (worker.Reason*, how its process failed, and worker.Kind*, the kind of
// error it reported).
const (
	// failureNoAnswer is a worker that did not say hello in time.
	failureNoAnswer = "no_answer"
	// failureStopped is a run the worker stopped before its end
	// without being asked (a signal sent to the worker alone).
	failureStopped = "stopped"
)

// failureReasons are the values of the failures metric's reason label
// (telemetry adds its "other").
func failureReasons() []string {
	return []string{
		worker.ReasonHung, worker.ReasonCrashed, worker.ReasonExit, worker.ReasonProtocol, worker.ReasonKilled,
		worker.KindUsage, worker.KindCheckpoint, worker.KindNonFinite, worker.KindNoDevice, worker.KindFailure,
		worker.KindBudget, failureNoAnswer, failureStopped,
		worker.ReasonCancelled, worker.ReasonTimeLimit, worker.ReasonNodeFail,
	}
}

// failureReason says in a word why an attempt failed: how the worker's
// process failed, the kind of error it reported, or
// telemetry.SweepFailureOther for a failure before it ran.
func failureReason(err error) string {
	var pe *worker.ProcessError
	var we *worker.Error
	switch {
	case errors.As(err, &pe):
		return pe.Reason
	case errors.As(err, &we):
		return we.Kind
	case errors.Is(err, worker.ErrNoAnswer):
		return failureNoAnswer
	}
	return telemetry.SweepFailureOther
}

// attempt runs a trial once in a worker process of its own: a fresh run,
// or a resumed one when an earlier attempt (of this sweep, or of the one
// a resumed sweep continues) left a checkpoint. Any error
// of the run (the worker's own, its exit, the protocol) is the trial's
// failure with that reason.
func (s *Run) attempt(ctx context.Context, i int, t Trial, sl launch.Slot, n int, kw *keptWorker) (o outcome) {
	spec := t.Spec
	spec.Device, spec.RunDir = sl.Device, filepath.Join(s.dir, t.Name)
	if _, err := os.Stat(filepath.Join(spec.RunDir, trainer.CheckpointFile)); err == nil && (n > 1 || s.cfg.Resume) {
		spec.Resume = true
	}
	// The worker's own log is kept whole next to its run.
	_ = os.MkdirAll(spec.RunDir, 0o755)
	w := s.trialWorker(i, t)
	defer s.launcher.Release(ctx, w)
	tailOf := func() string { return "" }
	// With Config.ReuseWorkers, kw is the idle kept worker of the slot's
	// device that serves the attempt, when one waited; else a new one
	// (below).
	if kw != nil {
		w.Kept = true // its device is open: no probe
		defer func() { s.kept.give(kw) }()
	}
	var budget func(trainer.Observer, *slog.Logger) train.Budgeter
	if !sl.Remote() {
		// The broker keeps the books of this machine's devices.
		tb := &TrialBudget{Broker: s.broker, Trial: t.Name, Device: sl.String(), Priority: t.Priority, Report: func(b BudgetUpdate) {
			s.report(TrialUpdate{Trial: t.Name, Index: i, State: TrialRunning, Device: sl.String(), Attempt: n, Budget: &b})
		}}
		budget = func(obs trainer.Observer, log *slog.Logger) train.Budgeter {
			return &budgetSink{tb: tb, obs: obs, metrics: s.families, log: log, kept: kw, workers: &s.kept, sweepLog: s.log}
		}
	}
	failed := func(err error) outcome {
		o := outcome{state: TrialFailed, reason: err.Error(), why: failureReason(err), logTail: tailOf()}
		var we *worker.Error
		o.unread = errors.As(err, &we) && we.Unread
		if o.why == worker.KindCheckpoint && !o.unread {
			o.reason = checkpointAdvice(o.reason, spec.RunDir, s.dir)
		}
		return o
	}
	if err := s.writeTrialConfig(t, spec); err != nil {
		return failed(fmt.Errorf("writing the trial's configuration: %w", err))
	}
	// Placement, not configuration: the threads do not change a result
	// (the kernels give the same bits at any thread count), so the
	// trial's configuration file leaves them out.
	threads := 0
	if sl.Device == "cpu" && !sl.Remote() {
		threads = launch.CPUThreads(spec.CPUThreads, runtime.GOMAXPROCS(0), s.sideBySide)
		spec.CPUThreads = threads
	}
	defer func() { o.cpuThreads = threads }()
	h, err := s.launcher.Start(ctx, w, sl, n)
	if err != nil {
		if ctx.Err() != nil {
			return outcome{state: TrialInterrupted, reason: "interrupted while starting: " + err.Error()}
		}
		return failed(err)
	}
	defer h.Close()
	tailOf = h.Tail
	transport := h.Transport
	if s.cfg.ReuseWorkers && kw == nil {
		if kw = s.kept.start(sl, shapeOf(t.Spec), h); kw != nil {
			defer func() { s.kept.give(kw) }()
		}
	}
	if kw != nil {
		// The kept worker writes this trial's lines to its log.
		if p, ok := h.Transport.(*worker.Process); ok {
			kw.stderr = p.Stderr
		}
		transport = kw.k.For(kw.stderr)
	}
	place := train.Placement{Device: sl.Device, WorkerStart: s.cfg.WorkerStart, HeartbeatTimeout: s.cfg.HeartbeatTimeout, Transport: transport}
	// The sweep reports a trial's start and end itself; of a run's own
	// log only warnings are news.
	runLog := slog.New(minLevel{s.log.Handler(), slog.LevelWarn}).With("trial", t.Name)
	run, err := train.Prepare(ctx, train.Request{Spec: spec, Placement: place, Version: s.cfg.Version, Logger: runLog, Started: time.Now(),
		Metrics: s.metrics, Trial: t.Name, Budget: budget, Watch: s.families.watchWorker, Planned: &s.planned[i]})
	if err != nil {
		if ctx.Err() != nil {
			return outcome{state: TrialInterrupted, reason: "interrupted while starting: " + err.Error()}
		}
		return failed(err)
	}
	defer run.Close()
	progress := func(p trainer.Progress) {
		s.report(TrialUpdate{Trial: t.Name, Index: i, State: TrialRunning, Device: sl.String(), Attempt: n, Progress: &p})
	}
	sum, err := run.Train(ctx, progress)
	if err != nil && (ctx.Err() != nil || errors.Is(err, launch.ErrInterrupted)) {
		if why := h.NotRun(); why != "" {
			// A scheduler's task was still queued, or came up after the
			// Ctrl-C and found the interrupt's mark: no worker ran.
			return outcome{state: TrialInterrupted, reason: "interrupted before its worker started (" + why + "); nothing trained", unstarted: true}
		}
	}
	if err != nil {
		if we := (*worker.Error)(nil); ctx.Err() != nil && errors.As(err, &we) && we.Kind == worker.KindBudget {
			return outcome{state: TrialInterrupted, reason: "interrupted while waiting for device memory: " + we.Message}
		}
		if ctx.Err() != nil {
			o := failed(fmt.Errorf("interrupted, and the worker failed while stopping: %w", err))
			o.state = TrialInterrupted
			return o
		}
		return failed(err)
	}
	if err := run.Record(&sum); err != nil {
		return failed(err)
	}
	switch {
	case sum.Interrupted && ctx.Err() != nil && sum.Steps == sum.ResumedFromStep:
		return outcome{state: TrialInterrupted, reason: "interrupted before its first step", summary: &sum}
	case sum.Interrupted && ctx.Err() != nil:
		return outcome{state: TrialInterrupted, reason: fmt.Sprintf("interrupted after %s; checkpoint saved in %s", stepsRun(sum), spec.RunDir), summary: &sum}
	case sum.Interrupted:
		return outcome{state: TrialFailed, reason: "the worker stopped the run before it finished (was it sent a signal?)", why: failureStopped, logTail: tailOf(), summary: &sum}
	}
	return outcome{state: TrialSucceeded, summary: &sum}
}

// runDirAdvice is the advice of a refused checkpoint that speaks to
// tolaria train, whose run directory is the user's to choose: a trial's
// is not. Its second group is the way on for a checkpoint of another
// format.
var runDirAdvice = regexp.MustCompile(`start (a new run|the run again) in another --run-dir(, or resume it with the tolaria that wrote it)?`)

// checkpointAdvice rewrites the refusal of a trial's checkpoint for its
// content (reason) for the sweep in sweepDir: a trial runs in the run
// directory runDir the sweep gives it, so "another --run-dir" cannot be
// followed, and every --resume would fail it again. Without its run
// directory the trial starts again from step 0, which is what to do (or
// to restore the file, where the refusal says so). The directory is moved
// aside, not removed: it holds the trial's training so far. The sweep
// does not know the flags it was started with (its device, launcher), so
// the command to resume it says to give them again.
func checkpointAdvice(reason, runDir, sweepDir string) string {
	advice := fmt.Sprintf("move the trial's run directory aside (mv %s %s) and resume the sweep as before (tolaria sweep --resume --sweep-dir %s with the flags it ran with): the trial starts again from step 0 (rm -r %s instead discards its checkpoint, %s and %s: its training so far)",
		shellword.Quote(runDir), shellword.Quote(runDir+".damaged"), shellword.Quote(sweepDir), shellword.Quote(runDir), rundir.WorkerLogFile, rundir.EventsFile)
	found := false
	reason = runDirAdvice.ReplaceAllStringFunc(reason, func(m string) string {
		found = true
		if runDirAdvice.FindStringSubmatch(m)[2] != "" {
			return advice + "; or resume the sweep with the tolaria that wrote the checkpoint"
		}
		return advice
	})
	if !found {
		reason += "; in a sweep, " + advice
	}
	return reason
}

// stepsRun says how many steps an attempt ran, as tolaria train does:
// summary.json counts the whole run's, so a resumed attempt says both
// ("12 steps, 52 in all").
func stepsRun(sum trainer.Summary) string {
	text := plural(sum.Steps-sum.ResumedFromStep, "step")
	if sum.ResumedFromStep > 0 {
		text += fmt.Sprintf(", %d in all", sum.Steps)
	}
	return text
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// minLevel passes on the records of at least its level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(attrs), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}

// setPriorities gives each trial the value of key in its job as its
// priority (its override, else the sweep's base or the default); ""
// keeps the trials' own. A key that is not a job setting is refused, so a
// misspelt --priority does not leave every trial at the same priority.
func setPriorities(sw *Sweep, key string) error {
	if key == "" {
		return nil
	}
	if job.Usage(field.Name(key)) == "" {
		return refusal.Config(field.Errorf("priority", "%s is not a setting of a job; give a key whose values are numbers, e.g. one of the sweep's grid keys", key))
	}
	for i := range sw.Trials {
		v, ok := sw.Trials[i].Overrides[field.Name(key)]
		if !ok {
			v = sw.Trials[i].Spec.Get(field.Name(key))
		}
		switch n := v.(type) {
		case int:
			sw.Trials[i].Priority = float64(n)
		case float64:
			sw.Trials[i].Priority = n
		default:
			return refusal.Config(field.Errorf("priority", "%s: trial %q sets it to %v, not a number; give a key whose values are numbers", key, sw.Trials[i].Name, v))
		}
	}
	return nil
}

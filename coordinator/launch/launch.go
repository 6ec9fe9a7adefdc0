// Package launch places and starts the coordinator's workers: an activity
// (a sweep, a sharded evaluation, a reinforcement-learning run) asks a
// Launcher for the device slots its workers take turns on, and for each
// attempt at a worker a Handle that carries the worker protocol. Local
// processes and Slurm job arrays are its two launchers; a new one is a
// Kind in a file of its own, listed in Kinds, and touches no activity.
package launch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
)

// Launcher places an activity's workers and starts them. An activity
// lays out its slots once (Slots), plans its workers (Plan), runs every
// attempt under Hold's context, starts each attempt on a slot it holds
// (Start), and releases each worker when it will start it no more
// (Release). Its methods are safe for concurrent use.
type Launcher interface {
	// Slots are the placements the activity's workers take turns on, a
	// slot held by one worker at a time (see Slots): the local launcher's
	// are Config.PerDevice on each device and Config.Parallel in all, a
	// scheduler's one per worker (Config.Workers).
	Slots(ctx context.Context) ([]Slot, error)
	// Plan tells the launcher of the workers the activity will start,
	// before the first starts: a scheduler submits their first attempts
	// together.
	Plan(workers []Worker)
	// Hold returns the context the attempts run under, and stop, which
	// releases it once the attempts are over. ctx's cancellation (a
	// Ctrl-C) reaches the attempts once the launcher will start no more
	// workers: a scheduler's queued task must not start one after it.
	Hold(ctx context.Context) (_ context.Context, stop func())
	// Start readies attempt n (from 1) of w on slot and returns its
	// handle, which the caller closes once the worker has answered. The
	// worker itself starts in the transport's Call, which bounds its
	// hello, heartbeats, cancellation and reaping; with Config.Probe a
	// local CUDA slot's worker first opens its GPU once, here, unless
	// Worker.Kept.
	Start(ctx context.Context, w Worker, slot Slot, n int) (*Handle, error)
	// Release says w will start no more attempts: a planned worker no
	// attempt asked for is given up (its scheduler's task cancelled).
	Release(ctx context.Context, w Worker)
	// Describe is what the launcher would submit for the planned
	// workers, for --dry-run: a batch script and the command; "" and nil
	// for a launcher with nothing to show.
	Describe() (script string, command []string)
}

// Worker is one worker of an activity: a trial, a shard, an agent's
// half. Its attempts are started one at a time.
type Worker struct {
	// Index is the worker's place in the activity (a trial's, a
	// shard's), unique within it.
	Index int
	// Spools is a directory a launcher may keep each attempt's files in
	// (a scheduler's spool).
	Spools string
	// Log is the worker's log file: a local worker's standard error is
	// appended to it, a scheduler's task writes it itself.
	Log string
	// Kept says the attempt is served by a worker process the activity
	// keeps open on the slot's device (sweep --reuse-workers), which has
	// opened it already: the local launcher does not probe its GPU again
	// (Config.Probe).
	Kept bool
}

// Handle is one attempt at a worker, started.
type Handle struct {
	// Transport carries the worker protocol to the worker: its Call
	// starts the worker (or waits for its scheduler to), and returns once
	// it has answered and is reaped.
	Transport worker.Transport
	// Tail is the last lines of the worker's log, for a failure's
	// record.
	Tail func() string
	// NotRun says, after Call returned, why the worker never ran (a
	// scheduler's task that had not started it), or "" when it ran or
	// may have.
	NotRun  func() string
	closers []io.Closer
}

// Close releases what the attempt held here (its log file).
func (h *Handle) Close() error {
	var first error
	for _, c := range h.closers {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Config is what a launcher is made from: the activity's placement and
// its workers' bounds.
type Config struct {
	// Worker is the tolaria-worker binary, found (see worker.Find).
	Worker string
	// Device is auto, cpu or cuda: auto takes GPU 0 when a CUDA worker
	// can open one, the CPU otherwise (a scheduler's tasks take the CPU).
	Device string
	// GPUs are the CUDA devices of this machine to place workers on, one
	// slot each per PerDevice (CUDA_VISIBLE_DEVICES); none is GPU 0, or
	// with GPUsFromEnv the GPUs a worker's environment gives it.
	GPUs        []int
	GPUsFromEnv bool
	// PerDevice is how many workers share a device; 0 means one on a GPU
	// GPUs names and Parallel on the CPU (or on the GPUs of the workers'
	// environment).
	PerDevice int
	// Parallel bounds the workers running at once; 0 means one per slot
	// (a scheduler: no bound of its own).
	Parallel int
	// Workers is how many workers the activity has.
	Workers int
	// DeviceMemory is the device memory the activity budgets on each of
	// this machine's devices; 0 budgets none.
	DeviceMemory int64
	// Dir is the activity's directory, named to the user by DirField; the
	// launcher keeps its own files (batch scripts) in Own.
	Dir      string
	DirField field.Name
	Own      string
	// Names are the workers' names where they go into paths (trials);
	// a launcher refuses one it cannot hand on safely.
	Names []string
	// WorkerStart bounds a worker's start-up (0: worker's default), and
	// HeartbeatTimeout its silence or standstill (0: worker's default).
	WorkerStart      time.Duration
	HeartbeatTimeout time.Duration
	// Env is added to every worker's environment, before its slot's.
	Env []string
	// Probe has a local CUDA worker open its GPU once before its request,
	// so a missing GPU fails the attempt with a sentence saying what to
	// do.
	Probe bool
	// DryRun makes a launcher that only plans and describes.
	DryRun bool
	Logger *slog.Logger
}

// Kind is a launcher as a command names it, its own settings bound in
// (SlurmWith): an activity takes a Kind and knows no launcher's settings.
// The zero Kind is the local launcher (OrLocal).
type Kind struct {
	Name string
	// Check refuses, before anything is made or written, settings this
	// launcher cannot honour, naming the one at fault.
	Check func(Config) error
	// New makes the launcher for one activity.
	New func(context.Context, Config) (Launcher, error)
}

// Names of the launchers.
const (
	LocalName = "local" // processes on this machine
	SlurmName = "slurm" // tasks of a Slurm job array, on the cluster's nodes
)

// Kinds are the launchers a command may name.
func Kinds() []Kind { return []Kind{Local(), Slurm()} }

// Find is the launcher kind named name ("" is local), without settings of
// its own, or a refusal of the launcher setting.
func Find(name string) (Kind, error) { return Named(name, SlurmConfig{}) }

// Named is the launcher kind named name ("" is local) with the settings a
// command or a file gave (slurm, Slurm's; the others have none), or a
// refusal of the launcher setting.
func Named(name string, slurm SlurmConfig) (Kind, error) {
	if name == "" {
		name = LocalName
	}
	var names []string
	for _, k := range Kinds() {
		if k.Name == name {
			if name == SlurmName {
				return SlurmWith(slurm), nil
			}
			return k, nil
		}
		names = append(names, k.Name)
	}
	return Kind{}, refusal.Config(field.Errorf("launcher", "must be %s, got %q", orList(names), name))
}

// OrLocal is k, or the local launcher for the zero Kind.
func (k Kind) OrLocal() Kind {
	if k.New == nil {
		return Local()
	}
	return k
}

// Valid says whether name ("" too) names a launcher.
func Valid(name string) bool {
	_, err := Find(name)
	return err == nil
}

// orList writes names as "a, b or c".
func orList(names []string) string {
	names = slices.Clone(names)
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Make checks cfg against the kind and makes its launcher.
func (k Kind) Make(ctx context.Context, cfg Config) (Launcher, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if k.Check != nil {
		if err := k.Check(cfg); err != nil {
			return nil, err
		}
	}
	l, err := k.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("launcher %s made nothing", k.Name)
	}
	return l, nil
}

// ReleaseAll tells l that none of workers will start again: planned
// workers no attempt asked for are given up.
func ReleaseAll(ctx context.Context, l Launcher, workers []Worker) {
	for _, w := range workers {
		l.Release(ctx, w)
	}
}

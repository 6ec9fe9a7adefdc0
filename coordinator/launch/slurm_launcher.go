package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/tolaria-ml/tolaria/worker"
)

// ErrInterrupted is wrapped by a start a launcher refuses because
// tolaria was interrupted: no worker ran.
var ErrInterrupted = errors.New("tolaria was interrupted")

// Slurm is the launcher of tasks of Slurm job arrays: one task per
// worker, the first attempts of all in one array, each retry an array of
// its own (see slurmLauncher). Every node must share the activity's
// directory (and the data) with this machine, and run tolaria-worker at
// the same path.
func Slurm() Kind { return SlurmWith(SlurmConfig{}) }

// SlurmWith is the Slurm launcher submitting with sc's settings.
func SlurmWith(sc SlurmConfig) Kind {
	return Kind{Name: SlurmName,
		Check: func(cfg Config) error { return checkSlurm(cfg, sc) },
		New:   func(ctx context.Context, cfg Config) (Launcher, error) { return newSlurm(ctx, cfg, sc) }}
}

func newSlurm(_ context.Context, cfg Config, sc SlurmConfig) (Launcher, error) {
	device := cfg.Device
	switch device {
	case "auto":
		device = "cpu"
		cfg.Logger.Info("launcher slurm: device auto runs the trials on the nodes' CPUs; give --device cuda for a GPU per task")
	case "":
		device = "cpu"
	}
	l, err := newSlurmLauncher(sc, cfg.Own, cfg.Worker, device, cfg.Parallel, cfg.DryRun)
	if err != nil {
		return nil, err
	}
	l.workers, l.hello, l.heartbeat, l.log = cfg.Workers, cfg.WorkerStart, cfg.HeartbeatTimeout, cfg.Logger
	return l, nil
}

// Slots are one per worker: Slurm's array limit, not this machine,
// bounds how many run at once.
func (l *slurmLauncher) Slots(context.Context) ([]Slot, error) {
	slots := make([]Slot, l.workers)
	for i := range slots {
		slots[i] = Slot{Device: l.device, GPU: -1, Where: SlurmName}
	}
	return slots, nil
}

// Plan makes each worker's first attempt a task of the first array.
func (l *slurmLauncher) Plan(workers []Worker) {
	for _, w := range workers {
		l.plan(w.Index, w.Spools, w.Log)
	}
}

// Hold holds a Ctrl-C back from the attempts until the interrupt's mark
// is made (see holdBack).
func (l *slurmLauncher) Hold(ctx context.Context) (context.Context, func()) {
	return l.holdBack(ctx, func(err error) {
		l.log.Warn("interrupted, and the mark that keeps Slurm tasks from starting their workers could not be made: a queued task may still start one, which stops at once", "err", err)
	})
}

// Start is the attempt's worker.Remote: its task writes the worker's log
// itself, on its node.
func (l *slurmLauncher) Start(_ context.Context, w Worker, _ Slot, n int) (*Handle, error) {
	r := l.transport(w.Index, w.Spools, w.Log, n, l.hello, l.heartbeat)
	return &Handle{Transport: r, Tail: func() string { return worker.LogTail(w.Log) }, NotRun: func() string {
		if workerSpoke(r.Dir) {
			return ""
		}
		return "its Slurm task had not run it"
	}}, nil
}

// Release gives up the worker's first-array task unless an attempt
// asked for its worker.
func (l *slurmLauncher) Release(ctx context.Context, w Worker) { l.release(ctx, w.Index) }

// Describe is the first array's batch script and sbatch command.
func (l *slurmLauncher) Describe() (string, []string) { return l.dryRun() }

// workerSpoke says whether the worker of the spool in dir wrote anything
// (its hello comes before any work).
func workerSpoke(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, worker.SpoolOut))
	return err == nil && st.Size() > 0
}

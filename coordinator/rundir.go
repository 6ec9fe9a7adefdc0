package coordinator

import (
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Files of a run directory (see package rundir).
const (
	ConfigFile    = rundir.ConfigFile
	EventsFile    = rundir.EventsFile
	SummaryFile   = rundir.SummaryFile
	WorkerLogFile = rundir.WorkerLogFile
	lockFile      = rundir.LockFile
)

// Refusals of a run directory (see package rundir).
var (
	ErrRunDirBusy   = rundir.ErrBusy
	ErrRunExists    = rundir.ErrExists
	ErrNoCheckpoint = rundir.ErrNoCheckpoint
	ErrNotARun      = rundir.ErrNotARun
)

// RunDir is one run's directory (see rundir.Dir).
type RunDir = rundir.Dir

// PlanRunDir plans a run's directory (see rundir.Plan).
func PlanRunDir(dir string, resume bool, now time.Time) (*RunDir, error) {
	return rundir.Plan(dir, resume, now)
}

// WriteSummary writes a summary.json (see rundir.WriteSummary).
func WriteSummary(path string, s trainer.Summary) error { return rundir.WriteSummary(path, s) }

// RunSpec reads the job a run directory's config.yaml records (see
// rundir.Spec).
func RunSpec(dir string) (job.Spec, error) { return rundir.Spec(dir) }

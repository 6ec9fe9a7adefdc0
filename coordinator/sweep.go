package coordinator

import (
	"context"

	"github.com/tolaria-ml/tolaria/coordinator/sweep"
)

// Sweeps live in package sweep; these names keep the coordinator's
// callers working.

type (
	SweepConfig  = sweep.Config
	SweepRun     = sweep.Run
	TrialUpdate  = sweep.TrialUpdate
	Sweep        = sweep.Sweep
	Trial        = sweep.Trial
	TrialState   = sweep.TrialState
	TrialResult  = sweep.TrialResult
	Results      = sweep.Results
	TrialBudget  = sweep.TrialBudget
	BudgetUpdate = sweep.BudgetUpdate
)

// A trial's states (see package sweep).
const (
	TrialPending     = sweep.TrialPending
	TrialRunning     = sweep.TrialRunning
	TrialSucceeded   = sweep.TrialSucceeded
	TrialFailed      = sweep.TrialFailed
	TrialInterrupted = sweep.TrialInterrupted
)

// Files of a sweep directory (see package sweep).
const (
	ResultsJSON    = sweep.ResultsJSON
	ResultsCSV     = sweep.ResultsCSV
	SweepFileCopy  = sweep.SweepFileCopy
	TrialConfigDir = sweep.TrialConfigDir
	JournalFile    = sweep.JournalFile
)

// DefaultMaxTrials is the most trials a sweep file may expand to (see
// sweep.DefaultMaxTrials).
const DefaultMaxTrials = sweep.DefaultMaxTrials

// Event kinds of the budget broker, in a trial's events log (see package
// sweep).
const (
	EventBudgetWait    = sweep.EventBudgetWait
	EventBudgetGrant   = sweep.EventBudgetGrant
	EventBudgetRefused = sweep.EventBudgetRefused
	EventBudgetPark    = sweep.EventBudgetPark
	EventBudgetParked  = sweep.EventBudgetParked
)

// ErrNothingToResume: every trial of the sweep to resume succeeded.
var ErrNothingToResume = sweep.ErrNothingToResume

// PrepareSweep checks a sweep and claims its directory (see
// sweep.Prepare).
func PrepareSweep(ctx context.Context, cfg SweepConfig) (*SweepRun, error) {
	return sweep.Prepare(ctx, cfg)
}

// LoadSweepDir reads a sweep directory to resume (see sweep.LoadDir).
func LoadSweepDir(dir string) (*Sweep, Results, error) { return sweep.LoadDir(dir) }

// ReadSweep reads a sweep file (see sweep.ReadSweep).
func ReadSweep(path string) (*Sweep, error) { return sweep.ReadSweep(path) }

// ReadSweepMax reads a sweep file of at most maxTrials trials (see
// sweep.ReadSweepMax).
func ReadSweepMax(path string, maxTrials int) (*Sweep, error) {
	return sweep.ReadSweepMax(path, maxTrials)
}

// RankKeys are the keys a sweep's trials can be ranked by (see
// sweep.RankKeys).
func RankKeys() []string { return sweep.RankKeys() }

// RankAscending says whether a smaller value of key ranks first (see
// sweep.RankAscending).
func RankAscending(key string) bool { return sweep.RankAscending(key) }

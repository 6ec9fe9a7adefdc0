package progress

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

// The views here are what the activities' Execute functions show their
// runs through (sweep.View, ...): the live drawing of this package and
// the reports, on a command's two streams.

// Streams are a command's standard output, for results, and its standard
// error, for progress and what is said last.
type Streams struct{ Stdout, Stderr io.Writer }

// Note says msg as the command's last word, on standard error.
func (s Streams) Note(msg string) { fmt.Fprintln(s.Stderr, "tolaria:", msg) }

// SweepView shows a sweep: its trials' rows and its ranking.
type SweepView struct {
	*Sweep
	Streams
}

// NewSweepView draws trials on s.Stderr and the ranking on s.Stdout.
func NewSweepView(s Streams, trials []sweep.Trial) SweepView {
	return SweepView{NewSweep(s.Stderr, trials), s}
}

// Results prints the ranking.
func (v SweepView) Results(r sweep.Results, dir string) { SweepResults(v.Stdout, r, dir) }

// DryRun prints what Slurm would be given.
func (v SweepView) DryRun(script string, command []string) error {
	return DryRun(v.Stdout, "the sweep directory's slurm/")(script, command)
}

// EvalView shows an evaluation: its plan and shard lines, its result.
type EvalView struct {
	*Eval
	Streams
	runDir string
	spell  func(field.Name) string
}

// NewEvalView shows the evaluation of runDir, its lines on s.Stderr and
// its result on s.Stdout; spell names a resumed evaluation's keys as the
// command does.
func NewEvalView(s Streams, runDir string, spell func(field.Name) string) EvalView {
	return EvalView{NewEval(s.Stderr), s, runDir, spell}
}

// Plan says what the evaluation is about to score (see Eval.Plan).
func (v EvalView) Plan(e *eval.Run, req eval.Request) {
	v.Eval.Plan(e, req, v.spell)
}

// Result prints the figures, or the partial ones (see EvalResult).
func (v EvalView) Result(rep *eval.Report, err error, runDir string) {
	EvalResult(v.Stdout, rep, err, runDir)
}

// DryRun prints what Slurm would be given.
func (v EvalView) DryRun(script string, command []string) error {
	return DryRun(v.Stdout, filepath.Join(v.runDir, eval.Dir, "slurm"))(script, command)
}

// RLView shows an RL run: its agents' rows and their summary.
type RLView struct {
	*RL
	Streams
	plotter string
}

// NewRLView draws agents, each of totalSteps, on s.Stderr and their
// summary on s.Stdout; plotter (see Plotter) draws their return curves
// at the end when asked.
func NewRLView(s Streams, agents, totalSteps int, plotter string) RLView {
	return RLView{NewRL(s.Stderr, agents, totalSteps), s, plotter}
}

// Summary prints the agents' summary (see RLSummary).
func (v RLView) Summary(s rl.Summary) { RLSummary(v.Stdout, s) }

// Plot draws every agent's return curve (see DrawReturns).
func (v RLView) Plot(ctx context.Context, runDir string) {
	DrawReturns(ctx, v.plotter, runDir, v.Stdout, v.Stderr)
}

// TrainView shows a training run: its progress line and its end.
type TrainView struct {
	*Train
	Streams
	refused func(error) bool
}

// NewTrainView draws a run's progress on s.Stderr and its summary on
// s.Stdout; refused says whether an error refuses what the user gave
// (the command's exit 2), which no resume hint follows: the same command
// would fail again.
func NewTrainView(s Streams, accuracy bool, refused func(error) bool) TrainView {
	return TrainView{NewTrain(s.Stderr, accuracy), s, refused}
}

// Summary prints the run's figures (see TrainSummary).
func (v TrainView) Summary(sum trainer.Summary, accuracy bool, runDir string) {
	TrainSummary(v.Stdout, sum, accuracy, runDir)
}

// Stopped says where a stopped run stands (see TrainStopped): interrupted,
// or stopped by --max-steps.
func (v TrainView) Stopped(dir *rundir.Dir, sum trainer.Summary, interrupted bool, maxSteps int) {
	if interrupted {
		maxSteps = 0
	}
	TrainStopped(v.Stderr, dir, sum, maxSteps)
}

// Failed says why the run failed (see TrainFailed).
func (v TrainView) Failed(err error, interrupted bool, dir *rundir.Dir) {
	TrainFailed(v.Stderr, err, interrupted, v.refused(err), dir)
}

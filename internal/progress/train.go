package progress

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Train shows one training run (train.View): on a terminal a row with the
// epoch's bar, redrawn in place; elsewhere a line per logged step. Each
// finished epoch prints a line; the run's end is said below.
type Train struct {
	Streams
	table *Table
	row   int

	accuracy bool // the loss is a classification loss: accuracy means something
	// refused says whether an error refuses what the user gave (the
	// command's exit 2), which no resume hint follows: the same command
	// would fail again.
	refused func(error) bool

	mu   sync.Mutex
	last trainer.Progress
}

// NewTrain draws a run's progress on s.Stderr and its summary on
// s.Stdout; until the first report its row says the run is starting.
// accuracy says whether the run's loss has one.
func NewTrain(s Streams, accuracy bool, refused func(error) bool) *Train {
	v := &Train{Streams: s, table: NewTable(s.Stderr, true), accuracy: accuracy, refused: refused}
	v.row = v.table.AddRow(v.text)
	return v
}

// Logs is where log lines go: above the row on a terminal.
func (v *Train) Logs() io.Writer { return v.table.Logs() }

// acc writes an accuracy field, or nothing for a regression loss.
func (v *Train) acc(name string, x float64) string {
	if !v.accuracy {
		return ""
	}
	return fmt.Sprintf(", %s %.4f", name, x)
}

func (v *Train) text() string {
	v.mu.Lock()
	p := v.last
	v.mu.Unlock()
	if p.Epochs == 0 {
		return "starting "
	}
	return v.textOf(p) + " "
}

// Report takes the run's progress (the trainer's report function).
func (v *Train) Report(p trainer.Progress) {
	switch {
	case p.EpochDone:
		v.table.Printf("epoch %d/%d done in %.1fs: train loss %.4f%s%s, %.0f samples/s\n",
			p.Epoch, p.Epochs, p.EpochSeconds, p.Loss, v.acc("train accuracy", p.Accuracy), v.acc("test accuracy", p.TestAccuracy), p.SamplesPerSecond)
	case v.table.Live():
		v.mu.Lock()
		v.last = p
		v.mu.Unlock()
		v.table.Set(v.row, int64(p.Step), int64(p.StepsPerEpoch))
	default:
		v.table.Printf("%s\n", v.textOf(p))
	}
}

func (v *Train) textOf(p trainer.Progress) string {
	return fmt.Sprintf("epoch %d/%d step %d/%d: loss %.4f%s, %.0f samples/s", p.Epoch, p.Epochs, p.Step, p.StepsPerEpoch, p.Loss, v.acc("accuracy", p.Accuracy), p.SamplesPerSecond)
}

// Summary prints a training run's figures; accuracy says whether its
// loss has one (a regression loss has not).
func (v *Train) Summary(s trainer.Summary, accuracy bool, runDir string) {
	w := v.Stdout
	eval := fmt.Sprintf("test accuracy %.4f, test loss %.4f", s.TestAccuracy, s.TestLoss)
	switch {
	case len(s.EpochSeconds) == 0:
		eval = "no epoch finished, so no evaluation yet" // the zeros in summary.json are not results
	case !accuracy:
		eval = fmt.Sprintf("test loss %.4f", s.TestLoss)
	}
	fmt.Fprintf(w, "device %s, graphs %v: %d steps (%d replays, %d eager), %s, train loss %.4f, %.0f samples/s\n",
		s.Device, s.GraphEnabled, s.Steps, s.GraphReplays, s.EagerSteps, eval, s.TrainLoss, s.SamplesPerSecond)
	if len(s.Fallbacks) > 0 {
		var by []string
		for _, reason := range slices.Sorted(maps.Keys(s.Fallbacks)) {
			by = append(by, fmt.Sprintf("%s %d", reason, s.Fallbacks[reason]))
		}
		fmt.Fprintf(w, "eager fallbacks by reason: %s\n", strings.Join(by, ", "))
	}
	fmt.Fprintf(w, "params sha256 %s\nrun directory %s\n", s.ParamsSHA256, runDir)
}

// Stopped says where a stopped run stands and how to go on, on standard
// error; maxSteps is the --max-steps that stopped it, which an
// interruption overrides.
// --max-steps counts the steps of one start, summary.json's steps the
// whole run's: a resumed run's line says both, so that "--max-steps 3"
// and "8 steps" do not read as a contradiction.
func (v *Train) Stopped(dir *rundir.Dir, sum trainer.Summary, interrupted bool, maxSteps int) {
	w, how := v.Stderr, "interrupted"
	if interrupted {
		maxSteps = 0
	}
	if maxSteps > 0 {
		how = fmt.Sprintf("stopped by --max-steps %d", maxSteps)
	}
	if ran := sum.Steps - sum.ResumedFromStep; ran > 0 {
		after := "interrupted after " + Plural(ran, "step")
		if maxSteps > 0 {
			after = fmt.Sprintf("stopped after %s (--max-steps %d)", Plural(ran, "step"), maxSteps)
		}
		if sum.ResumedFromStep > 0 {
			after += fmt.Sprintf(", %d in all", sum.Steps)
		}
		fmt.Fprintf(w, "tolaria: %s; checkpoint saved; continue with: tolaria train --resume --run-dir %s\n", after, shellword.Quote(dir.Path()))
		return
	}
	if cks, _ := dir.Checkpoints(); len(cks) > 0 {
		fmt.Fprintf(w, "tolaria: %s before any step ran; the checkpoint of step %d is unchanged; continue with: tolaria train --resume --run-dir %s\n",
			how, sum.ResumedFromStep, shellword.Quote(dir.Path()))
		return
	}
	// A run directory without a checkpoint is taken again by a fresh run
	// (rundir.Plan), so the same command, its --run-dir included, starts
	// the run over.
	fmt.Fprintf(w, "tolaria: %s before the first step; nothing to resume (%s holds no checkpoint): run the same command again to start the run over\n", how, shellword.Quote(dir.Path()))
}

// Failed says why a run failed and, when its checkpoint can be resumed
// from, the command that continues it. A worker's refusal of what the
// user gave gets no hint: the same command would fail again.
func (v *Train) Failed(err error, interrupted bool, dir *rundir.Dir) {
	w := v.Stderr
	var we *worker.Error
	switch {
	case interrupted:
		fmt.Fprintf(w, "tolaria: interrupted: %v\n", err)
	case errors.As(err, &we):
		fmt.Fprintf(w, "tolaria: %s\n", we.Message)
		if v.refused(err) {
			return
		}
		var wf *train.WorkerFailure
		if errors.As(err, &wf) {
			fmt.Fprintln(w, wf.Note())
		}
	default:
		fmt.Fprintf(w, "tolaria: training failed: %v\n", err)
	}
	if step, ok := dir.ResumableStep(); ok {
		fmt.Fprintf(w, "tolaria: the checkpoint of step %d is kept; continue with: tolaria train --resume --run-dir %s\n", step, shellword.Quote(dir.Path()))
	}
}

// Close takes the row off the screen.
func (v *Train) Close() { v.table.Close() }

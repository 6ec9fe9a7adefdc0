package progress

import (
	"fmt"
	"io"
	"sync"

	"github.com/tolaria-ml/tolaria/trainer"
)

// Train shows one training run: on a terminal a row with the epoch's bar,
// redrawn in place; elsewhere a line per logged step. Each finished epoch
// prints a line.
type Train struct {
	table *Table
	row   int

	accuracy bool // the loss is a classification loss: accuracy means something

	mu   sync.Mutex
	last trainer.Progress
}

// NewTrain shows a run on w; until the first report its row says the run
// is starting. accuracy says whether the run's loss has one.
func NewTrain(w io.Writer, accuracy bool) *Train {
	v := &Train{table: NewTable(w, true), accuracy: accuracy}
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

// Close takes the row off the screen.
func (v *Train) Close() { v.table.Close() }

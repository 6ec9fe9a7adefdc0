// Package progress shows what tolaria's commands are doing while they run:
// on a terminal, live rows drawn by mpb (a training run, a sweep's trials,
// an RL run's agents), each with a bar, and log lines above them; anywhere
// else (a pipe, a log file, CI) one plain line per event. Every view is
// built on the one Table here. Each activity's view (Train, Sweep, Eval,
// RL) also says how its work ended: its results on standard output, the
// rest on standard error.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// Streams are a command's standard output, for results, and its standard
// error, for progress and what is said last.
type Streams struct{ Stdout, Stderr io.Writer }

// Note says msg as the command's last word, on standard error.
func (s Streams) Note(msg string) { fmt.Fprintln(s.Stderr, "tolaria:", msg) }

// Table is live rows on a terminal, or nothing but the lines its views
// print elsewhere.
type Table struct {
	w    io.Writer
	live *mpb.Progress // nil when w is not a terminal
	rows []*mpb.Bar
	drop bool // rows still running at Close leave the screen
	done bool // closed
}

// NewTable draws to w when w is a terminal. transient rows leave the
// screen when they stop, so what follows starts clean.
func NewTable(w io.Writer, transient bool) *Table {
	t := &Table{w: w, drop: transient}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		t.live = mpb.New(mpb.WithOutput(w), mpb.WithWidth(100), mpb.WithRefreshRate(200*time.Millisecond))
	}
	return t
}

// Live reports whether the table draws rows (w is a terminal).
func (t *Table) Live() bool { return t.live != nil }

// Logs is where log lines go: above the rows on a terminal.
func (t *Table) Logs() io.Writer {
	if t.live != nil {
		return t.live
	}
	return t.w
}

// Printf prints a line, above the rows on a terminal.
func (t *Table) Printf(format string, args ...any) { fmt.Fprintf(t.Logs(), format, args...) }

// AddRow adds a live row whose text, before its bar, text gives at each
// redraw; it returns the row's number. Off a terminal it does nothing.
func (t *Table) AddRow(text func() string) int {
	if t.live == nil {
		return -1
	}
	// Total 0: a row completes only when Done says so, not when its count
	// first reaches a total set as progress arrives.
	bar := t.live.New(0, mpb.BarStyle().Lbound("[").Rbound("]"), mpb.BarWidth(20),
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return text() })))
	t.rows = append(t.rows, bar)
	return len(t.rows) - 1
}

func (t *Table) row(i int) *mpb.Bar {
	if i < 0 || i >= len(t.rows) {
		return nil
	}
	return t.rows[i]
}

// Set fills row i's bar to current of total.
func (t *Table) Set(i int, current, total int64) {
	if bar := t.row(i); bar != nil {
		bar.SetTotal(max(total, 1), false)
		bar.SetCurrent(current)
	}
}

// Done completes row i's bar.
func (t *Table) Done(i int) {
	if bar := t.row(i); bar != nil {
		bar.SetTotal(-1, true)
	}
}

// Stop ends row i where it stands (a failure, an interruption).
func (t *Table) Stop(i int) {
	if bar := t.row(i); bar != nil {
		bar.Abort(t.drop)
	}
}

// Close stops the rows still running, draws the last state and returns
// when mpb is done with the terminal. Later calls do nothing.
func (t *Table) Close() {
	if t.live == nil || t.done {
		return
	}
	t.done = true
	for _, b := range t.rows {
		if !b.AbortedOrCompleted() {
			b.Abort(t.drop)
		}
	}
	t.live.Wait()
}

// FirstLine is s's first line, cut to n bytes.
func FirstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// OneLine is s on one line, its runs of white space one space each.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

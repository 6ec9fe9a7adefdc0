package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/trainer"
)

// sweepView shows a sweep's trials: on a terminal a live table, one row
// per trial (state, epoch, loss, accuracy, samples/s, ETA) drawn by mpb;
// otherwise one line per event (a trial started, finished an epoch,
// ended).
type sweepView struct {
	w     io.Writer
	width int // of the trial column

	mu   sync.Mutex
	rows []*trialRow

	// On a terminal:
	table *mpb.Progress
	bars  []*mpb.Bar
}

// trialRow is what the table shows of one trial.
type trialRow struct {
	name     string
	state    coordinator.TrialState
	device   string
	attempt  int
	progress trainer.Progress
	started  time.Time
	reason   string
	accuracy float64 // the last epoch's test accuracy
	waiting  bool    // for a device-memory budget
	parked   bool    // its model moved off the device, waiting to unpark
}

func newSweepView(w io.Writer, trials []coordinator.Trial) *sweepView {
	v := &sweepView{w: w, width: len("trial")}
	for _, t := range trials {
		v.rows = append(v.rows, &trialRow{name: t.Name, state: coordinator.TrialPending})
		v.width = max(v.width, len(t.Name))
	}
	v.width = min(v.width, 40)
	v.table = liveTable(w)
	return v
}

// liveTable is an mpb container drawing to w when w is a terminal, nil
// otherwise (the views then print a line per event).
func liveTable(w io.Writer) *mpb.Progress {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return mpb.New(mpb.WithOutput(w), mpb.WithWidth(100), mpb.WithRefreshRate(200*time.Millisecond))
	}
	return nil
}

// logs is where log lines go: above the table on a terminal.
func (v *sweepView) logs() io.Writer {
	if v.table != nil {
		return v.table
	}
	return v.w
}

// start draws the table's rows, one per trial.
func (v *sweepView) start() {
	if v.table == nil {
		return
	}
	fmt.Fprintf(v.table, "%-*s  %-11s  %-7s  %9s  %8s  %10s  %8s\n", v.width, "trial", "state", "epoch", "loss", "accuracy", "samples/s", "ETA")
	for _, r := range v.rows {
		// Total 0: a bar completes only when drawBar says so, not when
		// its count first reaches a total set as progress arrives.
		bar := v.table.New(0, mpb.BarStyle().Lbound("[").Rbound("]"),
			mpb.BarWidth(20),
			mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return v.rowText(r) })))
		v.bars = append(v.bars, bar)
	}
}

func (v *sweepView) rowText(r *trialRow) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	name := r.name
	if len(name) > v.width {
		name = name[:v.width-1] + "~"
	}
	p := r.progress
	epoch, loss, acc, rate, eta := "", "", "", "", ""
	if p.Epochs > 0 {
		epoch = fmt.Sprintf("%d/%d", p.Epoch, p.Epochs)
		loss = fmt.Sprintf("%.4f", p.Loss)
		acc = fmt.Sprintf("%.4f", r.accuracy)
		rate = fmt.Sprintf("%.0f", p.SamplesPerSecond)
		if r.state == coordinator.TrialRunning {
			eta = etaText(r.started, done(p))
		}
	}
	state := string(r.state)
	switch {
	case r.parked && r.state == coordinator.TrialRunning:
		state = "parked"
	case r.waiting && r.state == coordinator.TrialRunning:
		state = "waiting"
	}
	return fmt.Sprintf("%-*s  %-11s  %-7s  %9s  %8s  %10s  %8s ", v.width, name, state, epoch, loss, acc, rate, eta)
}

// done is the fraction of a trial's steps done.
func done(p trainer.Progress) float64 {
	total := p.Epochs * max(p.StepsPerEpoch, 1)
	step := (p.Epoch-1)*max(p.StepsPerEpoch, 1) + p.Step
	if p.EpochDone {
		step = p.Epoch * max(p.StepsPerEpoch, 1)
	}
	return float64(step) / float64(max(total, 1))
}

// etaText estimates the time left from the time so far.
func etaText(started time.Time, frac float64) string {
	if frac <= 0 || frac > 1 {
		return ""
	}
	left := time.Duration(float64(time.Since(started)) * (1 - frac) / frac)
	return left.Round(time.Second).String()
}

// update takes one change of a trial (coordinator.SweepConfig.Report).
func (v *sweepView) update(u coordinator.TrialUpdate) {
	v.mu.Lock()
	r := v.rows[u.Index]
	first := u.State == coordinator.TrialRunning && u.Progress == nil && u.Budget == nil
	if first {
		r.started, r.progress, r.accuracy = time.Now(), trainer.Progress{}, 0
	}
	switch {
	case u.Budget != nil && u.Budget.Parked:
		r.parked = true
	case u.Budget != nil:
		r.waiting, r.parked = u.Budget.Waiting, false
		if !r.waiting {
			r.started = time.Now() // the time left counts from the grant
		}
	case u.State != coordinator.TrialRunning:
		r.waiting, r.parked = false, false
	}
	r.state, r.attempt = u.State, u.Attempt
	if u.Device != "" {
		r.device = u.Device
	}
	if u.Progress != nil {
		r.progress = *u.Progress
		if u.Progress.EpochDone {
			r.accuracy = u.Progress.TestAccuracy
		}
	}
	if u.Result != nil {
		r.reason = u.Result.Reason
		if s := u.Result.Summary; s != nil && u.Result.State == coordinator.TrialSucceeded {
			r.accuracy = s.TestAccuracy
		}
	}
	row := *r
	v.mu.Unlock()
	if v.table != nil {
		v.drawBar(u, row)
		return
	}
	v.line(u, row, first)
}

func (v *sweepView) drawBar(u coordinator.TrialUpdate, r trialRow) {
	if u.Index >= len(v.bars) {
		return
	}
	bar := v.bars[u.Index]
	switch {
	case u.Result != nil && u.Result.State == coordinator.TrialSucceeded:
		bar.SetTotal(-1, true)
	case u.Result != nil:
		if u.Result.Reason != "" {
			fmt.Fprintf(v.table, "trial %s: %s: %s\n", r.name, u.Result.State, firstLine(u.Result.Reason, 200))
		}
		bar.Abort(false)
	case u.Progress != nil:
		p := u.Progress
		total := int64(p.Epochs * max(p.StepsPerEpoch, 1))
		bar.SetTotal(total, false)
		bar.SetCurrent(int64(done(*p) * float64(total)))
	}
}

// line prints one event: a start, an epoch's end or a trial's end.
func (v *sweepView) line(u coordinator.TrialUpdate, r trialRow, first bool) {
	switch {
	case first:
		fmt.Fprintf(v.w, "trial %s: started on %s (attempt %d)\n", r.name, r.device, r.attempt)
	case u.Budget != nil && u.Budget.Parked:
		fmt.Fprintf(v.w, "trial %s: parked for a trial of higher priority, %s of device memory released on %s\n", r.name, trainer.FormatBytes(u.Budget.Bytes), r.device)
	case u.Budget != nil && u.Budget.Waiting:
		fmt.Fprintf(v.w, "trial %s: waiting for %s of device memory on %s\n", r.name, trainer.FormatBytes(u.Budget.Bytes), r.device)
	case u.Budget != nil:
		fmt.Fprintf(v.w, "trial %s: granted %s of device memory on %s after waiting %.1fs\n", r.name, trainer.FormatBytes(u.Budget.Bytes), r.device, u.Budget.Waited.Seconds())
	case u.Progress != nil && u.Progress.EpochDone:
		p := u.Progress
		fmt.Fprintf(v.w, "trial %s: epoch %d/%d: loss %.4f, test accuracy %.4f, %.0f samples/s\n",
			r.name, p.Epoch, p.Epochs, p.Loss, p.TestAccuracy, p.SamplesPerSecond)
	case u.Result != nil && u.Result.State == coordinator.TrialSucceeded:
		s := u.Result.Summary
		fmt.Fprintf(v.w, "trial %s: succeeded in %.1fs: test accuracy %.4f, test loss %.4f, params sha256 %s\n",
			r.name, u.Result.Seconds, s.TestAccuracy, s.TestLoss, s.ParamsSHA256)
	case u.Result != nil:
		fmt.Fprintf(v.w, "trial %s: %s: %s\n", r.name, u.Result.State, oneLine(u.Result.Reason))
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// close ends the table: rows never started are aborted, and mpb draws
// the final state and stops.
func (v *sweepView) close() {
	if v.table == nil {
		return
	}
	for _, b := range v.bars {
		if !b.AbortedOrCompleted() {
			b.Abort(false)
		}
	}
	v.table.Wait()
}

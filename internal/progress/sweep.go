package progress

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Sweep shows a sweep (sweep.View) and its trials: on a terminal a row per trial (state,
// epoch, loss, accuracy, samples/s, ETA); elsewhere one line per event (a
// trial started, waited for or was granted device memory, was parked,
// finished an epoch, ended).
type Sweep struct {
	Streams
	table *Table
	width int // of the trial column

	mu   sync.Mutex
	rows []*trialRow
}

// trialRow is what the table shows of one trial.
type trialRow struct {
	name     string
	state    sweep.TrialState
	device   string
	attempt  int
	progress trainer.Progress
	started  time.Time
	accuracy float64 // the last epoch's test accuracy
	waiting  bool    // for a device-memory budget
	parked   bool    // its model moved off the device, waiting to unpark
}

// NewSweep draws trials on s.Stderr and the ranking on s.Stdout.
func NewSweep(s Streams, trials []sweep.Trial) *Sweep {
	v := &Sweep{Streams: s, table: NewTable(s.Stderr, false), width: len("trial")}
	for _, t := range trials {
		v.rows = append(v.rows, &trialRow{name: t.Name, state: sweep.TrialPending})
		v.width = max(v.width, len(t.Name))
	}
	v.width = min(v.width, 40)
	return v
}

// Logs is where log lines go: above the table on a terminal.
func (v *Sweep) Logs() io.Writer { return v.table.Logs() }

// Start draws the table: its header and a row per trial.
func (v *Sweep) Start() {
	if !v.table.Live() {
		return
	}
	v.table.Printf("%-*s  %-11s  %-7s  %9s  %8s  %10s  %8s\n", v.width, "trial", "state", "epoch", "loss", "accuracy", "samples/s", "ETA")
	for _, r := range v.rows {
		v.table.AddRow(func() string { return v.rowText(r) })
	}
}

func (v *Sweep) rowText(r *trialRow) string {
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
		if r.state == sweep.TrialRunning {
			eta = etaText(r.started, done(p))
		}
	}
	state := string(r.state)
	switch {
	case r.parked && r.state == sweep.TrialRunning:
		state = "parked"
	case r.waiting && r.state == sweep.TrialRunning:
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

// Update takes one change of a trial (sweep.Config.Report).
func (v *Sweep) Update(u sweep.TrialUpdate) {
	v.mu.Lock()
	r := v.rows[u.Index]
	first := u.State == sweep.TrialRunning && u.Progress == nil && u.Budget == nil
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
	case u.State != sweep.TrialRunning:
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
	if s := u.Result; s != nil && s.Summary != nil && s.State == sweep.TrialSucceeded {
		r.accuracy = s.Summary.TestAccuracy
	}
	row := *r
	v.mu.Unlock()
	if v.table.Live() {
		v.drawRow(u, row)
		return
	}
	v.line(u, row, first)
}

func (v *Sweep) drawRow(u sweep.TrialUpdate, r trialRow) {
	switch {
	case u.Result != nil && u.Result.State == sweep.TrialSucceeded:
		v.table.Done(u.Index)
	case u.Result != nil:
		if u.Result.Reason != "" {
			v.table.Printf("trial %s: %s: %s\n", r.name, u.Result.State, FirstLine(u.Result.Reason, 200))
		}
		v.table.Stop(u.Index)
	case u.Progress != nil:
		total := int64(u.Progress.Epochs * max(u.Progress.StepsPerEpoch, 1))
		v.table.Set(u.Index, int64(done(*u.Progress)*float64(total)), total)
	}
}

// line prints one event: a start, a budget's wait, grant or parking, an
// epoch's end or a trial's end.
func (v *Sweep) line(u sweep.TrialUpdate, r trialRow, first bool) {
	switch {
	case first:
		v.table.Printf("trial %s: started on %s (attempt %d)\n", r.name, r.device, r.attempt)
	case u.Budget != nil && u.Budget.Parked && u.Budget.For != "":
		v.table.Printf("trial %s: parked to make room for trial %s, %s of device memory released on %s\n", r.name, u.Budget.For, trainer.FormatBytes(u.Budget.Bytes), r.device)
	case u.Budget != nil && u.Budget.Parked:
		v.table.Printf("trial %s: parked to make room for another trial, %s of device memory released on %s\n", r.name, trainer.FormatBytes(u.Budget.Bytes), r.device)
	case u.Budget != nil && u.Budget.Waiting:
		v.table.Printf("trial %s: waiting for %s of device memory on %s\n", r.name, trainer.FormatBytes(u.Budget.Bytes), r.device)
	case u.Budget != nil:
		v.table.Printf("trial %s: granted %s of device memory on %s after waiting %.1fs\n", r.name, trainer.FormatBytes(u.Budget.Bytes), r.device, u.Budget.Waited.Seconds())
	case u.Progress != nil && u.Progress.EpochDone:
		p := u.Progress
		v.table.Printf("trial %s: epoch %d/%d: loss %.4f, test accuracy %.4f, %.0f samples/s\n",
			r.name, p.Epoch, p.Epochs, p.Loss, p.TestAccuracy, p.SamplesPerSecond)
	case u.Result != nil && u.Result.State == sweep.TrialSucceeded:
		s := u.Result.Summary
		v.table.Printf("trial %s: succeeded in %.1fs: test accuracy %.4f, test loss %.4f, params sha256 %s\n",
			r.name, u.Result.Seconds, s.TestAccuracy, s.TestLoss, s.ParamsSHA256)
	case u.Result != nil:
		v.table.Printf("trial %s: %s: %s\n", r.name, u.Result.State, OneLine(u.Result.Reason))
	}
}

// Results prints a sweep's ranked trials on standard output.
func (v *Sweep) Results(r sweep.Results, dir string) {
	w := v.Stdout
	width := len("trial")
	for _, t := range r.Trials {
		width = max(width, len(t.Name))
	}
	fmt.Fprintf(w, "%-4s  %-*s  %-11s  %s\n", "rank", width, "trial", "state", r.RankBy)
	for _, t := range r.Trials {
		rank, value := "-", ""
		if t.Rank > 0 {
			rank = strconv.Itoa(t.Rank)
		}
		if t.Value != nil {
			value = strconv.FormatFloat(*t.Value, 'f', 4, 64)
		} else if t.Reason != "" {
			value = FirstLine(t.Reason, 100)
		}
		fmt.Fprintf(w, "%-4s  %-*s  %-11s  %s\n", rank, width, t.Name, t.State, value)
	}
	fmt.Fprintf(w, "results %s/%s\n", dir, sweep.ResultsJSON)
}

// DryRun prints what Slurm would be given.
func (v *Sweep) DryRun(script string, command []string) error {
	return dryRun(v.Stdout, "the sweep directory's slurm/", script, command)
}

// Close ends the table: rows never started are stopped, and the last
// state is drawn.
func (v *Sweep) Close() { v.table.Close() }

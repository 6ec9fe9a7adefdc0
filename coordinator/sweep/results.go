package sweep

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TrialState is where a trial of a sweep stands.
type TrialState string

// The states of a trial.
const (
	TrialPending     TrialState = "pending"     // not started (yet, or ever: the sweep was interrupted)
	TrialRunning     TrialState = "running"     // its worker is training it
	TrialSucceeded   TrialState = "succeeded"   // trained to the end; summary.json written
	TrialFailed      TrialState = "failed"      // its worker failed; Reason and LogTail say how
	TrialInterrupted TrialState = "interrupted" // stopped by the sweep's signal, with a checkpoint
)

// trialStates are the values of the trials-by-state metric's label.
func trialStates() []string {
	return []string{string(TrialPending), string(TrialRunning), string(TrialSucceeded), string(TrialFailed), string(TrialInterrupted)}
}

// Files of a sweep directory.
const (
	ResultsJSON    = "results.json"
	ResultsCSV     = "results.csv"
	SweepFileCopy  = "sweep.yaml"
	TrialConfigDir = "trials" // trials/<name>.yaml: each trial's resolved configuration
)

// rankKey is a summary figure trials can be ranked by.
type rankKey struct {
	value     func(trainer.Summary) float64
	ascending bool // lower is better: losses and times
}

var rankKeys = map[string]rankKey{
	"test_accuracy":      {func(s trainer.Summary) float64 { return s.TestAccuracy }, false},
	"train_accuracy":     {func(s trainer.Summary) float64 { return s.TrainAccuracy }, false},
	"samples_per_second": {func(s trainer.Summary) float64 { return s.SamplesPerSecond }, false},
	"test_loss":          {func(s trainer.Summary) float64 { return s.TestLoss }, true},
	"train_loss":         {func(s trainer.Summary) float64 { return s.TrainLoss }, true},
	"wall_seconds":       {func(s trainer.Summary) float64 { return s.WallSeconds }, true},
}

// RankKeys are the summary keys a sweep can rank by, sorted.
func RankKeys() []string {
	keys := make([]string, 0, len(rankKeys))
	for k := range rankKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// RankAscending reports whether lower is better for key (losses and
// times).
func RankAscending(key string) bool { return rankKeys[key].ascending }

// TrialResult is one trial's row of results.json.
type TrialResult struct {
	// Rank is 1 for the best succeeded trial; 0 for one that did not
	// succeed.
	Rank   int        `json:"rank"`
	Name   string     `json:"name"`
	State  TrialState `json:"state"`
	Device string     `json:"device,omitempty"` // e.g. cpu, cuda:1
	// CPUThreads is the kernel threads the trial's CPU device had in its
	// last attempt (see cpuThreads); 0 on a GPU or through a scheduler.
	CPUThreads int `json:"cpu_threads,omitempty"`
	// Value is the rank-by figure of a succeeded trial.
	Value     *float64       `json:"value,omitempty"`
	RunDir    string         `json:"run_dir"`
	Config    string         `json:"config"` // the resolved configuration: tolaria train --config
	Overrides map[string]any `json:"overrides"`
	Attempts  int            `json:"attempts"`
	// Reason says why a trial failed, or was interrupted or never started.
	Reason string `json:"reason,omitempty"`
	// LogTail is the end of a failed trial's worker log.
	LogTail string           `json:"log_tail,omitempty"`
	Summary *trainer.Summary `json:"summary,omitempty"`
	Seconds float64          `json:"seconds,omitempty"` // the trial's time, all attempts
}

// Results is a sweep's results.json: the trials ranked.
type Results struct {
	SweepFile string         `json:"sweep_file"`
	RankBy    string         `json:"rank_by"`
	Order     string         `json:"order"` // ascending or descending
	Updated   time.Time      `json:"updated"`
	Counts    map[string]int `json:"counts"` // trials by state
	Trials    []TrialResult  `json:"trials"`
	// Damaged, read by LoadDir, says how the directory's results.json was
	// missing or damaged when its rows were rebuilt; "" when it was read.
	Damaged string `json:"-"`
}

// rank orders rows: succeeded trials by the rank-by figure (ties by
// name), then the others in the sweep's order, and numbers the succeeded.
func rank(rows []TrialResult, by string) []TrialResult {
	key := rankKeys[by]
	out := slices.Clone(rows)
	for i := range out {
		out[i].Rank, out[i].Value = 0, nil
		if out[i].State == TrialSucceeded && out[i].Summary != nil {
			v := key.value(*out[i].Summary)
			out[i].Value = &v
		}
	}
	slices.SortStableFunc(out, func(a, b TrialResult) int {
		switch {
		case a.Value == nil && b.Value == nil:
			return 0
		case a.Value == nil:
			return 1
		case b.Value == nil:
			return -1
		}
		c := cmp.Compare(*a.Value, *b.Value)
		if !key.ascending {
			c = -c
		}
		return cmp.Or(c, strings.Compare(a.Name, b.Name))
	})
	for i := range out {
		if out[i].Value != nil {
			out[i].Rank = i + 1
		}
	}
	return out
}

func newResults(sweepFile, by string, rows []TrialResult, now time.Time) Results {
	r := Results{SweepFile: sweepFile, RankBy: by, Order: "descending", Updated: now.UTC(), Counts: map[string]int{}, Trials: rank(rows, by)}
	if rankKeys[by].ascending {
		r.Order = "ascending"
	}
	for _, t := range rows {
		r.Counts[string(t.State)]++
	}
	return r
}

// write replaces results.json and results.csv in dir, each atomically.
// Both are streamed a row at a time: a large sweep's results, built whole
// in memory, took several times their size.
func (r Results) write(dir string) error {
	err := atomicfile.Write(filepath.Join(dir, ResultsJSON), 0o644, func(w io.Writer) error {
		b := bufio.NewWriterSize(w, 64<<10)
		if err := r.writeJSON(b); err != nil {
			return err
		}
		return b.Flush()
	})
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, ResultsCSV), 0o644, func(w io.Writer) error {
		b := bufio.NewWriterSize(w, 64<<10)
		if err := r.writeCSV(b); err != nil {
			return err
		}
		return b.Flush()
	})
}

// writeJSON writes r as json.MarshalIndent(r, "", "  ") does, and a
// newline, marshalling one trial at a time.
func (r Results) writeJSON(w io.Writer) error {
	head := r
	head.Trials = nil
	raw, err := json.MarshalIndent(head, "", "  ")
	if err != nil {
		return err
	}
	// The trials come last: the head ends `"trials": null` and its brace.
	raw, ok := bytes.CutSuffix(raw, []byte("null\n}"))
	if !ok {
		return fmt.Errorf("results: unexpected layout %q", raw[max(0, len(raw)-40):])
	}
	if len(r.Trials) == 0 {
		_, err := fmt.Fprintf(w, "%s[]\n}\n", raw)
		return err
	}
	if _, err := fmt.Fprintf(w, "%s[\n", raw); err != nil {
		return err
	}
	for i, t := range r.Trials {
		row, err := json.MarshalIndent(t, "    ", "  ")
		if err != nil {
			return err
		}
		sep := ",\n"
		if i == len(r.Trials)-1 {
			sep = "\n"
		}
		if _, err := fmt.Fprintf(w, "    %s%s", row, sep); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "  ]\n}\n")
	return err
}

// writeCSV writes the results as a table, one trial a row, best first:
// the rank-by figure first, then the others of a summary worth comparing.
func (r Results) writeCSV(out io.Writer) error {
	figures := []string{r.RankBy}
	for _, k := range []string{"test_accuracy", "test_loss", "train_loss", "samples_per_second"} {
		if k != r.RankBy {
			figures = append(figures, k)
		}
	}
	w := csv.NewWriter(out)
	head := append([]string{"rank", "name", "state"}, figures...)
	_ = w.Write(append(head, "steps", "params_sha256", "device", "cpu_threads", "attempts", "overrides", "run_dir", "reason", "log_tail"))
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }
	for _, t := range r.Trials {
		row := []string{"", t.Name, string(t.State)}
		if t.Rank > 0 {
			row[0] = strconv.Itoa(t.Rank)
		}
		steps, params := "", ""
		for _, k := range figures {
			v := ""
			if t.Summary != nil {
				v = num(rankKeys[k].value(*t.Summary))
			}
			row = append(row, v)
		}
		if t.Summary != nil {
			steps, params = strconv.Itoa(t.Summary.Steps), t.Summary.ParamsSHA256
		}
		threads := ""
		if t.CPUThreads > 0 {
			threads = strconv.Itoa(t.CPUThreads)
		}
		row = append(row, steps, params, t.Device, threads, strconv.Itoa(t.Attempts), overridesText(t.Overrides), t.RunDir, t.Reason, t.LogTail)
		_ = w.Write(row)
	}
	w.Flush()
	return w.Error()
}

func overridesText(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + overrideValue(m[k])
	}
	return strings.Join(parts, " ")
}

// overrideValue is a value as overridesText writes it: a list or a map
// (a model's layers) as JSON, its keys sorted, rather than Go's map syntax.
func overrideValue(v any) string {
	switch v.(type) {
	case []any, map[string]any:
		if b, err := json.Marshal(v); err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(v)
}

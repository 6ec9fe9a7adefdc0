package sweep

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSweepDividesTheCores: CPU worker processes placed side by side
// (--parallel 2) each get half the cores (at least one) unless the trial
// sets cpu_threads; results.json says how many each had, and so does the
// worker's CPU device, in the summary's device description.
func TestSweepDividesTheCores(t *testing.T) {
	cfg := sweepConfig(t, strings.Replace(budgetSweep, "  - {name: two}", "  - {name: two, cpu_threads: 3}", 1))
	cfg.Parallel = 2
	res, _ := runSweep(t, context.Background(), cfg)
	if res.Counts["succeeded"] != 2 {
		t.Fatalf("counts %v: %+v", res.Counts, res.Trials)
	}
	want := map[string]int{"one": max(1, runtime.GOMAXPROCS(0)/2), "two": 3}
	for _, r := range res.Trials {
		if r.CPUThreads != want[r.Name] {
			t.Errorf("trial %s: cpu_threads %d in the results, want %d", r.Name, r.CPUThreads, want[r.Name])
		}
		if r.Summary == nil || !strings.Contains(r.Summary.DeviceDescription, fmt.Sprintf("(float32, %s,", plural(want[r.Name], "thread"))) {
			t.Errorf("trial %s: the worker's device %v, want %d threads", r.Name, r.Summary, want[r.Name])
		}
	}
	if got := readResults(t, cfg.Dir); got.Trials[0].CPUThreads == 0 {
		t.Errorf("results.json does not say how many threads the trials had: %+v", got.Trials)
	}
	raw, err := os.ReadFile(filepath.Join(cfg.Dir, ResultsCSV))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := slices.Index(rows[0], "cpu_threads")
	for _, row := range rows[1:] {
		if col < 0 || row[col] != strconv.Itoa(want[row[1]]) {
			t.Errorf("results.csv does not say trial %s's threads (column %d): %q", row[1], col, row)
		}
	}
}

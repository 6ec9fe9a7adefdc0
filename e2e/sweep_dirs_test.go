package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/sweep"
)

// TestSweepDirectoryMovedOrDamaged: through the command, a finished
// sweep's directory moved elsewhere and resumed there names its new
// place in every row; a garbled results.json is rebuilt from the journal;
// a trial's run directory given as the sweep's is named for what it is;
// and a sweep file's unknown keys are all refused at once.
func TestSweepDirectoryMovedOrDamaged(t *testing.T) {
	dir := t.TempDir()
	file := writeSweepFile(t, dir, strings.Replace(e2eSweep, "epochs: 2", "epochs: 1", 1))
	first := filepath.Join(dir, "first")
	if r := tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", first); r.code != 0 {
		t.Fatalf("the sweep: exit %d\n%s", r.code, r.stderr)
	}
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(first, moved); err != nil {
		t.Fatal(err)
	}
	if r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", moved, "--device", "cpu"); r.code != 0 || !strings.Contains(r.stderr, "nothing to resume") {
		t.Fatalf("--resume of the moved sweep: exit %d\n%s", r.code, r.stderr)
	}
	check := func(when string) {
		t.Helper()
		res := readSweepResults(t, moved)
		if res.Counts["succeeded"] != 4 {
			t.Errorf("%s: counts %v", when, res.Counts)
		}
		for _, row := range res.Trials {
			if row.RunDir != filepath.Join(moved, row.Name) || row.Config != filepath.Join(moved, "trials", row.Name+".yaml") {
				t.Errorf("%s: trial %s names run_dir %s, config %s", when, row.Name, row.RunDir, row.Config)
			}
		}
	}
	check("moved")
	if err := os.WriteFile(filepath.Join(moved, sweep.ResultsJSON), []byte(`{"trials": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", moved, "--device", "cpu")
	if r.code != 0 || !strings.Contains(r.stderr, "results.json was damaged") || !strings.Contains(r.stderr, "rebuilt from sweep.yaml and journal.jsonl") {
		t.Fatalf("--resume of a damaged results.json: exit %d\n%s", r.code, r.stderr)
	}
	check("rebuilt")

	trial := filepath.Join(moved, "a")
	if r := tolaria(t, dir, nil, "sweep", "--resume", "--sweep-dir", trial); r.code != 2 || !strings.Contains(r.stderr, `it is the run directory of trial "a" of the sweep in `+moved) {
		t.Errorf("--resume of a trial's run directory: exit %d\n%s", r.code, r.stderr)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("base: {dataset: synthetic}\ngrd: {optimizer.lr: [0.1]}\nslurm: {partiton: gpu}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := tolaria(t, dir, nil, "sweep", bad, "--device", "cpu"); r.code != 2 || !strings.Contains(r.stderr, "unknown keys grd (did you mean grid?); slurm.partiton (did you mean slurm.partition?)") {
		t.Errorf("unknown keys of a sweep file: exit %d\n%s", r.code, r.stderr)
	}
}

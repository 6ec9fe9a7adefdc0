package eval

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestARunInUseIsRefusedUpFront: an evaluation of a run directory another
// tolaria holds (a run training in it) is refused before anything is
// scored or written, as bad input naming the holder's pid and what to
// do; and one that finds the directory taken between its plan and its run
// is refused the same way, its shards never started.
func TestARunInUseIsRefusedUpFront(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, rundir.ConfigFile), []byte("data: {dataset: synthetic}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	training, err := rundir.Hold(dir, "tolaria train", "")
	if err != nil {
		t.Fatal(err)
	}
	defer training.Release()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, refusal.ErrConfig) || !errors.Is(err, rundir.ErrBusy) || !field.Is(err, "run_dir") {
			t.Fatalf("%s: %v; want a refusal of run_dir as in use", what, err)
		}
		for _, want := range []string{fmt.Sprintf("(pid %d, tolaria train)", os.Getpid()), "wait for it to end", "evaluate a copy", "tolaria eval --run-dir " + dir + "-copy"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v\nlacks %q", what, err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, Dir)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused evaluation made %s (%v)", what, Dir, err)
		}
	}
	_, err = Plan(Request{RunDir: dir, Workers: 1})
	check("plan", err)
	_, err = planned(dir, 1).Run(context.Background())
	check("run", err)
}

// TestAnEvaluationHoldsItsRun: while an evaluation runs, a training run
// (or a second evaluation) is refused the directory, told that an
// evaluation holds it.
func TestAnEvaluationHoldsItsRun(t *testing.T) {
	dir := t.TempDir()
	held, err := rundir.Hold(dir, "tolaria eval", inUse(dir))
	if err != nil {
		t.Fatal(err)
	}
	_, err = rundir.Plan(dir, true, time.Now())
	if !errors.Is(err, rundir.ErrBusy) || !strings.Contains(err.Error(), "tolaria eval") {
		t.Errorf("a resumed run beside an evaluation: %v", err)
	}
	if _, err := rundir.Hold(dir, "tolaria eval", inUse(dir)); !errors.Is(err, rundir.ErrBusy) {
		t.Errorf("a second evaluation: %v", err)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}
	if err := rundir.CheckIdle(dir, ""); err != nil {
		t.Errorf("after the evaluation: %v", err)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// says fails the test unless r exited 2 saying every one of want and
// none of not.
func says(t *testing.T, what string, r result, want, not []string) {
	t.Helper()
	if r.code != 2 {
		t.Errorf("%s: exit %d, want 2\n%s", what, r.code, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("%s: the refusal lacks %q\n%s", what, w, r.stderr)
		}
	}
	for _, n := range not {
		if strings.Contains(r.stderr, n) {
			t.Errorf("%s: the refusal says %q\n%s", what, n, r.stderr)
		}
	}
}

// TestResumeRefusalsNameWhatTheUserGave: a resume with another batch
// size names --batch-size, not the optimizer's total_steps and warm-up
// derived from it; a run whose checkpoint was emptied is told the file
// is empty and how to go on (no earlier checkpoint is kept: start the
// run again elsewhere). Neither writes anything.
func TestResumeRefusalsNameWhatTheUserGave(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, quick(run, "--batch-size", "32", "--max-steps", "3")...); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	before := snapshot(t, run)
	r := tolaria(t, dir, nil, quick(run, "--batch-size", "16", "--resume")...)
	says(t, "resume with another batch size", r,
		[]string{"--batch-size: the checkpoint was written with batch size 32 but this run has 16", "total_steps (epochs × steps per epoch) follows from it"},
		[]string{"lr_warmup_steps"})
	sameFiles(t, before, snapshot(t, run))

	ck := filepath.Join(run, trainer.CheckpointFile)
	if err := os.WriteFile(ck, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before = snapshot(t, run)
	r = tolaria(t, dir, nil, quick(run, "--batch-size", "32", "--resume")...)
	says(t, "resume of an empty checkpoint", r,
		[]string{ck + ": is empty (0 bytes)", "start the run again in another --run-dir"},
		[]string{"bad magic", "point --run-dir at"})
	sameFiles(t, before, snapshot(t, run))
}

// TestEvalCheckpointRefusalsAdviseForEval: a file given with
// --checkpoint that is empty or not a checkpoint is refused under
// --checkpoint, called what it is, with no advice about resuming or
// about --run-dir.
func TestEvalCheckpointRefusalsAdviseForEval(t *testing.T) {
	dir := t.TempDir()
	run := trainedRun(t, dir)
	empty, garbage := filepath.Join(dir, "empty.tlck"), filepath.Join(dir, "garbage.tlck")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for file, what := range map[string]string{empty: "is empty (0 bytes)", garbage: "not a tolaria checkpoint"} {
		before := snapshot(t, dir)
		r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--checkpoint", file)
		says(t, "eval --checkpoint "+filepath.Base(file), r,
			[]string{"--checkpoint: checkpoint refused: " + file + ": " + what},
			[]string{"bad magic", "--run-dir", "resume"})
		sameFiles(t, before, snapshot(t, dir))
	}
}

// TestDataDirThatIsAFileIsRefused: --data-dir naming a file is refused
// as such (not as a matter of permissions) with exit 2, by train and by
// eval, whose worker reports it as the user's input.
func TestDataDirThatIsAFileIsRefused(t *testing.T) {
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist"); err != nil {
		t.Skip("dataset-fashion-mnist is not installed (scripts/install-deps.sh test installs it)")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("not a dataset\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{"data: " + file + ": is a file, not a directory; give --data-dir the directory holding train-images-idx3-ubyte.gz"}
	r := tolaria(t, dir, nil, "train", "--device", "cpu", "--data-dir", file, "--run-dir", filepath.Join(dir, "refused"))
	says(t, "train --data-dir FILE", r, want, []string{"permissions"})

	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, "train", "--device", "cpu", "--hidden", "16", "--epochs", "1", "--max-steps", "2", "--run-dir", run); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	before := snapshot(t, run)
	r = tolaria(t, dir, nil, "eval", "--run-dir", run, "--data-dir", file)
	says(t, "eval --data-dir FILE", r, append(want, "--data-dir: data: "), []string{"permissions", "checking the evaluation in the worker"})
	sameFiles(t, before, snapshot(t, run))
}

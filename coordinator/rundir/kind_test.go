package rundir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

// rlConfig is the start of a tolaria rl run's config.yaml.
const rlConfig = "# tolaria rl configuration sha256 0000; --resume refuses the run once this file is edited\nenv: CartPole-v1\nnum_agents: 1\nseed: 1\ngamma: 0.99\n"

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sweepDir is a sweep's directory with two trials, b ranked first; only
// the trials named in withCheckpoint have a checkpoint.
func sweepDir(t *testing.T, withCheckpoint ...string) string {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "sweep.yaml"), "base: {data: {dataset: synthetic}}\ngrid: {optimizer.lr: [0.1, 0.2]}\n")
	write(t, filepath.Join(dir, "results.json"), `{"trials": [{"rank": 1, "name": "b"}, {"rank": 2, "name": "a"}]}`)
	for _, trial := range []string{"a", "b"} {
		write(t, filepath.Join(dir, trial, ConfigFile), "data: {dataset: synthetic}\n")
	}
	for _, trial := range withCheckpoint {
		writeCheckpoint(t, filepath.Join(dir, trial))
	}
	return dir
}

func wants(t *testing.T, err error, key field.Name, parts ...string) {
	t.Helper()
	refused(t, err, ErrOtherKind, key)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%v\nlacks %q", err, p)
		}
	}
	if strings.Contains(err.Error(), "config file") || strings.Contains(err.Error(), "--config") {
		t.Errorf("%v\nspeaks of a configuration file the user did not give", err)
	}
}

// TestARunOfTolariaRLIsNamedSo: an rl run's directory, given to a fresh
// or resumed training run or to a command that reads a training run,
// is refused as an rl run (not as a configuration file of tolaria rl's,
// which the user never gave), with what to do; a fresh training run no
// longer takes it (its lock file made it look like a training run's).
func TestARunOfTolariaRLIsNamedSo(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, ConfigFile), rlConfig)
	write(t, filepath.Join(dir, LockFile), "pid 1")
	_, err := Plan(dir, false, now)
	wants(t, err, "run_dir", dir+" is a tolaria rl run (its config.yaml has env, num_agents)", "empty or new run_dir")
	_, err = Plan(dir, true, now)
	wants(t, err, "resume", "tolaria rl run", "continue it with tolaria rl --resume --run-dir "+dir)
	_, err = Spec(dir)
	wants(t, err, "run_dir", "tolaria rl run", "point run_dir at a run made by tolaria train", "summary.json")
	if err := (&Dir{path: dir}).Claim(); err == nil {
		t.Error("a fresh run claimed an rl run's directory")
	}
}

// TestASweepDirectoryIsNamedSo: a sweep's directory given as a run says it
// is a sweep's, with how to continue the sweep, and names the best trial
// with a checkpoint as the run to read or resume.
func TestASweepDirectoryIsNamedSo(t *testing.T) {
	dir := sweepDir(t, "a", "b")
	_, err := Plan(dir, true, now)
	wants(t, err, "run_dir", dir+" is a tolaria sweep directory", "tolaria sweep --resume --sweep-dir "+dir,
		"such as run_dir "+filepath.Join(dir, "b")+" (the best in its results.json)")
	_, err = Plan(dir, false, now)
	wants(t, err, "run_dir", "tolaria sweep directory", "empty or new run_dir")
	_, err = Spec(dir)
	wants(t, err, "run_dir", "tolaria sweep directory", "one of its trials' run directories, such as "+filepath.Join(dir, "b")+" (the best")

	// The best trial has no checkpoint (it is still training): the next.
	_, err = Spec(sweepDir(t, "a"))
	wants(t, err, "run_dir", string(filepath.Separator)+"a (ranked 2 in its results.json)")
	_, err = Spec(sweepDir(t))
	wants(t, err, "run_dir", "once one has a checkpoint")
	_, err = Plan(sweepDir(t), true, now)
	wants(t, err, "run_dir", "tolaria sweep --resume --sweep-dir")

	// A trial's own directory is a run like any other.
	if _, err := Plan(filepath.Join(dir, "b"), true, now); err != nil {
		t.Errorf("a trial's run: %v", err)
	}
}

// TestFreshRunInACompleteRunSaysItIsComplete: a fresh run pointed at a
// finished run is told that there is nothing to resume (--resume would be
// refused), not to use --resume; one pointed at a stopped run is told to.
func TestFreshRunInACompleteRunSaysItIsComplete(t *testing.T) {
	dir := t.TempDir()
	writeCheckpoint(t, dir)
	if err := WriteSummary(filepath.Join(dir, SummaryFile), trainer.Summary{Steps: 9}); err != nil {
		t.Fatal(err)
	}
	_, err := Plan(dir, false, now)
	refused(t, err, ErrExists, "run_dir")
	for _, p := range []string{"complete", "nothing to resume", "choose another run_dir"} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%v\nlacks %q", err, p)
		}
	}
	if strings.Contains(err.Error(), "use resume") {
		t.Errorf("%v\nsuggests resuming a complete run", err)
	}
	if err := WriteSummary(filepath.Join(dir, SummaryFile), trainer.Summary{Steps: 5, Interrupted: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := Plan(dir, false, now); err == nil || !strings.Contains(err.Error(), "use resume") {
		t.Errorf("a stopped run: %v, want the hint to resume it", err)
	}
}

package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestTrainSummary(t *testing.T) {
	var b bytes.Buffer
	TrainSummary(&b, trainer.Summary{Device: "cpu", Steps: 5, TestAccuracy: 0, EpochSeconds: nil}, true, "runs/x")
	if !strings.Contains(b.String(), "no evaluation yet") || strings.Contains(b.String(), "test accuracy 0.0000") {
		t.Errorf("a run stopped in its first epoch: %q", b.String())
	}
	b.Reset()
	TrainSummary(&b, trainer.Summary{Device: "cpu", Steps: 5, TestAccuracy: 0.9, TestLoss: 0.3, EpochSeconds: []float64{1}}, true, "runs/x")
	if !strings.Contains(b.String(), "test accuracy 0.9000, test loss 0.3000") || !strings.HasSuffix(b.String(), "run directory runs/x\n") {
		t.Errorf("a finished epoch: %q", b.String())
	}
	b.Reset()
	TrainSummary(&b, trainer.Summary{Device: "cpu", Steps: 5, TestLoss: 0.3, EpochSeconds: []float64{1}}, false, "runs/x")
	if strings.Contains(b.String(), "accuracy") {
		t.Errorf("a regression loss: %q", b.String())
	}
}

func TestTrainStopped(t *testing.T) {
	dir := t.TempDir()
	rd, err := coordinator.PlanRunDir(dir, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	say := func(sum trainer.Summary) string {
		var b bytes.Buffer
		TrainStopped(&b, rd, sum, "interrupted")
		return b.String()
	}
	if got := say(trainer.Summary{Steps: 0}); !strings.Contains(got, "nothing to resume") || strings.Contains(got, "checkpoint saved") {
		t.Errorf("stopped before the first step of a fresh run: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, trainer.CheckpointFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := say(trainer.Summary{Steps: 40, ResumedFromStep: 40}); !strings.Contains(got, "checkpoint of step 40 is unchanged") || !strings.Contains(got, "--resume") {
		t.Errorf("stopped before a resumed run's first step: %q", got)
	}
	if got := say(trainer.Summary{Steps: 52, ResumedFromStep: 40}); !strings.Contains(got, "interrupted after 52 steps; checkpoint saved") {
		t.Errorf("stopped after steps: %q", got)
	}
	var b bytes.Buffer
	TrainStopped(&b, rd, trainer.Summary{Steps: 5}, "stopped at --max-steps 5")
	if got := b.String(); !strings.HasPrefix(got, "tolaria: stopped at --max-steps 5 after 5 steps; checkpoint saved") {
		t.Errorf("stopped by --max-steps: %q", got)
	}
}

// TestShellCommand: a word a shell would read otherwise is quoted, a
// quote inside it escaped; plain words are left as they are.
func TestShellCommand(t *testing.T) {
	got := ShellCommand([]string{"sbatch", "--array=0-3%2", "", "a b", "it's", "x!", "--mem=8G"})
	if want := `sbatch --array=0-3%2 '' 'a b' 'it'\''s' 'x!' --mem=8G`; got != want {
		t.Errorf("ShellCommand = %s, want %s", got, want)
	}
}

package coordinator

import (
	"path/filepath"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// TestSlurmEvalRefusesWhatCannotBeQuoted: an evaluation's run directory
// that cannot go into the batch script is refused with the setting named.
func TestSlurmEvalRefusesWhatCannotBeQuoted(t *testing.T) {
	injected := filepath.Join(t.TempDir(), "run\ntouch INJECTED\n#")
	ev := eval.Request{RunDir: injected, Workers: 2, Launch: launch.Slurm()}
	if err := ev.Validate(); !field.Is(err, "run_dir") {
		t.Errorf("an evaluation's run directory holding a newline: %v, want a refusal of run_dir", err)
	}
	if ev.RunDir = filepath.Join(t.TempDir(), `run\dir`); !field.Is(ev.Validate(), "run_dir") {
		t.Errorf("an evaluation's run directory holding a backslash: %v, want a refusal of run_dir", ev.Validate())
	}
	if ev.Launch = launch.Local(); ev.Validate() != nil {
		t.Errorf("a local evaluation is no business of Slurm's: %v", ev.Validate())
	}
}

package job

import (
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
)

func TestUnknownEnvironmentVariables(t *testing.T) {
	known := []field.Name{"model.hidden", "epochs", "batch_size"}
	got := UnknownEnv([]string{"TOLARIA_HIDDEN=16", "TOLARIA_EPOCHS=2", "TOLARIA_EPOCS=3", "TOLARIA_WORKER=/x",
		"TOLARIA_E2E_ACCURACY=1", "PATH=/bin", "TOLARIA_BATCH_SIZE=8"}, known, "TOLARIA_WORKER")
	want := []string{
		"TOLARIA_EPOCS is not a tolaria setting and is ignored",
		"TOLARIA_HIDDEN is not a tolaria setting and is ignored; did you mean TOLARIA_MODEL_HIDDEN?",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("UnknownEnv:\n got %q\nwant %q", got, want)
	}
}

func TestEnvVar(t *testing.T) {
	for key, want := range map[field.Name]string{"model.hidden": "TOLARIA_MODEL_HIDDEN", "batch_size": "TOLARIA_BATCH_SIZE", "lr": "TOLARIA_LR"} {
		if got := EnvVar(key); got != want {
			t.Errorf("EnvVar(%s) = %s, want %s", key, got, want)
		}
	}
}

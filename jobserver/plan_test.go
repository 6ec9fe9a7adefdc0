package jobserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
)

// TestPlanJobs: a worker checks jobs without opening a device: a job that
// plans comes back with the files its data was read from; a batch larger
// than the training set, with the setting it names; a missing corpus, with
// its path; an invalid spec, with its key.
func TestPlanJobs(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus")
	if err := os.WriteFile(corpus, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog\n", 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	good := smallSpec()
	big := smallSpec()
	big.BatchSize, big.Ragged = 60000, "drop"
	text := evalTextSpec(t, dir)
	text.DataDir = corpus
	missing := text
	missing.DataDir = filepath.Join(dir, "none")
	invalid := smallSpec()
	invalid.Epochs = 0
	plans, err := PlanJobs(context.Background(), local(t), []job.Spec{good, big, text, missing, invalid})
	if err != nil {
		t.Fatal(err)
	}
	if err := plans[0].Err(); err != nil || len(plans[0].Files) != 0 {
		t.Errorf("a synthetic job: %+v, want planned with no files", plans[0])
	}
	if err := plans[1].Err(); !field.Is(err, "schedule.batch_size") {
		t.Errorf("a batch larger than the training set: %v (%+v), want a refusal naming schedule.batch_size", err, plans[1])
	}
	if err := plans[2].Err(); err != nil || len(plans[2].Files) != 1 || plans[2].Files[0].Path != corpus || plans[2].Files[0].Size == 0 {
		t.Errorf("a text job: %+v, want planned with its corpus", plans[2])
	}
	if err := plans[3].Err(); err == nil || !strings.Contains(err.Error(), missing.DataDir) {
		t.Errorf("a missing corpus: %v, want a refusal naming it", err)
	}
	var fe *field.Error
	if err := plans[4].Err(); !errors.As(err, &fe) || fe.Field != "schedule.epochs" {
		t.Errorf("an invalid spec: %v (%+v), want a refusal naming schedule.epochs", err, plans[4])
	}
}

package jobserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
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

// TestPlanEval: a worker checks an evaluation without opening a device: the
// split's size and shape, its fingerprints and the checkpoint's step and
// digest, as the shards will see them; a checkpoint of another model is a
// checkpoint refusal, a missing corpus a usage one.
func TestPlanEval(t *testing.T) {
	spec := evalTextSpec(t, t.TempDir())
	if _, _, err := Run(context.Background(), local(t), "cpu", spec, Sink{}); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	ej := EvalJob{Spec: spec, Checkpoint: ck, Split: SplitTest, Shards: 2, TopK: 1000}
	ep, err := PlanEval(context.Background(), local(t), ej)
	if err != nil {
		t.Fatal(err)
	}
	ds, _, files, err := EvalData(spec, SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	sha, _ := FileSHA256(ck)
	if ep.Samples != ds.Len() || ep.Positions != 8 || ep.Classes != 256 || ep.Data != SplitFingerprint(ds) || ep.CheckpointSHA256 != sha ||
		ep.Step == 0 || ep.TopK != 256 || len(ep.Files) != 1 || ep.Files[0] != files[0] {
		t.Fatalf("plan %+v", ep)
	}
	other := ej
	other.Spec.Layers = job.Layers{nn.Embedding(data.TextVocab, 8), nn.Positional(), nn.LMHead()}
	var we *worker.Error
	if _, err := PlanEval(context.Background(), local(t), other); !errors.As(err, &we) || we.Kind != worker.KindCheckpoint || !strings.Contains(we.Message, "it was written for model") {
		t.Errorf("another model: %v", err)
	}
	missing := ej
	missing.Spec.DataDir = filepath.Join(t.TempDir(), "none")
	if _, err := PlanEval(context.Background(), local(t), missing); !errors.As(err, &we) || we.Kind != worker.KindUsage || !strings.Contains(we.Message, missing.Spec.DataDir) {
		t.Errorf("a missing corpus: %v", err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.tlck")
	raw, _ := os.ReadFile(ck)
	raw[len(raw)/2] ^= 1
	if err := os.WriteFile(damaged, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := ej
	bad.Checkpoint = damaged
	if _, err := PlanEval(context.Background(), local(t), bad); !errors.As(err, &we) || we.Kind != worker.KindCheckpoint {
		t.Errorf("a damaged checkpoint: %v", err)
	}
}

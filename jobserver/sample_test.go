package jobserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// textSpec is a one-block character transformer on a small text file,
// trained for an epoch into its run directory.
func textSpec(t *testing.T) job.Spec {
	t.Helper()
	corpus := t.TempDir()
	text := strings.Repeat("the quick brown fox jumps over the lazy dog\n", 40)
	if err := os.WriteFile(filepath.Join(corpus, "text"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	layers, err := job.ParseLayers(`[{embedding: {vocab: 256, dim: 16}}, {positional: {}}, {transformer_block: {heads: 2, mlp: 32}}, {layernorm: {}}, {lm_head: {}}]`)
	if err != nil {
		t.Fatal(err)
	}
	s := job.Default()
	s.Device, s.Dataset, s.DataDir, s.Context, s.Input, s.Layers = "cpu", "text", corpus, 16, []int{16}, layers
	s.Epochs, s.BatchSize, s.LR, s.EnableGraphs = 1, 8, 0.003, true
	s.RunDir = t.TempDir()
	if _, _, err := Run(context.Background(), local(t), "cpu", s, Sink{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServeSample: a worker serves a sampling job: it verifies the
// checkpoint (its digest is the one the coordinator saw) and draws the
// text the tolaria process draws on the same device from the same seed,
// graphs on or off; another seed draws other text; and a job it cannot do
// is refused with a reason, never with text.
func TestServeSample(t *testing.T) {
	spec := textSpec(t)
	ck := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	sha, err := FileSHA256(ck)
	if err != nil {
		t.Fatal(err)
	}
	sj := SampleJob{Spec: spec, Checkpoint: ck, CheckpointSHA256: sha, Prompt: []byte("the quick"), Tokens: 40,
		Temperature: 1, Seed: 7, Graphs: true}
	hello, res, err := Sample(context.Background(), local(t), "cpu", sj)
	if err != nil {
		t.Fatal(err)
	}
	if hello.Device != "cpu" || !hello.Advances || len(res.Text) != sj.Tokens || res.Step == 0 {
		t.Fatalf("hello %+v, result %+v", hello, res)
	}
	eager := sj
	eager.Graphs = false
	if _, again, err := Sample(context.Background(), local(t), "cpu", eager); err != nil || string(again.Text) != string(res.Text) {
		t.Fatalf("eagerly: %q, %v; with graphs %q", again.Text, err, res.Text)
	}
	// The tolaria process's own path (SampleText) draws the same bytes.
	train, test, err := spec.LoadData()
	if err != nil {
		t.Fatal(err)
	}
	tc, err := spec.Config(train, test, job.Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkpoint, err := trainer.CheckpointFor(tc, ck)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := OpenCPU("cpu", spec)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if here, err := SampleText(context.Background(), dev, tc, checkpoint, sj, nil); err != nil || string(here) != string(res.Text) {
		t.Fatalf("in process: %q, %v; the worker drew %q", here, err, res.Text)
	}
	other := sj
	other.Seed = 8
	if _, o, err := Sample(context.Background(), local(t), "cpu", other); err != nil || string(o.Text) == string(res.Text) {
		t.Errorf("seed 8: %q, %v; seed 7 drew the same", o.Text, err)
	}

	mlp := smallSpec()
	mlp.RunDir = t.TempDir()
	if _, _, err := Run(context.Background(), local(t), "cpu", mlp, Sink{}); err != nil {
		t.Fatal(err)
	}
	mlpCk := filepath.Join(mlp.RunDir, trainer.CheckpointFile)
	mlpSHA, err := FileSHA256(mlpCk)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(*SampleJob)
		kind string
		says string
	}{
		{"another checkpoint's digest", func(s *SampleJob) { s.CheckpointSHA256 = "00" }, worker.KindCheckpoint, "changed since sampling began"},
		{"no checkpoint", func(s *SampleJob) { s.Checkpoint = filepath.Join(t.TempDir(), "none") }, worker.KindCheckpoint, "none"},
		{"no tokens", func(s *SampleJob) { s.Tokens = 0 }, worker.KindUsage, "tokens 0"},
		{"a negative temperature", func(s *SampleJob) { s.Temperature = -1 }, worker.KindUsage, "temperature -1"},
		{"an MLP", func(s *SampleJob) { s.Spec, s.Checkpoint, s.CheckpointSHA256 = mlp, mlpCk, mlpSHA }, worker.KindUsage, "not a token model"},
		{"another device", func(s *SampleJob) {}, worker.KindNoDevice, "not served in process"},
	} {
		bad := sj
		c.edit(&bad)
		dev := "cpu"
		if c.kind == worker.KindNoDevice {
			dev = "cuda"
		}
		_, res, err := Sample(context.Background(), local(t), dev, bad)
		var we *worker.Error
		if !errors.As(err, &we) || we.Kind != c.kind || !strings.Contains(we.Message, c.says) || res.Text != nil {
			t.Errorf("%s: %q, %v; want a %s failure saying %q", c.name, res.Text, err, c.kind, c.says)
		}
	}
}

// TestServeSampleCancelled: a sampling job cancelled while it draws
// stops after the token in flight and answers no text (a million tokens
// would take many minutes).
func TestServeSampleCancelled(t *testing.T) {
	spec := textSpec(t)
	ck := filepath.Join(spec.RunDir, trainer.CheckpointFile)
	sha, err := FileSHA256(ck)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, res, err := Sample(ctx, local(t), "cpu", SampleJob{Spec: spec, Checkpoint: ck, CheckpointSHA256: sha, Tokens: 1 << 20, Temperature: 1, Seed: 1})
	if err == nil || res.Text != nil {
		t.Fatalf("a cancelled job answered %d bytes, %v", len(res.Text), err)
	}
}

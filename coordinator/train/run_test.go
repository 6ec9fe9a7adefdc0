package train

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

func smallSpec(dir string) job.Spec {
	s := job.Default()
	s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.BatchSize, s.LogEvery = "cpu", "synthetic", 256, 2, []int{8}, 32, 1000
	s.EnableGraphs, s.RunDir = true, dir
	return s
}

func request(t *testing.T, spec job.Spec) Request {
	shared := trainer.NewShared()
	t.Cleanup(func() { shared.Close() })
	return Request{Spec: spec, Shared: shared, Version: "test", Started: time.Now()}
}

// train prepares, trains and records a run, as tolaria train does.
func train(t *testing.T, req Request) (*Run, trainer.Summary) {
	t.Helper()
	r, err := Prepare(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sum, err := r.Train(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Record(&sum); err != nil {
		t.Fatal(err)
	}
	return r, sum
}

func TestRunWritesItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	req := request(t, smallSpec(dir))
	req.SummaryJSON = filepath.Join(t.TempDir(), "copy", "summary.json")
	r, sum := train(t, req)
	if sum.Steps != 2*256/32 || sum.ParamsSHA256 == "" || sum.WallSeconds <= 0 || r.Spec().Device != "cpu" {
		t.Fatalf("summary %+v", sum)
	}
	for _, name := range []string{rundir.ConfigFile, rundir.EventsFile, rundir.SummaryFile, trainer.CheckpointFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("the run directory lacks %s", name)
		}
	}
	events, _ := os.ReadFile(filepath.Join(dir, rundir.EventsFile))
	for _, kind := range []string{`"kind":"start"`, `"kind":"epoch"`, `"kind":"done"`} {
		if !strings.Contains(string(events), kind) {
			t.Errorf("events.jsonl lacks %s", kind)
		}
	}
	if _, err := os.Stat(req.SummaryJSON); err != nil {
		t.Errorf("no summary copy: %v", err)
	}
	if _, err := rundir.Plan(dir, true, time.Now()); err != nil {
		t.Errorf("Close kept the run directory locked: %v", err)
	}
}

// TestRefusedRequestsWriteNothing: what Prepare refuses leaves the file
// system as it was.
func TestRefusedRequestsWriteNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	bad := smallSpec(dir)
	bad.BatchSize = 0
	graphsForever := smallSpec(dir)
	graphsForever.WarmupBatches = 100
	for _, c := range []struct {
		name string
		req  Request
		key  field.Name
	}{
		{"an invalid spec", request(t, bad), "schedule.batch_size"},
		{"graphs never captured", request(t, graphsForever), "graphs.warmup_batches"},
		{"a malformed metrics address", func() Request { r := request(t, smallSpec(dir)); r.MetricsAddr = "bad::addr"; return r }(), "metrics_addr"},
		{"a summary path that is a directory", func() Request { r := request(t, smallSpec(dir)); r.SummaryJSON = t.TempDir(); return r }(), "summary_json"},
		{"a summary path under a file", func() Request {
			r := request(t, smallSpec(dir))
			file := filepath.Join(t.TempDir(), "notes.txt")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			r.SummaryJSON = filepath.Join(file, "out", "summary.json")
			return r
		}(), "summary_json"},
		{"a summary path in an unwritable directory", func() Request {
			r := request(t, smallSpec(dir))
			r.SummaryJSON = "/proc/tolaria-summary.json" // not even root creates files there
			return r
		}(), "summary_json"},
	} {
		_, err := Prepare(context.Background(), c.req)
		if !errors.Is(err, refusal.ErrConfig) || !field.Is(err, c.key) {
			t.Errorf("%s: %v; want refusal.ErrConfig naming %s", c.name, err, c.key)
		}
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("a refused request created the run directory")
	}
}

// TestResumeContinuesTheRun: a run stopped after some steps and resumed
// ends with the parameters of one left alone; a finished run is not
// resumed, and stays as it was.
func TestResumeContinuesTheRun(t *testing.T) {
	_, whole := train(t, request(t, smallSpec(filepath.Join(t.TempDir(), "whole"))))
	dir := filepath.Join(t.TempDir(), "run")
	part := smallSpec(dir)
	part.MaxSteps = 11
	if _, sum := train(t, request(t, part)); !sum.Interrupted {
		t.Fatalf("the first part was not stopped: %+v", sum)
	}
	rest := smallSpec(dir)
	rest.Resume = true
	_, sum := train(t, request(t, rest))
	if sum.ParamsSHA256 != whole.ParamsSHA256 || sum.ResumedFromStep != 11 {
		t.Fatalf("resumed from step %d to params %s; the whole run ends with %s", sum.ResumedFromStep, sum.ParamsSHA256, whole.ParamsSHA256)
	}
	configs, _ := filepath.Glob(filepath.Join(dir, "config.resume-*.yaml"))
	if len(configs) != 1 {
		t.Fatalf("the resumed run recorded %d configurations", len(configs))
	}
	before, _ := os.ReadFile(filepath.Join(dir, trainer.CheckpointFile))
	_, err := Prepare(context.Background(), request(t, rest))
	if !errors.Is(err, refusal.ErrConfig) || !errors.Is(err, trainer.ErrCheckpoint) || !strings.Contains(err.Error(), "complete") {
		t.Fatalf("resuming a finished run: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, trainer.CheckpointFile)); string(after) != string(before) {
		t.Fatal("a refused resume changed the checkpoint")
	}
}

// TestGeneratedRunDirTakenAfterPlanning: a default directory's name is
// taken by the time the run claims it (another run started in the same
// second); the run goes to the next name, checkpoints included.
func TestGeneratedRunDirTakenAfterPlanning(t *testing.T) {
	t.Chdir(t.TempDir())
	// Every name Prepare may generate in the next few seconds is taken.
	now := time.Now()
	for i := range 5 {
		if err := os.MkdirAll(filepath.Join("runs", now.Add(time.Duration(i)*time.Second).UTC().Format("20060102-150405")), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := train(t, request(t, smallSpec("")))
	got := r.Dir().Path()
	if !strings.HasSuffix(got, "-2") || r.Spec().RunDir != got {
		t.Fatalf("claimed %s, spec says %s; want a -2 suffix in both", got, r.Spec().RunDir)
	}
	if _, err := os.Stat(filepath.Join(got, trainer.CheckpointFile)); err != nil {
		t.Fatalf("the checkpoint did not follow the run to %s: %v", got, err)
	}
	if cks, _ := filepath.Glob(filepath.Join("runs", "*", trainer.CheckpointFile)); len(cks) != 1 {
		t.Fatalf("checkpoints %v", cks)
	}
}

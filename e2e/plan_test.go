package e2e

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/data"
)

// TestWorkerJobIsPlannedInAWorker: a job that runs in a worker process
// (--isolate) is checked by a worker before anything is written, the
// coordinator loading no data: a batch the training set cannot fill and a
// missing corpus are refused (exit 2, the setting or path named, no run
// directory made); a job that plans records in data.json the files the
// worker read.
func TestWorkerJobIsPlannedInAWorker(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	config := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(config, []byte(evalTextModel), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--dataset", "synthetic", "--synthetic-size", "600", "--batch-size", "5000", "--ragged", "drop"}, []string{"--batch-size", "too few examples"}},
		{[]string{"--config", filepath.Join(dir, "tiny.yaml"), "--data-dir", filepath.Join(dir, "none")}, []string{filepath.Join(dir, "none")}},
	} {
		args := append([]string{"train", "--isolate", "--device", "cpu", "--epochs", "1", "--run-dir", run}, c.args...)
		r := tolaria(t, dir, nil, args...)
		if r.code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", c.args, r.code, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", c.args, w, r.stderr)
			}
		}
		if _, err := os.Stat(run); !os.IsNotExist(err) {
			t.Fatalf("%v: a refused job made %s", c.args, run)
		}
	}
	corpus, _ := writeTwoFileCorpus(t, dir, "corpus", 30)
	trainTextRun(t, dir, corpus, "--isolate")
	rec := readJSON[rundir.DataRecord](t, filepath.Join(run, rundir.DataFile))
	want := []data.SourceFile{sourceOf(t, filepath.Join(corpus, "a")), sourceOf(t, filepath.Join(corpus, "b"))}
	if rec.Dataset != "text" || !reflect.DeepEqual(rec.Files, want) {
		t.Errorf("data.json of a worker's run: %+v, want the corpus's files %+v", rec, want)
	}
}

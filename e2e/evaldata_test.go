package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/data"
)

// writeTwoFileCorpus writes a text corpus of two files, a and b, of lines
// pangram lines each, under dir/name, and returns its directory and size.
func writeTwoFileCorpus(t *testing.T, dir, name string, lines int) (string, int) {
	t.Helper()
	corpus := filepath.Join(dir, name)
	if err := os.MkdirAll(corpus, 0o755); err != nil {
		t.Fatal(err)
	}
	var a, b strings.Builder
	for i := range lines {
		a.WriteString("the quick brown fox jumps over the lazy dog " + strings.Repeat("z", i%7) + "\n%\n")
		b.WriteString("pack my box with five dozen liquor jugs " + strings.Repeat("q", i%5) + "\n%\n")
	}
	for file, text := range map[string]string{"a": a.String(), "b": b.String()} {
		if err := os.WriteFile(filepath.Join(corpus, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return corpus, a.Len() + b.Len()
}

// trainTextRun trains evalTextModel, the tiny token model, on corpus (as
// given: relative to dir, or whole) into dir/run, in dir, with extra
// flags, and returns the run directory.
func trainTextRun(t *testing.T, dir, corpus string, extra ...string) string {
	t.Helper()
	config := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(config, []byte(evalTextModel), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	args := append([]string{"train", "--config", config, "--data-dir", corpus, "--run-dir", run, "--device", "cpu"}, extra...)
	if r := tolaria(t, dir, nil, args...); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	return run
}

// sourceOf is the SourceFile of path, computed here.
func sourceOf(t *testing.T, path string) data.SourceFile {
	t.Helper()
	raw := readFile(t, path)
	sum := sha256.Sum256([]byte(raw))
	return data.SourceFile{Path: path, Size: int64(len(raw)), SHA256: hex.EncodeToString(sum[:])}
}

func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// TestEvalFingerprintsItsData: a run records the files it trained on
// (data.json: path, size, SHA-256); an evaluation on them says nothing,
// one with --data-dir on a copy of them neither, one on a copy with a file
// changed warns in eval.json naming the file (and still scores: new data
// is legitimate); and a data file that changes after the evaluation began
// fails the shard that read it, naming the file, with eval.json left as it
// was.
func TestEvalFingerprintsItsData(t *testing.T) {
	dir := t.TempDir()
	corpus, _ := writeTwoFileCorpus(t, dir, "corpus", 30)
	run := trainTextRun(t, dir, corpus)
	rec := readJSON[rundir.DataRecord](t, filepath.Join(run, rundir.DataFile))
	trained := []data.SourceFile{sourceOf(t, filepath.Join(corpus, "a")), sourceOf(t, filepath.Join(corpus, "b"))}
	if rec.Dataset != "text" || rec.DataDir != corpus || !reflect.DeepEqual(rec.Files, trained) {
		t.Fatalf("data.json: %+v\nwant the corpus's files %+v", rec, trained)
	}

	r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "2")
	if r.code != 0 {
		t.Fatalf("eval: exit %d\n%s", r.code, r.stderr)
	}
	same := readEval(t, run)
	if same.Warnings != nil || same.DataDir != corpus || !reflect.DeepEqual(same.DataFiles, trained) || strings.Contains(r.stderr, "warning") {
		t.Fatalf("eval on the training data: warnings %q, data_dir %q, files %+v\n%s", same.Warnings, same.DataDir, same.DataFiles, r.stderr)
	}

	// The same files elsewhere: the same data, no warning.
	copyDir, _ := writeTwoFileCorpus(t, dir, "copy", 30)
	r = tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "2", "--data-dir", copyDir)
	if r.code != 0 {
		t.Fatalf("eval --data-dir on a copy: exit %d\n%s", r.code, r.stderr)
	}
	if got := readEval(t, run); got.Warnings != nil || got.DataDir != copyDir || got.Accuracy != same.Accuracy || got.Loss != same.Loss {
		t.Errorf("eval --data-dir on a copy: warnings %q, data_dir %q, accuracy %v loss %v; want none, %s, %v %v",
			got.Warnings, got.DataDir, got.Accuracy, got.Loss, copyDir, same.Accuracy, same.Loss)
	}

	// One file of the copy changed: scored, with a warning naming it.
	before := sourceOf(t, filepath.Join(copyDir, "b"))
	appendTo(t, filepath.Join(copyDir, "b"), strings.Repeat("sphinx of black quartz, judge my vow\n%\n", 20))
	r = tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "2", "--data-dir", copyDir)
	if r.code != 0 {
		t.Fatalf("eval --data-dir on changed data: exit %d\n%s", r.code, r.stderr)
	}
	changed := readEval(t, run)
	want := "b was " + strconv.FormatInt(before.Size, 10) + " bytes, SHA-256 " + before.SHA256[:12]
	if len(changed.Warnings) != 1 || !strings.Contains(changed.Warnings[0], "differs from the data the run trained on") ||
		!strings.Contains(changed.Warnings[0], want) || !strings.Contains(r.stderr, "warning: the data differs") {
		t.Errorf("eval on changed data: warnings %q (want one naming %q)\n%s", changed.Warnings, want, r.stderr)
	}
	if !changed.Complete || changed.Samples <= same.Samples {
		t.Errorf("eval on a longer corpus: complete %v, %d windows (the training data's: %d)", changed.Complete, changed.Samples, same.Samples)
	}

	// The data changes after the evaluation began: the first worker
	// started (the one that checks the evaluation and fingerprints its
	// data) serves as it is; the next one appends to the corpus (once),
	// then serves. Every shard attempt reads other bytes than the
	// evaluation began with, so the shard fails twice naming the file, and
	// eval.json stays as it was.
	good := readFile(t, filepath.Join(run, eval.JSONFile))
	script := filepath.Join(dir, "changing-worker")
	started, altered := filepath.Join(dir, "started"), filepath.Join(dir, "altered")
	body := "#!/bin/sh\nif [ ! -e " + started + " ]; then : > " + started + "\nelif [ ! -e " + altered + " ]; then : > " + altered +
		"; echo 'a late line' >> " + filepath.Join(corpus, "a") + "; fi\nexec " + filepath.Join(binDir, "tolaria-worker") + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r = tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "1", "--device", "cpu", "--worker", script)
	if r.code != 3 {
		t.Fatalf("eval with the data changing under it: exit %d, want 3\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"the data changed since the evaluation began", filepath.Join(corpus, "a") + " was " + strconv.FormatInt(trained[0].Size, 10) + " bytes", "attempt 2 failed"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if got := readFile(t, filepath.Join(run, eval.JSONFile)); got != good {
		t.Errorf("a failed evaluation changed eval.json")
	}
	// No shard scored: no figures of zero examples pass for a result.
	if _, err := os.Stat(filepath.Join(run, eval.PartialJSONFile)); !os.IsNotExist(err) || !strings.Contains(r.stderr, "no shard was scored") || strings.Contains(r.stdout, "partial") {
		t.Errorf("an evaluation that scored nothing: eval.partial.json %v\nstdout %s\nstderr %s", err, r.stdout, r.stderr)
	}
}

// TestRelativeDataDirIsRecordedWhole: a run trained on a data directory
// given relative to where tolaria ran is evaluated from anywhere: its
// config.yaml names the directory whole.
func TestRelativeDataDirIsRecordedWhole(t *testing.T) {
	dir := t.TempDir()
	writeTwoFileCorpus(t, dir, "corpus", 30)
	run := trainTextRun(t, dir, "corpus")
	if raw := readFile(t, filepath.Join(run, "config.yaml")); !strings.Contains(raw, filepath.Join(dir, "corpus")) {
		t.Errorf("config.yaml does not name the corpus whole:\n%s", raw)
	}
	elsewhere := t.TempDir()
	if r := tolaria(t, elsewhere, nil, "eval", "--run-dir", run); r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Errorf("eval from another directory: exit %d\n%s", r.code, r.stderr)
	}
}

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// hyparquetReader reads a Parquet file with the npm package hyparquet
// under node, tolaria's code nowhere in the way, and prints what the test
// compares with eval.json: the rows, their row groups, the file's tolaria
// metadata, and sums over the rows in row order.
const hyparquetReader = `
import { pathToFileURL } from 'node:url'
const [lib, file] = process.argv.slice(2)
const { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } = await import(pathToFileURL(lib + '/node_modules/hyparquet/src/node.js'))
const buf = await asyncBufferFromFile(file)
const meta = await parquetMetadataAsync(buf)
const rows = await parquetReadObjects({ file: buf })
const cols = Object.keys(rows[0] || {})
const kv = Object.fromEntries((meta.key_value_metadata || []).map(e => [e.key, e.value]))
const k = Number(kv['tolaria.top_k'] || 0)
let loss = 0, correct = 0, ordered = true, topOK = true, maxTopSum = 0
rows.forEach((r, i) => {
  loss += r.loss
  if (r.label === r.predicted) correct++
  if (k > 0) {
    // The top k: k classes, the first the predicted one, probabilities
    // non-increasing, summing to at most 1.
    const c = r.top_class, p = r.top_prob
    if (!c || !p || c.length !== k || p.length !== k || c[0] !== r.predicted) topOK = false
    let sum = 0
    for (let j = 0; j < k && p; j++) {
      sum += p[j]
      if (j > 0 && p[j] > p[j - 1]) topOK = false
    }
    maxTopSum = Math.max(maxTopSum, sum)
  }
  const at = r.window === undefined ? Number(r.index) : Number(r.window) * (rows.length / (Number(rows[rows.length - 1].window) + 1)) + r.position
  if (at !== i) ordered = false
})
console.log(JSON.stringify({ rows: rows.length, num_rows: Number(meta.num_rows), row_groups: meta.row_groups.length,
  columns: cols, loss, correct, ordered, meta: kv, top_ok: topOK, max_top_sum: maxTopSum }))
`

type hyparquetSummary struct {
	Rows      int               `json:"rows"`
	NumRows   int               `json:"num_rows"`
	RowGroups int               `json:"row_groups"`
	Columns   []string          `json:"columns"`
	Loss      float64           `json:"loss"`
	Correct   int               `json:"correct"`
	Ordered   bool              `json:"ordered"`
	Meta      map[string]string `json:"meta"`
	// TopOK: every row's top k (tolaria.top_k of them) starts with its
	// predicted class and is non-increasing; MaxTopSum is the largest sum
	// of a row's top-k probabilities.
	TopOK     bool    `json:"top_ok"`
	MaxTopSum float64 `json:"max_top_sum"`
}

// checkTopK checks a file's top-k columns as hyparquet read them: k of
// each row (0: no columns), the first its predicted class, summing to at
// most 1.
func checkTopK(t *testing.T, got hyparquetSummary, k int, columns string) {
	t.Helper()
	if k > 0 {
		columns += ",top_class,top_prob"
	}
	if strings.Join(got.Columns, ",") != columns || got.Meta["tolaria.top_k"] != strconv.Itoa(k) {
		t.Errorf("columns %v, top_k %q; want %s, top_k %d", got.Columns, got.Meta["tolaria.top_k"], columns, k)
	}
	if !got.TopOK || got.MaxTopSum > 1+1e-12 || k > 0 && got.MaxTopSum <= 0 {
		t.Errorf("top %d: rows in order %v, the largest sum of a row's probabilities %v", k, got.TopOK, got.MaxTopSum)
	}
}

// hyparquetDir is where scripts/install-deps.sh test installs hyparquet
// (its node_modules): $XDG_CACHE_HOME/tolaria/node, or
// $HOME/.cache/tolaria/node.
func hyparquetDir(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "tolaria", "node")
	_, nodeErr := exec.LookPath("node")
	_, libErr := os.Stat(filepath.Join(dir, "node_modules", "hyparquet", "src", "node.js"))
	if nodeErr != nil || libErr != nil {
		if os.Getenv("TOLARIA_E2E_REQUIRE_PARQUET_READER") != "" {
			t.Fatalf("node or the npm package hyparquet (in %s) is missing: run scripts/install-deps.sh test", dir)
		}
		t.Skipf("node or the npm package hyparquet (in %s) is missing (scripts/install-deps.sh test installs them)", dir)
	}
	return dir
}

// readWithHyparquet summarises a Parquet file as hyparquet reads it.
func readWithHyparquet(t *testing.T, lib, path string) hyparquetSummary {
	t.Helper()
	script := filepath.Join(t.TempDir(), "read.mjs")
	if err := os.WriteFile(script, []byte(hyparquetReader), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("node", script, lib, path).Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node reading %s: %v\n%s", path, err, stderr)
	}
	var s hyparquetSummary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("node's summary %q: %v", out, err)
	}
	return s
}

// TestEvalPredictionsReadByHyparquet: tolaria eval --predictions writes a
// Parquet file that an independent reader (hyparquet, under node) reads
// whole, one row per example in index order, whose loss column sums (in
// row order, in float64) to eval.json's loss exactly and whose correct
// predictions are eval.json's; a partial evaluation writes none and
// leaves the complete one's file as it was; a complete evaluation without
// --predictions removes the file of the result it replaces.
func TestEvalPredictionsReadByHyparquet(t *testing.T) {
	lib := hyparquetDir(t)
	dir := t.TempDir()
	run := trainedRun(t, dir)
	path := filepath.Join(run, "predictions.parquet")
	for _, c := range []struct {
		n    string
		topK []string
		k    int
	}{{"1", nil, -1}, // the default: 5, capped at the classes
		{"3", []string{"--top-k", "0"}, 0}, {"2", []string{"--top-k", "2"}, 2}} {
		n := c.n
		r := tolaria(t, dir, nil, append([]string{"eval", "--run-dir", run, "--workers", n, "--predictions"}, c.topK...)...)
		if r.code != 0 {
			t.Fatalf("eval --workers %s --predictions: exit %d\n%s", n, r.code, r.stderr)
		}
		if !strings.Contains(r.stdout, "predictions "+path) {
			t.Errorf("the file is not named:\n%s", r.stdout)
		}
		rep := readEval(t, run)
		if rep.Predictions != "predictions.parquet" {
			t.Errorf("eval.json's predictions: %q", rep.Predictions)
		}
		got := readWithHyparquet(t, lib, path)
		if got.Rows != rep.Samples || got.NumRows != rep.Samples || !got.Ordered || got.RowGroups < 1 {
			t.Errorf("--workers %s: %+v, want %d rows in index order", n, got, rep.Samples)
		}
		k := c.k
		if k < 0 {
			k = min(5, len(rep.PerClass))
		}
		checkTopK(t, got, k, "index,label,predicted,loss")
		if got.Correct != rep.Correct || got.Loss/float64(got.Rows) != rep.Loss {
			t.Errorf("--workers %s: the rows' correct %d and mean loss %v; eval.json's %d and %v", n, got.Correct, got.Loss/float64(got.Rows), rep.Correct, rep.Loss)
		}
		if got.Meta["tolaria.checkpoint_sha256"] != rep.CheckpointSHA256 || got.Meta["tolaria.split"] != "test" {
			t.Errorf("metadata %v, eval.json's checkpoint %s", got.Meta, rep.CheckpointSHA256)
		}
	}
	// The shard files left carry the top 2: a resume with another k keeps
	// none of them, and writes the rows of an evaluation that never failed.
	want := figures(readEval(t, run))
	r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "2", "--predictions", "--top-k", "1", "--resume")
	if r.code != 0 || !strings.Contains(r.stderr, "no shard file of an earlier evaluation verifies") {
		t.Fatalf("eval --resume --top-k 1 after --top-k 2: exit %d\n%s", r.code, r.stderr)
	}
	if got := figures(readEval(t, run)); !reflect.DeepEqual(got, want) {
		t.Errorf("resumed with top 1: %+v, want %+v", got, want)
	}
	checkTopK(t, readWithHyparquet(t, lib, path), 1, "index,label,predicted,loss")
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r = tolaria(t, dir, []string{"TOLARIA_E2E_WORKER_FAULT=step=1,exit=7,shard=1"}, "eval", "--run-dir", run, "--workers", "3", "--predictions")
	if r.code != 3 {
		t.Fatalf("eval with a failing shard: exit %d, want 3\n%s", r.code, r.stderr)
	}
	if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
		t.Errorf("a partial evaluation changed %s (err %v)", path, err)
	}
	if r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "2"); r.code != 0 {
		t.Fatalf("eval: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("%s outlived the result it described (err %v)", path, err)
	}
	if rep := readEval(t, run); rep.Predictions != "" {
		t.Errorf("eval.json names predictions %q", rep.Predictions)
	}
}

// TestEvalPredictionsOfATokenModelReadByHyparquet: a token model's file
// has a row per position of every window, window by window.
func TestEvalPredictionsOfATokenModelReadByHyparquet(t *testing.T) {
	lib := hyparquetDir(t)
	dir := t.TempDir()
	run := trainedTokenRun(t, dir)
	r := tolaria(t, dir, nil, "eval", "--run-dir", run, "--workers", "3", "--predictions")
	if r.code != 0 {
		t.Fatalf("eval --predictions: exit %d\n%s", r.code, r.stderr)
	}
	rep := readEval(t, run)
	got := readWithHyparquet(t, lib, filepath.Join(run, rep.Predictions))
	if got.Rows != rep.Sequence.Tokens || !got.Ordered {
		t.Errorf("%+v, want %d rows in window, position order", got, rep.Sequence.Tokens)
	}
	checkTopK(t, got, 5, "window,position,label,predicted,loss")
	if got.Correct != rep.Correct || got.Loss/float64(got.Rows) != rep.Loss {
		t.Errorf("the rows' correct %d and mean loss %v; eval.json's %d and %v", got.Correct, got.Loss/float64(got.Rows), rep.Correct, rep.Loss)
	}
}

// trainedTokenRun trains the tiny token model of
// TestShardedEvalOfATokenModel on a small corpus and returns its run
// directory.
func trainedTokenRun(t *testing.T, dir string) string {
	t.Helper()
	corpus := filepath.Join(dir, "corpus")
	if err := os.MkdirAll(corpus, 0o755); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for i := range 60 {
		text.WriteString("the quick brown fox jumps over the lazy dog " + strings.Repeat("z", i%7) + "\n%\n")
	}
	if err := os.WriteFile(filepath.Join(corpus, "a"), []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return trainTextRun(t, dir, corpus)
}

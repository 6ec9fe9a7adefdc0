package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyTextModel is a one-block character transformer small enough to
// train for an epoch in a moment.
const tinyTextModel = `dataset: text
context: 16
epochs: 1
batch_size: 8
lr: 0.003
model:
  input: [16]
  layers:
    - embedding: {vocab: 256, dim: 16}
    - positional: {}
    - transformer_block: {heads: 2, mlp: 32}
    - layernorm: {}
    - lm_head: {}
  loss: cross_entropy
`

// trainTinyTextModel trains tinyTextModel for its epoch on a small text
// file, on the CPU device, and returns the run directory (in dir).
func trainTinyTextModel(t *testing.T, dir string) string {
	t.Helper()
	corpus := filepath.Join(dir, "corpus")
	if err := os.MkdirAll(corpus, 0o755); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for i := range 60 {
		text.WriteString("the quick brown fox jumps over the lazy dog ")
		text.WriteString(strings.Repeat("z", i%7))
		text.WriteString("\n%\n")
	}
	if err := os.WriteFile(filepath.Join(corpus, "text"), []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(config, []byte(tinyTextModel), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, "train", "--config", config, "--data-dir", corpus, "--run-dir", run, "--device", "cpu"); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	return run
}

// sampleTiny is what tolaria sample prints for 50 bytes after "the quick"
// from run with the seed and extra flags; it fails the test unless
// tolaria exits 0.
func sampleTiny(t *testing.T, dir string, env []string, run, seed string, extra ...string) string {
	t.Helper()
	args := append([]string{"sample", "--run-dir", run, "--prompt", "the quick", "--tokens", "50", "--seed", seed}, extra...)
	r := tolaria(t, dir, env, args...)
	if r.code != 0 {
		t.Fatalf("sample --seed %s %v: exit %d\n%s", seed, extra, r.code, r.stderr)
	}
	return r.stdout
}

// TestSampleFromATrainedTokenModel trains a tiny token model on a small
// text file and samples 50 bytes from its checkpoint: the same seed gives
// the same text with and without graphs; another seed gives text of the
// same length; the refusals exit 2 with the flag named; and --device cuda
// without a GPU (the CPU build of tolaria-worker, or no worker) exits 1
// saying why, printing nothing.
func TestSampleFromATrainedTokenModel(t *testing.T) {
	dir := t.TempDir()
	run := trainTinyTextModel(t, dir)
	sample := func(seed string, extra ...string) string {
		t.Helper()
		return sampleTiny(t, dir, nil, run, seed, extra...)
	}
	first, again, eager := sample("7"), sample("7"), sample("7", "--enable-graphs=false")
	if first != again || first != eager {
		t.Fatalf("seed 7 gave %q, then %q, then eagerly %q", first, again, eager)
	}
	if want := len("the quick") + 50 + 1; len(first) != want || !strings.HasPrefix(first, "the quick") {
		t.Fatalf("seed 7 printed %d bytes %q, want the prompt, 50 bytes and a newline (%d)", len(first), first, want)
	}
	// Another seed draws other text in general; only its shape is certain.
	if other := sample("8"); len(other) != len(first) {
		t.Errorf("seed 8 printed %d bytes, seed 7 %d", len(other), len(first))
	}
	noCheckpoint := filepath.Join(dir, "fresh")
	if err := os.MkdirAll(noCheckpoint, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--run-dir", run, "--tokens", "0"}, "--tokens"},
		{[]string{"--run-dir", run, "--tokens", "16777217"}, "--tokens: 16777217; give 1..16777216"},
		{[]string{"--run-dir", run, "--temperature", "-1"}, "--temperature"},
		{[]string{"--run-dir", run, "--temperature", "1e300"}, "give a value in 0..1e30"},
		{[]string{"--run-dir", noCheckpoint}, "--run-dir"},
		{[]string{"--run-dir", run, "--device", "tpu"}, "--device"},
		{[]string{"--run-dir", run, "--device", "cuda", "--heartbeat-timeout", "10ms"}, "--heartbeat-timeout"},
	} {
		r := tolaria(t, dir, nil, append([]string{"sample"}, c.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("sample %v: exit %d, %q; want exit 2 naming %s", c.args, r.code, r.stderr, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		// binDir's tolaria-worker is the CPU build: it opens no GPU.
		{[]string{"--device", "cuda"}, []string{"cannot use a GPU", "use --device cpu"}},
		{[]string{"--device", "cuda", "--worker", filepath.Join(dir, "none")}, []string{"no tolaria-worker", "--device cpu"}},
	} {
		r := tolaria(t, dir, nil, append([]string{"sample", "--run-dir", run, "--tokens", "5"}, c.args...)...)
		if r.code != 1 || r.stdout != "" {
			t.Errorf("sample %v: exit %d, stdout %q; want exit 1 and nothing printed\n%s", c.args, r.code, r.stdout, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("sample %v: stderr does not say %q:\n%s", c.args, w, r.stderr)
			}
		}
	}
	// Sampling reads no data: with the corpus grown by a line, then gone,
	// the text is the same (a resume or an evaluation refuses both).
	corpus := filepath.Join(dir, "corpus")
	f, err := os.OpenFile(filepath.Join(corpus, "text"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("one more line\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got := sample("7"); got != first {
		t.Errorf("the corpus changed: seed 7 gave %q, before %q", got, first)
	}
	if err := os.RemoveAll(corpus); err != nil {
		t.Fatal(err)
	}
	if got := sample("7"); got != first {
		t.Errorf("the corpus gone: seed 7 gave %q, before %q", got, first)
	}
}

// TestSampleRefusesAVectorModel: a run of an MLP has no tokens to draw.
func TestSampleRefusesAVectorModel(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, quick(run)...); r.code != 0 {
		t.Fatalf("train: exit %d\n%s", r.code, r.stderr)
	}
	r := tolaria(t, dir, nil, "sample", "--run-dir", run, "--tokens", "5")
	if r.code != 2 || !strings.Contains(r.stderr, "trained on dataset synthetic, not text, so its model is not a token model") {
		t.Fatalf("sample of an MLP run: exit %d, %q; want exit 2 saying it is not a token model", r.code, r.stderr)
	}
}

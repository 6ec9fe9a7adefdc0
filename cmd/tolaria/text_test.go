package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
)

// data_dir left unset is the dataset's own: the fortunes for text,
// Fashion-MNIST's directory otherwise; set anywhere, it is kept.
func TestDataDirDefaultsPerDataset(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"fashion-mnist", nil, "", data.DefaultFashionMNISTDir},
		{"text", []string{"--dataset", "text"}, "", data.DefaultFortunesDir},
		{"text from a flag", []string{"--dataset", "text", "--data-dir", "/corpus"}, "", "/corpus"},
		{"text from the environment", []string{"--dataset", "text"}, "/env-corpus", "/env-corpus"},
		{"synthetic", []string{"--dataset", "synthetic"}, "", data.DefaultFashionMNISTDir},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv(job.EnvVar("data_dir"), c.env)
			}
			fs := pflag.NewFlagSet("train", pflag.ContinueOnError)
			var flags trainFlags
			flags.register(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			req, _, err := resolve(fs, &flags)
			if err != nil {
				t.Fatal(err)
			}
			if req.Spec.DataDir != c.want {
				t.Errorf("data_dir %q, want %q", req.Spec.DataDir, c.want)
			}
		})
	}
}

// A text run with a model that does not read its token ids, or a token
// model on vectors, is a usage error, exit 2, that names the flag to change.
func TestTrainRefusesATextMisfit(t *testing.T) {
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(corpus, []byte(strings.Repeat("to be or not to be. ", 50)), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	tokens := "[{embedding: {vocab: 256, dim: 8}}, {lm_head: {}}]"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"the MLP", []string{"--dataset", "text", "--data-dir", corpus},
			"tolaria: invalid configuration: --layers: is required for dataset text"},
		{"a vector model", []string{"--dataset", "text", "--data-dir", corpus, "--layers", "[{linear: {out: 256}}]"},
			"tolaria: invalid configuration: --layers: starts with linear, but dataset text serves byte ids"},
		{"a token model on vectors", []string{"--dataset", "synthetic", "--layers", tokens},
			"tolaria: invalid configuration: --dataset: synthetic serves feature vectors, but --layers starts with embedding"},
		{"context and input", []string{"--dataset", "text", "--data-dir", corpus, "--context", "16", "--input", "32", "--layers", tokens},
			"tolaria: invalid configuration: --context: is 16, but --input is [32]"},
		{"vocabulary", []string{"--dataset", "text", "--data-dir", corpus, "--context", "16", "--layers", strings.Replace(tokens, "256", "100", 1)},
			"tolaria: invalid configuration: --layers: layers[1] (lm_head): the model ends in [16, 100] but the dataset has 256 tokens"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runTolaria(t, append([]string{"train", "--device", "cpu", "--run-dir", dir}, c.args...)...)
			if code != exitUsage || !strings.HasPrefix(stderr, c.want) {
				t.Errorf("exit %d, stderr\n%s\nwant exit 2 and\n%s", code, stderr, c.want)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("a refused model left %s behind", dir)
			}
		})
	}
}

// examples/char-transformer.yaml reads 64 byte ids of dataset text, and its
// parameters are those docs/models.md counts.
func TestExampleCharTransformer(t *testing.T) {
	m, err := job.ReadConfigFile("../../examples/char-transformer.yaml", extraKeys)
	if err != nil {
		t.Fatal(err)
	}
	if w := m.Warnings(); len(w) > 0 {
		t.Errorf("the example uses deprecated keys: %v", w)
	}
	spec := job.Default()
	if err := m.Apply(&spec); err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := nn.Net{Input: spec.Input, Layers: spec.Layers, Loss: nn.Loss(spec.Loss)}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.FitsTokens(spec.TextConfig().Context, data.TextVocab); err != nil {
		t.Fatal(err)
	}
	// By hand: embedding 256·64, positional 64·64, each block's two
	// layernorms 2·2·64, attention 64·192 + 192 and 64·64 + 64, MLP
	// 64·256 + 256 and 256·64 + 64; the last layernorm 2·64 and lm_head
	// 64·256 + 256.
	block := 2*2*64 + (64*192 + 192) + (64*64 + 64) + (64*256 + 256) + (256*64 + 64)
	if want := 256*64 + 64*64 + 2*block + 2*64 + (64*256 + 256); want != 137216 || a.Params != want {
		t.Errorf("examples/char-transformer.yaml has %d parameters, docs/models.md counts 137216", a.Params)
	}
}

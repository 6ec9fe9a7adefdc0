package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// fakePeerArgs run the side by side with bench's fake peer (steps of
// 200 ms, 1 s every fourth: 400 ms over windows of four; epochs of 8 s).
func fakePeerArgs(t *testing.T) []string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "bench", "testdata", "fake_peer.sh"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--peer", "torch", "--peer-command", "/bin/sh " + script, "--threads", "2",
		"--steps", "8", "--settle-steps", "1", "--warmup-batches", "1", "--quiet"}
}

// writeIDX writes a small dataset in Fashion-MNIST's files: n images of
// 28x28 pixels and their labels, gzipped, under dir with the given prefix.
func writeIDX(t *testing.T, dir, prefix string, n int) {
	t.Helper()
	write := func(name string, header []uint32, payload []byte) {
		var raw bytes.Buffer
		for _, h := range header {
			_ = binary.Write(&raw, binary.BigEndian, h)
		}
		raw.Write(payload)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(raw.Bytes())
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), gz.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pixels, labels := make([]byte, n*784), make([]byte, n)
	for i := range pixels {
		pixels[i] = byte(i * 7)
	}
	for i := range labels {
		labels[i] = byte(i % 10)
	}
	write(prefix+"-images-idx3-ubyte.gz", []uint32{0x803, uint32(n), 28, 28}, pixels)
	write(prefix+"-labels-idx1-ubyte.gz", []uint32{0x801, uint32(n)}, labels)
}

// TestPeerEndToEnd runs --peer against the fake peer, with tolaria's real
// step and a real epoch on a small dataset in Fashion-MNIST's files, and
// reads the JSON back: every ratio is tolaria's over the peer's.
func TestPeerEndToEnd(t *testing.T) {
	dir := t.TempDir()
	writeIDX(t, dir, "train", 256)
	writeIDX(t, dir, "t10k", 64)
	out, plot := filepath.Join(dir, "peer.json"), filepath.Join(dir, "peer.png")
	args := append(fakePeerArgs(t), "--peer-batch-sizes", "8,32", "--peer-widths", "8,16", "--peer-epoch-widths", "8",
		"--peer-rounds", "1", "--data-dir", dir, "--output", out, "--plot", plot)
	code, stdout, stderr := runArgs(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Peer    string `json:"peer"`
		Device  string `json:"device"`
		Threads int    `json:"threads"`
		Command string `json:"command"`
		Points  []struct {
			BatchSize int     `json:"batch_size"`
			Width     int     `json:"width"`
			Model     string  `json:"model"`
			StepRatio float64 `json:"step_ratio"`
			EpochRat  float64 `json:"epoch_ratio"`
			Tolaria   side    `json:"tolaria"`
			Peer      side    `json:"peer"`
		} `json:"points"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Peer != "fake" || rep.Device != "cpu" || rep.Threads != 2 || !strings.HasPrefix(rep.Command, "run_graph_bench --peer torch") {
		t.Errorf("report: peer %q, device %q, threads %d, command %q", rep.Peer, rep.Device, rep.Threads, rep.Command)
	}
	if len(rep.Points) != 4 {
		t.Fatalf("%d points, want 4 (batch 8 and 32, width 8 and 16)", len(rep.Points))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-5*math.Abs(b) } // the JSON keeps 6 digits
	for _, p := range rep.Points {
		if p.Peer.StepMS != 400 || !near(p.Peer.SamplesPerSecond, float64(p.BatchSize)/0.4) {
			t.Errorf("batch %d width %d: peer %g ms, %g samples/s; want the fake's 400 ms", p.BatchSize, p.Width, p.Peer.StepMS, p.Peer.SamplesPerSecond)
		}
		// tolaria's step of a model this small takes well under the fake's 400 ms.
		if !near(p.StepRatio, p.Tolaria.StepMS/p.Peer.StepMS) || p.StepRatio <= 0 || p.StepRatio >= 1 {
			t.Errorf("batch %d width %d: step ratio %g; want tolaria/peer = %g/%g, below 1", p.BatchSize, p.Width, p.StepRatio, p.Tolaria.StepMS, p.Peer.StepMS)
		}
		if !near(p.Tolaria.SamplesPerSecond, float64(p.BatchSize)*1000/p.Tolaria.StepMS) {
			t.Errorf("batch %d width %d: tolaria %g samples/s at %g ms", p.BatchSize, p.Width, p.Tolaria.SamplesPerSecond, p.Tolaria.StepMS)
		}
		switch p.Width {
		case 8:
			if p.Peer.EpochSeconds != 8 || p.Tolaria.EpochSeconds <= 0 || !near(p.EpochRat, p.Tolaria.EpochSeconds/8) {
				t.Errorf("batch %d: epochs %g s and %g s, ratio %g; want tolaria/8", p.BatchSize, p.Tolaria.EpochSeconds, p.Peer.EpochSeconds, p.EpochRat)
			}
			if !near(p.Tolaria.EpochSamplesPerSecond, 256/p.Tolaria.EpochSeconds) {
				t.Errorf("batch %d: tolaria epoch %g samples/s, want 256 over %g s", p.BatchSize, p.Tolaria.EpochSamplesPerSecond, p.Tolaria.EpochSeconds)
			}
		case 16:
			if p.EpochRat != 0 || p.Tolaria.EpochSeconds != 0 {
				t.Errorf("width 16: an epoch was timed (%g s), though --peer-epoch-widths is 8", p.Tolaria.EpochSeconds)
			}
		}
	}
	if !strings.Contains(stdout, "784-8-4-10 gelu cross_entropy") || !strings.Contains(stdout, "step ratio") {
		t.Errorf("stdout lacks the table:\n%s", stdout)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("--plot wrote no PNG: %v", err)
	}
}

type side struct {
	StepMS                float64 `json:"step_median_ms"`
	SamplesPerSecond      float64 `json:"samples_per_second"`
	EpochSeconds          float64 `json:"epoch_seconds"`
	EpochSamplesPerSecond float64 `json:"epoch_samples_per_second"`
}

func TestPeerFlagValidation(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown peer", []string{"--peer", "jax"}, `--peer: the only peer is torch, got "jax"`},
		{"preset with peer", []string{"--peer", "torch", "--preset", "tiny"}, "--preset: not used with --peer"},
		{"sweep with peer", []string{"--peer", "torch", "--sweep-batch-sizes", "8"}, "--sweep-batch-sizes: not used with --peer"},
		{"peer flag without peer", []string{"--peer-widths", "128"}, "--peer-widths: only used with --peer"},
		{"threads without peer", []string{"--threads", "1"}, "--threads: only used with --peer"},
		{"bad width", []string{"--peer", "torch", "--peer-widths", "1"}, "--peer-widths: each width must be in 2..65536"},
		{"epoch width not measured", []string{"--peer", "torch", "--peer-epoch-widths", "512"}, "--peer-epoch-widths: 512 is not one of the widths"},
		{"bad epoch widths", []string{"--peer", "torch", "--peer-epoch-widths", "some"}, "--peer-epoch-widths: want comma-separated"},
		{"negative threads", []string{"--peer", "torch", "--threads", "-1"}, "--threads: must be positive"},
		{"zero rounds", []string{"--peer", "torch", "--peer-rounds", "0"}, "--peer-rounds: must be in 1..100"},
		{"too few steps", []string{"--peer", "torch", "--steps", "4"}, "--steps: must be in 8..100000, got 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runArgs(t, tt.args...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout, stderr, exitUsage, tt.want)
			}
		})
	}
}

func TestPeerFailureIsReported(t *testing.T) {
	t.Setenv("FAKE_PEER_FAIL", "PyTorch is not importable")
	args := append(fakePeerArgs(t), "--peer-batch-sizes", "8", "--peer-widths", "8", "--peer-epoch-widths", "none", "--peer-rounds", "1")
	code, _, stderr := runArgs(t, args...)
	if code != exitFailure || !strings.Contains(stderr, "PyTorch is not importable") {
		t.Errorf("exit %d, stderr %q; want exit 1 with the peer's message", code, stderr)
	}
}

// TestPresetsAreTheExamples: the cnn and transformer presets (and the
// side-by-side run's models) are their example files' models, layer for
// layer.
func TestPresetsAreTheExamples(t *testing.T) {
	for _, tc := range []struct {
		file string
		net  nn.Net
	}{{"cnn.yaml", bench.CNN()}, {"char-transformer.yaml", bench.Transformer()}} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "examples", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			Model struct {
				Input  []int `yaml:"input"`
				Layers any   `yaml:"layers"`
			} `yaml:"model"`
		}
		if err := yaml.Unmarshal(raw, &file); err != nil {
			t.Fatal(err)
		}
		layers, err := job.ParseLayers(file.Model.Layers)
		if err != nil {
			t.Fatal(err)
		}
		example := nn.Net{Input: nn.Shape(file.Model.Input), Layers: layers, Loss: nn.LossCrossEntropy}
		if got, want := tc.net.String(), example.String(); got != want {
			t.Errorf("bench's model = %s\nexamples/%s = %s", got, tc.file, want)
		}
	}
}

// TestPeerModelCNN: --peer-model cnn runs torch_net.py with the model's
// layers and input, and refuses the mlp's width flags.
func TestPeerModelCNN(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), trainer.NewShared(), []string{"--peer", "torch", "--peer-model", "cnn", "--peer-widths", "64"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "--peer-widths: not used with --peer-model cnn") {
		t.Errorf("--peer-model cnn --peer-widths 64: exit %d, %s", code, stderr.String())
	}
	stderr.Reset()
	code = run(context.Background(), trainer.NewShared(), []string{"--peer", "torch", "--peer-model", "rnn"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), `--peer-model: mlp, cnn or transformer, got "rnn"`) {
		t.Errorf("--peer-model rnn: exit %d, %s", code, stderr.String())
	}
	net := bench.CNN()
	wl, err := bench.NetWorkload(&net, 64)
	if err != nil {
		t.Fatal(err)
	}
	cfg := bench.PeerConfig{Command: []string{"python3"}, Net: &net, NetArgs: []string{"--layers", "[...]", "--input", "1,28,28"}, Threads: 2}.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	args := strings.Join(bench.PeerArgs(cfg, wl, false, ""), " ")
	if !strings.Contains(args, "--batch-size 64 --layers [...] --input 1,28,28 --threads 2") || strings.Contains(args, "--hidden") {
		t.Errorf("PeerArgs for the cnn = %s", args)
	}
	cfg.Widths = []int{256}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "no width") {
		t.Errorf("a net with widths: %v", err)
	}
}

// TestPeerModelTransformer: --peer-model transformer gives torch_net.py
// the example's layers and its token input ([64], or --peer-context's),
// refuses the mlp's width flags, and runs end to end against the fake peer
// with tolaria's real step on token windows.
func TestPeerModelTransformer(t *testing.T) {
	code, _, stderr := runArgs(t, "--peer", "torch", "--peer-model", "transformer", "--peer-epoch-widths", "256")
	if code != exitUsage || !strings.Contains(stderr, "--peer-epoch-widths: not used with --peer-model transformer") {
		t.Errorf("--peer-model transformer --peer-epoch-widths 256: exit %d, %s", code, stderr)
	}
	net := bench.Transformer()
	layers, err := json.Marshal(job.Layers(net.Layers))
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{`"embedding":{"dim":64,"vocab":256}`, `"positional"`, `"transformer_block":{"dropout":0,"heads":4,"mlp":256}`, `"lm_head"`} {
		if !strings.Contains(string(layers), kind) {
			t.Errorf("the layers passed to the peer, %s, lack %s", layers, kind)
		}
	}
	code, _, stderr = runArgs(t, "--peer", "torch", "--peer-model", "cnn", "--peer-context", "32")
	if code != exitUsage || !strings.Contains(stderr, "--peer-context: only with --peer-model transformer") {
		t.Errorf("--peer-model cnn --peer-context 32: exit %d, %s", code, stderr)
	}
	out := filepath.Join(t.TempDir(), "peer.json")
	args := append(fakePeerArgs(t), "--peer-model", "transformer", "--peer-context", "16", "--peer-batch-sizes", "2", "--peer-rounds", "1",
		"--peer-wait-policies", "passive", "--output", out)
	code, stdout, stderr := runArgs(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.PeerReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 1 || !strings.Contains(rep.Points[0].Model, "transformer_block") || !(rep.Points[0].Tolaria.StepMS > 0) {
		t.Fatalf("points %+v; want one transformer point with a tolaria step time\n%s", rep.Points, stdout)
	}
	if !strings.Contains(strings.Join(rep.Settings.NetArgs, " "), "--input 16") || !strings.HasPrefix(rep.Points[0].Model, "[16] ") {
		t.Errorf("net args %v, model %s; want --input 16 and the model over 16 positions", rep.Settings.NetArgs, rep.Points[0].Model)
	}
}

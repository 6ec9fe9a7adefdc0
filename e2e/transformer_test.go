package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

// The tests of this file run a tiny character transformer through the
// binaries as a user does: swept over its own keys, billed, killed and
// resumed, with graphs and without, and scraped.

// writeCorpus writes a text corpus of about n bytes, the same every time:
// lines of six words drawn from a small vocabulary, cookies separated by a
// lone '%' as the fortunes are. It returns the corpus directory.
func writeCorpus(t *testing.T, dir string, n int) string {
	t.Helper()
	words := strings.Fields("the quick brown fox jumps over a lazy dog and then the cat sat on its mat " +
		"before it ran from home down to the sea where fish swim all day long")
	var b strings.Builder
	x := uint32(1)
	for b.Len() < n {
		for i := range 6 {
			x = x*1664525 + 1013904223 // a linear congruential generator, for words without math/rand
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[(x>>16)%uint32(len(words))])
		}
		b.WriteString("\n%\n")
	}
	corpus := filepath.Join(dir, "corpus")
	if err := os.MkdirAll(corpus, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corpus, "text"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return corpus
}

// transformerLayers is a one- or more-block transformer of width 32 over
// bytes, in YAML's flow form.
func transformerLayers(blocks, heads int, dropout float64) string {
	block := fmt.Sprintf("{transformer_block: {heads: %d, mlp: 64, dropout: %g}}", heads, dropout)
	return "[{embedding: {vocab: 256, dim: 32}}, {positional: {}}, " +
		strings.Repeat(block+", ", blocks) + "{layernorm: {}}, {lm_head: {}}]"
}

// tokenRun is a tolaria train of the tiny transformer on corpus, with
// dropout in attention so that the generator's state matters too.
func tokenRun(corpus, runDir string, epochs int, extra ...string) []string {
	return append([]string{"train", "--device", "cpu", "--dataset", "text", "--data-dir", corpus,
		"--context", "16", "--layers", transformerLayers(1, 2, 0.1), "--epochs", strconv.Itoa(epochs),
		"--batch-size", "16", "--lr", "0.003", "--log-every", "20", "--run-dir", runDir}, extra...)
}

// transformerSweep varies the transformer's own keys: its heads (the
// same parameters, larger score matrices), its blocks with dropout in
// attention, and its context. %s is the corpus.
const transformerSweep = `
base:
  dataset: text
  data_dir: %s
  context: 16
  epochs: 1
  batch_size: 16
  lr: 0.003
  log_every: 20
  enable_graphs: true
  model:
    layers: %s
trials:
  - {name: small}
  - {name: heads4, model: {layers: %s}}
  - {name: deep, epochs: 2, model: {layers: %s}}
  - {name: context32, context: 32}
`

// sweepTrial is what a trial of transformerSweep trains.
type sweepTrial struct {
	name                   string
	context, blocks, heads int
	dropout                float64
}

var transformerTrials = []sweepTrial{
	{"small", 16, 1, 2, 0},
	{"heads4", 16, 1, 4, 0},
	{"deep", 16, 2, 2, 0.1},
	{"context32", 32, 1, 2, 0},
}

// TestSweepOverTransformerKeys: a sweep whose trials change a
// transformer's heads, blocks (with dropout in attention) and context
// runs every trial to the end with graphs, each with finite per-position
// figures. Each trial's memory bill is what set-up allocates, to the byte;
// its worker asked the broker for exactly that; its activations are the
// workspace nn.NetWorkspaceByLayer lays out for the trial's model, and
// each attention core's share is its documented size: Q, K, V and their
// gradients, the context, its output and gradient, and the score matrices
// with their gradient (and with dropout the dropped probabilities and the
// mask). So four heads bill more than two with the same parameters, by
// the score matrices alone, and on a device with room for two heads only,
// four are refused. The trial with dropout, its worker killed in its
// second epoch and retried from its checkpoint, ends with the parameters
// and figures that tolaria train gives its configuration in one go.
func TestSweepOverTransformerKeys(t *testing.T) {
	dir := t.TempDir()
	corpus := writeCorpus(t, dir, 12000)
	file := writeSweepFile(t, dir, fmt.Sprintf(transformerSweep, corpus,
		transformerLayers(1, 2, 0), transformerLayers(1, 4, 0), transformerLayers(2, 2, 0.1)))
	sweepDir := filepath.Join(dir, "sweep")
	// Trial deep's worker kills itself in its second epoch (43 steps of
	// 16 windows each); the retry resumes from the first epoch's
	// checkpoint and has too few steps left to be killed again.
	const killAt = 48
	r := tolaria(t, dir, []string{fmt.Sprintf("TOLARIA_E2E_WORKER_FAULT=step=%d,kill,run=deep", killAt)},
		"sweep", file, "--device", "cpu", "--parallel", "2", "--retries", "1", "--sweep-dir", sweepDir)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	res := readSweepResults(t, sweepDir)
	if len(res.Trials) != len(transformerTrials) || res.Counts["succeeded"] != len(transformerTrials) {
		t.Fatalf("results: %+v", res)
	}
	if row := resultRow(t, res, "deep"); row.Attempts != 2 || row.Summary.Steps != 86 || row.Summary.ResumedFromStep != 43 {
		t.Fatalf("trial deep: %d attempts, %d steps resumed from step %d; want 2 attempts, the second resumed at step 43 of 86"+
			" (the corpus changed? the worker is killed after step %d)", row.Attempts, row.Summary.Steps, row.Summary.ResumedFromStep, killAt)
	}
	bills := map[string]trainer.Bill{}
	for _, want := range transformerTrials {
		row := resultRow(t, res, want.name)
		if row.State != sweep.TrialSucceeded || row.Rank == 0 || row.Summary == nil {
			t.Fatalf("trial %s: row %+v", want.name, row)
		}
		checkTokenSummary(t, want, *row.Summary)
		bills[want.name] = checkTrialBill(t, want, row.RunDir)
	}

	small, heads4 := bills["small"], bills["heads4"]
	// Two more heads of T×T scores and their gradients per example.
	scores := int64(16 * 2 * (4 - 2) * 16 * 16 * 4)
	if heads4.Parameters != small.Parameters || heads4.Activations-small.Activations != scores ||
		heads4.DeviceBytes()-small.DeviceBytes() != scores {
		t.Errorf("four heads bill %v, two %v; want the same parameters and %d bytes more activations (the score matrices)",
			heads4, small, scores)
	}
	for _, bigger := range []string{"deep", "context32"} {
		if b := bills[bigger]; b.Parameters <= small.Parameters || b.Activations <= small.Activations {
			t.Errorf("trial %s bills %v, no more than trial small's %v", bigger, b, small)
		}
	}

	// On a device with room for trial small's bill and its headroom
	// alone, the other trials are refused before they allocate, by the
	// bill that counts their attention: trial heads4 for its score
	// matrices only.
	capacity := int64(math.Ceil(float64(small.DeviceBytes())*budget.Headroom)) + 4096
	tightDir := filepath.Join(dir, "tight")
	r = tolaria(t, dir, nil, "sweep", file, "--device", "cpu", "--parallel", "2", "--sweep-dir", tightDir,
		"--device-memory", strconv.FormatInt(capacity, 10))
	if r.code != 3 {
		t.Fatalf("the sweep on %d bytes: exit %d, want 3\n%s", capacity, r.code, r.stderr)
	}
	tight := readSweepResults(t, tightDir)
	if row := resultRow(t, tight, "small"); row.State != sweep.TrialSucceeded {
		t.Errorf("on %d bytes, trial small: %s %s", capacity, row.State, row.Reason)
	}
	for _, name := range []string{"heads4", "deep", "context32"} {
		row, b := resultRow(t, tight, name), bills[name]
		if row.State != sweep.TrialFailed || !strings.Contains(row.Reason, "activations "+trainer.FormatBytes(b.Activations)) ||
			!strings.Contains(row.Reason, "= "+trainer.FormatBytes(b.DeviceBytes())+" of device memory") {
			t.Errorf("on %d bytes, trial %s: %s %q; want a refusal naming its bill %v", capacity, name, row.State, row.Reason, b)
		}
	}

	// The trial with dropout in attention, killed and retried, alone.
	row := resultRow(t, res, "deep")
	alone := filepath.Join(dir, "alone")
	if tr := tolaria(t, dir, nil, "train", "--config", row.Config, "--run-dir", alone); tr.code != 0 {
		t.Fatalf("tolaria train with trial deep's configuration: exit %d\n%s", tr.code, tr.stderr)
	}
	sum := readSummary(t, filepath.Join(alone, "summary.json"))
	if sum.ParamsSHA256 != row.Summary.ParamsSHA256 || sum.TestLoss != row.Summary.TestLoss || sum.TrainLoss != row.Summary.TrainLoss {
		t.Errorf("trial deep: params %s, test loss %v, train loss %v from tolaria train; %s, %v, %v in the sweep",
			sum.ParamsSHA256, sum.TestLoss, sum.TrainLoss, row.Summary.ParamsSHA256, row.Summary.TestLoss, row.Summary.TrainLoss)
	}
}

// checkTokenSummary fails the test unless s is a finished run of want's
// transformer on bytes, replayed but for its warm-up, with finite figures
// that beat a uniform guess over 256 bytes.
func checkTokenSummary(t *testing.T, want sweepTrial, s trainer.Summary) {
	t.Helper()
	block := fmt.Sprintf("transformer_block(heads=%d,mlp=64,dropout=%g) ", want.heads, want.dropout)
	if !strings.HasPrefix(s.Model, fmt.Sprintf("[%d] embedding(vocab=256,dim=32) positional ", want.context)) ||
		strings.Count(s.Model, block) != want.blocks {
		t.Errorf("trial %s: summary of model %q, want context %d and %d× %s", want.name, s.Model, want.context, want.blocks, block)
	}
	if !s.GraphEnabled || s.Steps == 0 || s.GraphReplays == 0 || s.GraphReplays+s.EagerSteps != s.Steps || len(s.Fallbacks) > 0 {
		t.Errorf("trial %s: graphs %v, %d steps: %d replayed, %d eager, fallbacks %v", want.name,
			s.GraphEnabled, s.Steps, s.GraphReplays, s.EagerSteps, s.Fallbacks)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"train_loss", s.TrainLoss}, {"test_loss", s.TestLoss}, {"train_accuracy", s.TrainAccuracy}, {"test_accuracy", s.TestAccuracy}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v <= 0 || strings.HasSuffix(f.name, "accuracy") && f.v > 1 ||
			strings.HasSuffix(f.name, "loss") && f.v >= math.Log(256) {
			t.Errorf("trial %s: %s %g", want.name, f.name, f.v)
		}
	}
}

// checkTrialBill reads the memory bill and the budget grant in a trial's
// events and checks them against the trial's model; it returns the bill.
func checkTrialBill(t *testing.T, want sweepTrial, runDir string) trainer.Bill {
	t.Helper()
	var bill struct {
		Estimate     map[string]int64 `json:"estimate"`
		ActualDevice int64            `json:"actual_device"`
		Source       string           `json:"source"`
	}
	var granted []int64
	for _, e := range readEvents(t, filepath.Join(runDir, "events.jsonl")) {
		switch e.Kind {
		case trainer.EventMemoryBill:
			if err := json.Unmarshal(e.Fields, &bill); err != nil {
				t.Fatalf("trial %s: memory_bill %s: %v", want.name, e.Fields, err)
			}
		case "budget_grant":
			var g struct{ Bytes int64 }
			if err := json.Unmarshal(e.Fields, &g); err != nil {
				t.Fatalf("trial %s: budget_grant %s: %v", want.name, e.Fields, err)
			}
			granted = append(granted, g.Bytes)
		}
	}
	est := bill.Estimate
	b := trainer.Bill{Parameters: est["parameters"], Gradients: est["gradients"], OptimizerState: est["optimizer_state"],
		RunningState: est["running_state"], Activations: est["activations"], Workspace: est["workspace"],
		StagingInputs: est["staging_inputs"], PinnedHost: est["pinned_host"]}
	if est["device"] == 0 || b.DeviceBytes() != est["device"] || bill.Source != "allocations" || bill.ActualDevice != est["device"] {
		t.Errorf("trial %s: memory bill %+v: want device bytes that add up and equal what set-up allocated", want.name, bill)
	}
	if len(granted) == 0 || slices.ContainsFunc(granted, func(g int64) bool { return g != est["device"] }) {
		t.Errorf("trial %s: budgets granted %v, want the bill's %d bytes for each attempt", want.name, granted, est["device"])
	}

	layers, err := job.ParseLayers(transformerLayers(want.blocks, want.heads, want.dropout))
	if err != nil {
		t.Fatal(err)
	}
	arch, err := nn.Net{Input: nn.Shape{want.context}, Layers: layers, Loss: nn.LossCrossEntropy}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	const batch, width = 16, 32
	byLayer, err := nn.NetWorkspaceByLayer(arch, batch)
	if err != nil {
		t.Fatal(err)
	}
	T, h := want.context, want.heads
	scores := 2 // the scores turned into probabilities, and their gradient
	if want.dropout > 0 {
		scores += 2 // the dropped probabilities and the mask
	}
	// Per example: its output and gradient (2·T·D), Q, K, V split in
	// heads and their gradients (6·T·D), the context (T·D) and the scores.
	perCore := batch * (2*T*width + 6*T*width + T*width + scores*h*T*T)
	var values, cores int
	for _, l := range byLayer {
		values += l.Values
		if l.Kind == nn.KindAttentionCore {
			cores++
			if l.Values != perCore {
				t.Errorf("trial %s: %s holds %d values, want %d (batch %d × (9·T·D + %d·heads·T·T))",
					want.name, l.Path, l.Values, perCore, batch, scores)
			}
		}
	}
	if cores != want.blocks {
		t.Errorf("trial %s: %d attention cores in the workspace, want %d", want.name, cores, want.blocks)
	}
	if b.Activations != int64(values)*4 || b.Parameters != int64(arch.Params)*4 {
		t.Errorf("trial %s: bills activations %d and parameters %d bytes; the model's workspace is %d values and it has %d parameters",
			want.name, b.Activations, b.Parameters, values, arch.Params)
	}
	return b
}

// event is a line of a run's events.jsonl.
type event struct {
	Kind   string          `json:"kind"`
	Fields json.RawMessage `json:"fields"`
}

func readEvents(t *testing.T, path string) []event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTransformerKilledAndResumedIsBitwiseUninterrupted: a transformer
// with dropout in attention, trained with graphs, stopped by SIGKILL after
// its first epoch (resumed from that epoch's checkpoint) or by SIGINT to
// the coordinator of an isolated worker (resumed from the checkpoint the
// stop writes, mid-epoch), ends with the checkpoint of the run left alone
// to the bit: parameters, optimizer state, the dropout generator's state,
// and the summary's figures.
func TestTransformerKilledAndResumedIsBitwiseUninterrupted(t *testing.T) {
	dir := t.TempDir()
	corpus := writeCorpus(t, dir, 30000)
	const epochs = 3
	whole := filepath.Join(dir, "whole")
	if r := tolaria(t, dir, nil, tokenRun(corpus, whole, epochs, "--enable-graphs")...); r.code != 0 {
		t.Fatalf("uninterrupted run: exit %d\n%s", r.code, r.stderr)
	}
	want := readSummary(t, filepath.Join(whole, "summary.json"))
	wantCk := loadCheckpoint(t, whole)
	for _, c := range []struct {
		name   string
		signal syscall.Signal
		extra  []string
	}{
		{"SIGKILL", syscall.SIGKILL, nil},
		{"SIGINT to an isolated run", syscall.SIGINT, []string{"--isolate"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := filepath.Join(dir, strings.Fields(c.name)[0])
			cmd, stderr := startRun(t, dir, tokenRun(corpus, run, epochs, append([]string{"--enable-graphs"}, c.extra...)...)...)
			events := filepath.Join(run, "events.jsonl")
			waitFor(t, "the first epoch's checkpoint", func() bool { return epochsLogged(events) >= 1 })
			if err := cmd.Process.Signal(c.signal); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if n := epochsLogged(events); n >= epochs {
				t.Fatalf("the run finished before it was stopped (%d epochs); make it longer\n%s", n, stderr)
			}
			// A killed run writes no summary; an interrupted one says so in its.
			if _, err := os.Stat(filepath.Join(run, "summary.json")); err == nil &&
				(c.signal == syscall.SIGKILL || !readSummary(t, filepath.Join(run, "summary.json")).Interrupted) {
				t.Fatalf("the stopped run wrote a summary of a finished run\n%s", stderr)
			}
			stopped := loadCheckpoint(t, run)
			if r := tolaria(t, dir, nil, "train", "--resume", "--run-dir", run); r.code != 0 {
				t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
			}
			got := readSummary(t, filepath.Join(run, "summary.json"))
			t.Logf("stopped at step %d of %d", stopped.Step, want.Steps)
			if got.ParamsSHA256 != want.ParamsSHA256 || got.Steps != want.Steps || got.TrainLoss != want.TrainLoss ||
				got.TrainAccuracy != want.TrainAccuracy || got.TestLoss != want.TestLoss || got.TestAccuracy != want.TestAccuracy {
				t.Errorf("resumed: params %s, %d steps, train loss %v accuracy %v, test loss %v accuracy %v\n"+
					"uninterrupted: params %s, %d steps, train loss %v accuracy %v, test loss %v accuracy %v",
					got.ParamsSHA256, got.Steps, got.TrainLoss, got.TrainAccuracy, got.TestLoss, got.TestAccuracy,
					want.ParamsSHA256, want.Steps, want.TrainLoss, want.TrainAccuracy, want.TestLoss, want.TestAccuracy)
			}
			sameCheckpoint(t, loadCheckpoint(t, run), wantCk)
		})
	}
}

func loadCheckpoint(t *testing.T, runDir string) trainer.Checkpoint {
	t.Helper()
	ck, err := trainer.LoadCheckpoint(filepath.Join(runDir, trainer.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// sameCheckpoint fails the test unless two checkpoints hold the same
// model at the same step with the same values, bit for bit.
func sameCheckpoint(t *testing.T, got, want trainer.Checkpoint) {
	t.Helper()
	if got.Model != want.Model || got.Step != want.Step {
		t.Errorf("checkpoint of %q at step %d, want %q at step %d", got.Model, got.Step, want.Model, want.Step)
	}
	if len(want.RunningState()) == 0 {
		t.Error("the checkpoint holds no running state: the dropout generator's should be there")
	}
	if !sameBits(got.Parameters(), want.Parameters()) {
		t.Error("the checkpoints' parameters differ")
	}
	if !sameBits(got.RunningState(), want.RunningState()) {
		t.Errorf("the checkpoints' running state differs: %v, want %v", got.RunningState(), want.RunningState())
	}
	if len(got.State()) != len(want.State()) {
		t.Fatalf("%d optimizer state buffers, want %d", len(got.State()), len(want.State()))
	}
	for i := range want.State() {
		if !sameBits(got.State()[i], want.State()[i]) {
			t.Errorf("the checkpoints' optimizer state %d differs", i)
		}
	}
}

func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// TestTransformerGraphsMatchEager: the transformer with dropout in
// attention, trained by replaying captured steps and eagerly, ends with
// the same checkpoint and the same figures, to the bit.
func TestTransformerGraphsMatchEager(t *testing.T) {
	dir := t.TempDir()
	corpus := writeCorpus(t, dir, 12000)
	var sums []trainer.Summary
	var cks []trainer.Checkpoint
	for _, graphs := range []string{"--enable-graphs=true", "--enable-graphs=false"} {
		run := filepath.Join(dir, graphs)
		if r := tolaria(t, dir, nil, tokenRun(corpus, run, 2, graphs)...); r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", graphs, r.code, r.stderr)
		}
		sums = append(sums, readSummary(t, filepath.Join(run, "summary.json")))
		cks = append(cks, loadCheckpoint(t, run))
	}
	g, e := sums[0], sums[1]
	if !g.GraphEnabled || g.GraphReplays == 0 || len(g.Fallbacks) > 0 || e.GraphEnabled || e.GraphReplays != 0 {
		t.Fatalf("graphs run: enabled %v, %d replays, fallbacks %v; eager run: enabled %v, %d replays",
			g.GraphEnabled, g.GraphReplays, g.Fallbacks, e.GraphEnabled, e.GraphReplays)
	}
	if g.ParamsSHA256 != e.ParamsSHA256 || g.TrainLoss != e.TrainLoss || g.TestLoss != e.TestLoss || g.TestAccuracy != e.TestAccuracy {
		t.Errorf("graphs: params %s, train loss %v, test loss %v, accuracy %v; eager: %s, %v, %v, %v",
			g.ParamsSHA256, g.TrainLoss, g.TestLoss, g.TestAccuracy, e.ParamsSHA256, e.TrainLoss, e.TestLoss, e.TestAccuracy)
	}
	sameCheckpoint(t, cks[0], cks[1])
}

// TestTransformerRunExportsMetrics: a transformer trained with graphs in
// a worker process serves every training and graph metric on /metrics,
// labelled with its worker and device, with the figures of its summary:
// its captures, replays and steps, the windows it trained, no fallback,
// the final epoch and the last evaluation's accuracy; and the device
// memory it held at its peak is its bill.
func TestTransformerRunExportsMetrics(t *testing.T) {
	dir := t.TempDir()
	corpus := writeCorpus(t, dir, 12000)
	run := filepath.Join(dir, "run")
	cmd, stderr := startRun(t, dir, tokenRun(corpus, run, 2, "--enable-graphs", "--isolate",
		"--metrics-addr", "127.0.0.1:0", "--metrics-linger", "30s")...)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		if _, err := waitWithin(cmd, 30*time.Second); err != nil {
			t.Errorf("tolaria after the scrape: %v\n%s", err, stderr)
		}
	})
	waitFor(t, "the run's summary", func() bool {
		_, err := os.Stat(filepath.Join(run, "summary.json"))
		return err == nil
	})
	sum := readSummary(t, filepath.Join(run, "summary.json"))
	train, _, err := data.LoadText(data.TextConfig{Path: corpus, Context: 16})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + servingAt(t, stderr) + "/metrics")
	if err != nil {
		t.Fatalf("/metrics after the run: %v\n%s", err, stderr)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	series := parseMetrics(t, string(body))

	for _, name := range telemetry.MetricNames() {
		found := false
		for _, s := range series {
			if s.name == name || strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s.name, "_bucket"), "_sum"), "_count") == name {
				found = true
				if name != telemetry.MetricBuildInfo && (s.labels[telemetry.LabelWorker] == "" || s.labels[telemetry.LabelDevice] != "cpu") {
					t.Errorf("%s lacks the worker and device labels: %v", s.name, s.labels)
				}
			}
		}
		if !found {
			t.Errorf("metric %s is missing from /metrics", name)
		}
	}
	total := func(name string) float64 {
		var v float64
		for _, s := range series {
			if s.name == name {
				v += s.value
			}
		}
		return v
	}
	var bill struct {
		Estimate struct {
			Device      int64 `json:"device"`
			Activations int64 `json:"activations"`
		} `json:"estimate"`
	}
	for _, e := range readEvents(t, filepath.Join(run, "events.jsonl")) {
		if e.Kind == trainer.EventMemoryBill {
			if err := json.Unmarshal(e.Fields, &bill); err != nil {
				t.Fatal(err)
			}
		}
	}
	peak := 0.0
	for _, s := range series {
		if s.name == telemetry.MetricDeviceMemoryBytes && s.labels[telemetry.LabelKind] == "peak" {
			peak = s.value
		}
	}
	// What the run held at most, its evaluation's capture included, is
	// its bill: the attention's workspaces were all billed.
	if bill.Estimate.Device == 0 || peak != float64(bill.Estimate.Device) {
		t.Errorf("the device held at most %v bytes; the run's bill was %d", peak, bill.Estimate.Device)
	}
	for _, c := range []struct {
		name string
		ok   func(float64) bool
		want string
	}{
		{telemetry.MetricGraphEnabled, func(v float64) bool { return v == 1 }, "1"},
		{telemetry.MetricCapturesTotal, func(v float64) bool { return v == float64(sum.Captures) && v > 0 }, fmt.Sprint(sum.Captures)},
		{telemetry.MetricReplaysTotal, func(v float64) bool { return v == float64(sum.GraphReplays) && v > 0 }, fmt.Sprint(sum.GraphReplays)},
		{telemetry.MetricCaptureSeconds + "_count", func(v float64) bool { return v > 0 }, "> 0"},
		{telemetry.MetricReplaySeconds + "_count", func(v float64) bool { return v > 0 }, "> 0"},
		{telemetry.MetricStageCopySeconds + "_count", func(v float64) bool { return v > 0 }, "> 0"},
		{telemetry.MetricStepSeconds + "_count", func(v float64) bool { return v == float64(sum.Steps) }, fmt.Sprint(sum.Steps)},
		// Samples are windows, not the positions the loss averages.
		{telemetry.MetricSamplesTotal, func(v float64) bool { return v == float64(2*train.Len()) }, fmt.Sprintf("2 epochs of %d windows", train.Len())},
		{telemetry.MetricFallbackTotal, func(v float64) bool { return v == 0 }, "0"},
		{telemetry.MetricTrainEpoch, func(v float64) bool { return v == 2 }, "2"},
		{telemetry.MetricTrainLoss, func(v float64) bool { return v > 0 && v < math.Log(256) }, "in (0, ln 256)"},
		{telemetry.MetricEvalAccuracy, func(v float64) bool { return v == sum.TestAccuracy }, fmt.Sprint(sum.TestAccuracy)},
		{telemetry.MetricPoolReservedBytes, func(v float64) bool { return v > float64(bill.Estimate.Activations) }, fmt.Sprintf("> the billed activations %d", bill.Estimate.Activations)},
	} {
		if v := total(c.name); !c.ok(v) {
			t.Errorf("%s = %v, want %s", c.name, v, c.want)
		}
	}
}

// metricSeries is one line of the Prometheus text format.
type metricSeries struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads the Prometheus text format as tolaria writes it:
// labels without commas or escaped quotes in their values.
func parseMetrics(t *testing.T, text string) []metricSeries {
	t.Helper()
	var out []metricSeries
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if sp < 0 || err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s := metricSeries{name: line[:sp], labels: map[string]string{}, value: v}
		if i := strings.IndexByte(s.name, '{'); i >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(s.name[i+1:], "}"), ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
			s.name = s.name[:i]
		}
		out = append(out, s)
	}
	return out
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// quick is a configuration that runs in a fraction of a second, also
// under the race detector. The tests check shapes and bookkeeping, never
// timings.
func quick(p Preset) Config {
	return Config{Preset: p, Epochs: 2, WarmupBatches: 1, Steps: 16, SettleSteps: 2, ProbeKernels: 20, ProbeRepeats: 2}
}

func openCPU() (device.Device, error) { return cpu.Open(cpu.Config{}) }

func runQuick(t *testing.T, cfg Config, open Opener) *Report {
	t.Helper()
	rep, err := Run(context.Background(), new(staging.Guard), open, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRunTiny(t *testing.T) {
	rep := runQuick(t, quick(PresetTiny), openCPU)
	if rep.Device != "cpu" || rep.BatchSize != 8 || rep.Model != "16-2 gelu cross_entropy" {
		t.Errorf("device %q, batch %d, model %q; want cpu, 8, 16-2 gelu cross_entropy", rep.Device, rep.BatchSize, rep.Model)
	}
	if len(rep.Records) != 4 {
		t.Fatalf("%d records, want 4 (an eager and a graph phase per epoch)", len(rep.Records))
	}
	wantCapture := []string{CaptureCold, CapturePooled}
	for i, r := range rep.Records {
		epoch, graph := i/2+1, i%2 == 1
		if r.Epoch != epoch || r.GraphEnabled != graph || r.Fallback || r.Steps != 16 {
			t.Errorf("record %d: epoch %d graph %t fallback %t steps %d; want epoch %d graph %t, no fallback, 16 steps",
				i, r.Epoch, r.GraphEnabled, r.Fallback, r.Steps, epoch, graph)
		}
		if graph {
			if r.Capture != wantCapture[epoch-1] || r.CaptureMS <= 0 || r.ReplayMS <= 0 || r.GraphNodes != 8 {
				t.Errorf("graph record of epoch %d: capture %q %g ms, replay %g ms, %d nodes; want %s, positive times, 8 nodes",
					epoch, r.Capture, r.CaptureMS, r.ReplayMS, r.GraphNodes, wantCapture[epoch-1])
			}
		} else if r.KernelsPerStep != 8 || r.CaptureMS != 0 || r.ReplayMS != 0 {
			t.Errorf("eager record of epoch %d: %d kernels, capture %g ms, replay %g ms; want 8 kernels and no capture or replay",
				epoch, r.KernelsPerStep, r.CaptureMS, r.ReplayMS)
		}
		if r.StepMS <= 0 || r.DeviceBusyMS <= 0 || r.StageCopyMS <= 0 {
			t.Errorf("record %d: step %g ms, busy %g ms, copy %g ms; want positive", i, r.StepMS, r.DeviceBusyMS, r.StageCopyMS)
		}
	}
	s := rep.Summary
	if s.KernelsPerStep != 8 || s.GraphNodes != 8 || s.Captures != 2 || s.PooledCaptures != 1 || s.GraphsPerSetup != 2 {
		t.Errorf("summary: %d kernels, %d nodes, %d captures (%d pooled), %d graphs per setup; want 8, 8, 2 (1), 2",
			s.KernelsPerStep, s.GraphNodes, s.Captures, s.PooledCaptures, s.GraphsPerSetup)
	}
	for name, v := range map[string]float64{"eager_step_ms": s.EagerStepMS, "graph_step_ms": s.GraphStepMS,
		"speedup": s.Speedup, "capture_cold_ms": s.CaptureColdMS, "capture_pooled_ms": s.CapturePooledMS,
		"device_busy_ms": s.DeviceBusyMS} {
		if !(v > 0) {
			t.Errorf("summary %s = %g, want positive", name, v)
		}
	}
	if s.PoolBytes <= 0 || len(s.Fallbacks) != 0 || s.Dispatch == nil || rep.LaunchProbe == nil {
		t.Errorf("summary: pool %d bytes, fallbacks %v, dispatch %v, probe %v", s.PoolBytes, s.Fallbacks, s.Dispatch, rep.LaunchProbe)
	}
}

func TestRunMLPCountsKernels(t *testing.T) {
	cfg := quick(PresetMLP)
	cfg.Epochs, cfg.BatchSize, cfg.HiddenSet, cfg.Hidden = 1, 4, true, []int{8, 8}
	cfg.ProbeKernels = -1
	rep := runQuick(t, cfg, openCPU)
	// Gemm+BiasAct per layer; the loss and its gradient; Gemm+ColSum
	// per layer and Gemm+ActGrad below the top; clipping; AdamW.
	if got := rep.Summary.KernelsPerStep; got != 20 {
		t.Errorf("kernels per step = %d, want 20", got)
	}
	if rep.Model != "784-8-8-10 gelu cross_entropy" || rep.BatchSize != 4 || rep.LaunchProbe != nil {
		t.Errorf("model %q batch %d probe %v; want the overridden 784-8-8-10 at batch 4, no probe", rep.Model, rep.BatchSize, rep.LaunchProbe)
	}
}

func TestRunReuseTrainer(t *testing.T) {
	cfg := quick(PresetTiny)
	cfg.ReuseTrainer = true
	rep := runQuick(t, cfg, openCPU)
	if got := []string{rep.Records[1].Capture, rep.Records[3].Capture}; got[0] != CaptureCold || got[1] != CaptureReused {
		t.Errorf("captures %v, want [cold reused]", got)
	}
	if rep.Records[3].CaptureMS != 0 || rep.Summary.Captures != 1 || rep.Summary.CapturePooledMS != 0 {
		t.Errorf("reused setup: capture %g ms, %d captures, pooled %g ms; want one capture only",
			rep.Records[3].CaptureMS, rep.Summary.Captures, rep.Summary.CapturePooledMS)
	}
}

func TestRunSweep(t *testing.T) {
	cfg := quick(PresetTiny)
	cfg.Epochs, cfg.ProbeKernels = 1, -1
	cfg.SweepBatchSizes = []int{4, 2, 4}
	var progress []string
	cfg.Progress = func(msg string) { progress = append(progress, msg) }
	rep := runQuick(t, cfg, openCPU)
	var got []int
	for _, p := range rep.Sweep {
		got = append(got, p.BatchSize)
		if p.Summary.BatchSize != p.BatchSize || len(p.Records) != 2 {
			t.Errorf("sweep point %d: summary batch %d, %d records", p.BatchSize, p.Summary.BatchSize, len(p.Records))
		}
	}
	if len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Errorf("sweep batch sizes %v, want [2 4] (sorted, without duplicates)", got)
	}
	// The preset's batch size (8) is not in the sweep: it is measured for
	// the top level but not added to the sweep.
	if rep.BatchSize != 8 || rep.Summary.BatchSize != 8 {
		t.Errorf("top-level batch %d / %d, want the preset's 8", rep.BatchSize, rep.Summary.BatchSize)
	}
	if len(progress) == 0 {
		t.Error("no progress reported")
	}
}

// failingInstantiate is a CPU device whose Instantiate always fails, so
// every capture fails.
type failingInstantiate struct{ device.Device }

var errNoExec = errors.New("instantiate refused by the test")

func (failingInstantiate) Instantiate(device.Graph) (device.Exec, error) { return nil, errNoExec }

func TestRunCaptureFailureFallsBack(t *testing.T) {
	cfg := quick(PresetTiny)
	cfg.Epochs, cfg.ProbeKernels = 1, -1
	rep := runQuick(t, cfg, func() (device.Device, error) {
		d, err := cpu.Open(cpu.Config{})
		return failingInstantiate{d}, err
	})
	g := rep.Records[1]
	if g.Phase != "graph" || g.GraphEnabled || !g.Fallback || g.FallbackReason != graphs.ReasonCaptureFailed || g.FallbackSteps != 16 {
		t.Errorf("graph record %+v; want graphs disabled and 16 steps fallen back for capture_failed", g)
	}
	if got := rep.Summary.Fallbacks[graphs.ReasonCaptureFailed]; got != 16 || rep.Summary.GraphStepMS != 0 || rep.Summary.Speedup != 0 {
		t.Errorf("summary fallbacks %v, graph step %g, speedup %g; want 16 capture_failed, no graph statistics",
			rep.Summary.Fallbacks, rep.Summary.GraphStepMS, rep.Summary.Speedup)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, new(staging.Guard), openCPU, quick(PresetTiny))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestJSONShape checks the predecessor's keys, which existing tooling
// reads, and the summary keys the issue names.
func TestJSONShape(t *testing.T) {
	cfg := quick(PresetTiny)
	cfg.Epochs, cfg.SweepBatchSizes = 1, []int{2, 8}
	rep := runQuick(t, cfg, openCPU)
	rep.Command = "run_graph_bench --preset tiny"
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"device", "records", "summary", "sweep", "command", "launch_probe"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("top-level key %q missing", k)
		}
	}
	records, _ := doc["records"].([]any)
	if len(records) == 0 {
		t.Fatal("no records")
	}
	for i, r := range records {
		m, _ := r.(map[string]any)
		for _, k := range []string{"graph_enabled", "stage_copy_ms", "capture_ms", "replay_ms", "fallback"} {
			if _, ok := m[k]; !ok {
				t.Errorf("record %d: predecessor key %q missing", i, k)
			}
		}
	}
	summary, _ := doc["summary"].(map[string]any)
	for _, k := range []string{"eager_step_ms", "graph_step_ms", "speedup", "capture_cold_ms", "capture_pooled_ms",
		"kernels_per_step", "device_busy_ms", "eager_step_p90_ms", "graph_step_p90_ms", "eager_host_cpu_ms",
		"launch_cost_us", "pool_bytes", "exposed_stage_ms", "fallbacks"} {
		if _, ok := summary[k]; !ok {
			t.Errorf("summary key %q missing", k)
		}
	}
	sweep, _ := doc["sweep"].([]any)
	if len(sweep) != 2 {
		t.Fatalf("sweep has %d points, want 2", len(sweep))
	}
	for i, p := range sweep {
		m, _ := p.(map[string]any)
		for _, k := range []string{"batch_size", "summary", "records"} {
			if _, ok := m[k]; !ok {
				t.Errorf("sweep point %d: key %q missing", i, k)
			}
		}
	}
	if !strings.HasSuffix(buf.String(), "}\n") {
		t.Error("JSON does not end with a newline")
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{}.WithDefaults()
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"unknown preset", func(c *Config) { c.Preset = "huge" }, `preset: unknown preset "huge"`},
		{"negative batch", func(c *Config) { c.BatchSize = -1 }, "batch-size"},
		{"zero epochs", func(c *Config) { c.Epochs = 0 }, "epochs"},
		{"too few steps", func(c *Config) { c.Steps = 3 }, "steps: must be in 8.."},
		{"negative warm-up", func(c *Config) { c.WarmupBatches = -1 }, "warmup-batches"},
		{"zero settle", func(c *Config) { c.SettleSteps = 0 }, "settle-steps"},
		{"bad sweep", func(c *Config) { c.SweepBatchSizes = []int{8, 0} }, "sweep-batch-sizes"},
		{"bad hidden", func(c *Config) { c.HiddenSet, c.Hidden = true, []int{0} }, "hidden"},
		{"probe repeats", func(c *Config) { c.ProbeRepeats = 0 }, "probe-repeats"},
	}
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestDefaultsPerPreset(t *testing.T) {
	if got := (Config{Preset: PresetTiny}).WithDefaults().Steps; got != DefaultStepsTiny {
		t.Errorf("tiny steps %d, want %d", got, DefaultStepsTiny)
	}
	c := Config{}.WithDefaults()
	if c.Preset != PresetMLP || c.Steps != DefaultStepsMLP || c.Epochs != DefaultEpochs {
		t.Errorf("defaults %+v", c)
	}
}

// TestStepLaunchCost checks the launch cost estimated from the step times:
// graph steps slower than eager ones give a negative estimate, which is
// noise: it is stored as 0 (run_graph_bench's text then says so rather
// than print it, from the fields checked here).
func TestStepLaunchCost(t *testing.T) {
	epoch := func(eagerMS, graphMS float64) epochResult {
		return epochResult{
			eager: phase{wall: []float64{eagerMS}, kernels: 10, steps: 1},
			graph: phase{graph: true, wall: []float64{graphMS}, nodes: 10, steps: 1},
		}
	}
	tests := []struct {
		name         string
		eager, graph float64
		want         float64
		measured     bool
	}{
		{"graphs faster", 0.03, 0.01, 2, true},
		{"graphs slower", 0.01, 0.012, 0, true},
		{"equal", 0.01, 0.01, 0, true},
		{"no graph step", 0.01, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := epoch(tt.eager, tt.graph)
			if tt.graph == 0 {
				e.graph = phase{}
			}
			s := summarise(8, []epochResult{e}, 0, nil)
			if math.Abs(s.StepLaunchCostUS-tt.want) > 1e-9 {
				t.Errorf("step_launch_cost_us = %g, want %g", s.StepLaunchCostUS, tt.want)
			}
			if s.KernelsPerStep != 10 || s.EagerStepMS != tt.eager || s.GraphStepMS != tt.graph || s.StepLaunchCostMeasured() != tt.measured {
				t.Errorf("summary: %d kernels, eager %g ms, graphs %g ms, measured %v; want 10, %g, %g, %v",
					s.KernelsPerStep, s.EagerStepMS, s.GraphStepMS, s.StepLaunchCostMeasured(), tt.eager, tt.graph, tt.measured)
			}
		})
	}
}

// TestRunTinyTransformer: the sequence presets train through NetStep on
// token windows, eagerly and replayed, without a fallback.
func TestRunTinyTransformer(t *testing.T) {
	cfg := quick(PresetTinyTransformer)
	cfg.Epochs = 1
	rep := runQuick(t, cfg, openCPU)
	if rep.BatchSize != 8 || !strings.Contains(rep.Model, "transformer_block(heads=2,mlp=64") || !strings.Contains(rep.Model, "lm_head") {
		t.Errorf("batch %d, model %q; want 8 and the tiny transformer", rep.BatchSize, rep.Model)
	}
	s := rep.Summary
	// Every kernel is counted, the sequence kernels too: the graph holds
	// the step's kernels and its few device-to-device copies (2 today).
	if s.KernelsPerStep == 0 || s.KernelsPerStep > s.GraphNodes || s.GraphNodes-s.KernelsPerStep > 4 || len(s.Fallbacks) != 0 || !(s.EagerStepMS > 0) || !(s.GraphStepMS > 0) {
		t.Errorf("summary: %d kernels, %d nodes, fallbacks %v, eager %g ms, graph %g ms", s.KernelsPerStep, s.GraphNodes,
			s.Fallbacks, s.EagerStepMS, s.GraphStepMS)
	}
}

// TestTokenSource: a net that reads token ids gets integer ids below its
// vocabulary and a label below it at every position.
func TestTokenSource(t *testing.T) {
	for _, p := range []Preset{PresetTransformer, PresetTinyTransformer} {
		w, err := p.Workload()
		if err != nil {
			t.Fatal(err)
		}
		if w.vocab() != 256 || w.Spec.Positions != w.Net.Input[0] {
			t.Fatalf("%s: vocab %d, %d positions; want 256 and %d", p, w.vocab(), w.Spec.Positions, w.Net.Input[0])
		}
		l := nn.NewLayout(w.Spec, w.BatchSize)
		src := newSource(w.Spec, w.Optimizer, l, w.vocab(), 1)
		b := make([]float32, l.Len)
		if _, err := src.Fill(0, b); err != nil {
			t.Fatal(err)
		}
		for name, vs := range map[string][]float32{"id": b[l.X : l.X+l.XLen], "label": b[l.Y : l.Y+l.YLen]} {
			for i, v := range vs {
				if v != float32(int(v)) || v < 0 || v >= 256 {
					t.Fatalf("%s: %s %d = %g, want an integer in [0, 256)", p, name, i, v)
				}
			}
		}
		if l.YLen != w.BatchSize*w.Spec.Positions {
			t.Errorf("%s: %d labels, want one per position (%d)", p, l.YLen, w.BatchSize*w.Spec.Positions)
		}
	}
}

// TestEachBlockStartsWithUnmeasuredStepsOfItsMode: the settle steps run
// first (eager), then before every measured block as many steps of the
// block's own mode, so that no block's first intervals time the other
// mode's steps still in the pipeline.
func TestEachBlockStartsWithUnmeasuredStepsOfItsMode(t *testing.T) {
	dev, err := openCPU()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pool := graphs.NewPool()
	defer pool.Close()
	w, err := PresetTiny.Workload()
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSetup(context.Background(), dev, pool, new(staging.Guard), w, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := s.warmUp(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.capture(); err != nil {
		t.Fatal(err)
	}
	const steps, settle = 20, 3
	es, err := newEventSet(dev, 2*steps)
	if err != nil {
		t.Fatal(err)
	}
	defer es.destroy()
	counter := NewCountingStream(s.compute)
	seq := &stepLog{Stream: counter}
	s.compute = seq
	eager, graph, err := s.measure(context.Background(), es, steps, settle)
	if err != nil {
		t.Fatal(err)
	}
	blocks := blockCount(steps) // 2 of 10 steps each mode
	if eager.steps != steps || graph.steps != steps {
		t.Fatalf("measured %d eager and %d graph steps; want %d each", eager.steps, graph.steps, steps)
	}
	if want := blocks * (settle + steps/blocks); counter.Launches != want {
		t.Errorf("%d graph launches; want %d (each of %d blocks: %d unmeasured, %d measured)", counter.Launches, want, blocks, settle, steps/blocks)
	}
	// The settle steps before the blocks are counted on the stream the
	// measure wraps itself, which forwards to this one.
	if want := eager.kernels * (settle + blocks*(settle+steps/blocks)); counter.Kernels != want {
		t.Errorf("%d eager kernels; want %d (%d a step)", counter.Kernels, want, eager.kernels)
	}
	// In order: each graph block's replays are settle unmeasured ones (a
	// launch between the copy-done wait and step-done, "wL") and then its
	// measured ones (marks around them, "RwRLR"). The blocks run eager,
	// graph, graph, eager: the two graph blocks are one run of replays.
	block := strings.Repeat("wL", settle) + strings.Repeat("RwRLR", steps/blocks)
	if got := seq.graphRuns(); len(got) != 1 || got[0] != strings.Repeat(block, blocks) {
		t.Errorf("graph steps issued %q; want two blocks of %q", got, block)
	}
}

// stepLog notes, in order, a stream's waits ("w"), event records ("R")
// and graph launches ("L"), except the record of a step-done event, which
// ends every step alike; launches of kernels are not noted.
type stepLog struct {
	device.Stream
	ops strings.Builder
}

func (l *stepLog) Wait(e device.Event) error { l.ops.WriteByte('w'); return l.Stream.Wait(e) }

func (l *stepLog) Record(e device.Event) error {
	l.ops.WriteByte('R')
	return l.Stream.Record(e)
}

func (l *stepLog) Launch(x device.Exec) error { l.ops.WriteByte('L'); return l.Stream.Launch(x) }

// graphRuns are the runs of graph steps in the log: the longest stretches
// with launches and no eager step (a wait followed by no launch before
// the next wait).
func (l *stepLog) graphRuns() []string {
	// Each step ends with its step-done record; a step is the ops from a
	// wait (with the mark before it, if any) to that record.
	var runs []string
	var cur strings.Builder
	for _, step := range splitSteps(l.ops.String()) {
		if strings.Contains(step, "L") {
			cur.WriteString(step)
			continue
		}
		if cur.Len() > 0 {
			runs = append(runs, cur.String())
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		runs = append(runs, cur.String())
	}
	return runs
}

// splitSteps cuts a log into steps, dropping each step's final step-done
// record: a measured step is "RwRLRR" or, eager, "RwRRR"; an unmeasured
// one "wLR" or "wR".
func splitSteps(ops string) []string {
	var steps []string
	for len(ops) > 0 {
		n := 0
		if ops[0] == 'R' { // a measured step: its mark before the wait
			n = 1
		}
		n++ // the wait
		if n < len(ops) && ops[n] == 'R' && ops[0] == 'R' {
			n++ // the mark after the wait
		}
		if n < len(ops) && ops[n] == 'L' {
			n++
		}
		if ops[0] == 'R' {
			n++ // the mark at the end
		}
		steps = append(steps, ops[:n])
		ops = ops[min(n+1, len(ops)):] // and the step-done record
	}
	return steps
}

package jobserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

func TestMain(m *testing.M) {
	// The test binary doubles as a CPU tolaria-worker for the subprocess
	// test.
	if os.Getenv(serveAsWorkerEnv) == "1" {
		os.Exit(serveAsWorker())
	}
	goleak.VerifyTestMain(m)
}

// serveAsWorkerEnv makes the test binary a CPU worker (see TestMain).
const serveAsWorkerEnv = "TOLARIA_JOBSERVER_TEST_SERVE"

// serveAsWorker is tolaria-worker serve for the CPU device.
func serveAsWorker() int {
	out := os.Stdout
	if os.Getenv(worker.ProtocolFDEnv) == "3" {
		out = os.NewFile(3, "protocol")
	}
	shared := trainer.NewShared()
	defer shared.Close()
	serve := Serve
	if slices.Contains(os.Args[1:], worker.KeepArg) {
		serve = ServeKept
	}
	if err := serve(context.Background(), os.Stdin, out, Config{Build: "cpu", Open: OpenCPU, Shared: shared}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// recorder keeps every measurement.
type recorder struct {
	mu  sync.Mutex
	got []trainer.Measurement
}

func (r *recorder) Observe(m trainer.Measurement) {
	r.mu.Lock()
	r.got = append(r.got, m)
	r.mu.Unlock()
}

// TestObservationsRoundTrip: every kind of measurement survives the
// protocol, from the worker's observer to the coordinator's.
func TestObservationsRoundTrip(t *testing.T) {
	sent := []trainer.Measurement{
		trainer.GraphEnabled{On: true},
		trainer.Captured{Seconds: 0.25, Pooled: true},
		trainer.Replayed{Seconds: 0.001},
		trainer.StageCopied{Seconds: 0.0005},
		trainer.Fallback{Reason: "capture_failed"},
		trainer.ExecUpdated{},
		trainer.PoolReserved{Bytes: 1 << 20},
		trainer.PrefetchDisabled{Disabled: true},
		trainer.Stepped{Seconds: 0.01, Samples: 64},
		trainer.TrainLoss{Loss: 0.5},
		trainer.EvalAccuracy{Accuracy: 0.9},
		trainer.Epoch{Epoch: 3},
		trainer.DeviceMemory{What: "in_use", Bytes: 4096},
		trainer.TrainBatch{Seq: 3, Indices: []int{5, 1}},
		trainer.MemoryBill{Estimate: trainer.Bill{Parameters: 1, Gradients: 2, OptimizerState: 3, Activations: 4, Workspace: 5, StagingInputs: 6, PinnedHost: 7}, ActualDevice: 21, ActualPinned: 7, Source: "allocations"},
		trainer.Event{Kind: "capture", Fields: map[string]any{"n": 1.0}},
	}
	serve := func(_ context.Context, in io.Reader, out io.Writer) error {
		conn, err := worker.Accept(in, out)
		if err != nil {
			return err
		}
		if err := conn.Hello(worker.Hello{Device: "cpu"}); err != nil {
			return err
		}
		for _, m := range sent {
			remoteObserver{conn}.Observe(m)
		}
		return conn.Result(trainer.Summary{Steps: 1})
	}
	rec := &recorder{}
	_, sum, err := Run(context.Background(), worker.InProcess(serve), "cpu", job.Default(), Sink{Observer: rec})
	if err != nil || sum.Steps != 1 {
		t.Fatalf("summary %+v, %v", sum, err)
	}
	if !reflect.DeepEqual(rec.got, sent) {
		t.Fatalf("through the protocol:\n%v\nsent:\n%v", rec.got, sent)
	}
	if len(sent) != len(trainer.Measurements()) {
		t.Fatalf("%d measurements sent for %d kinds", len(sent), len(trainer.Measurements()))
	}
}

func smallSpec() job.Spec {
	s := job.Default()
	s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.EnableGraphs = "cpu", "synthetic", 512, 2, []int{16}, true
	return s
}

// local serves in this process, with state shared by the test binary's
// requests as a process's are.
func local(t *testing.T) worker.InProcess {
	return InProcess(Config{Build: "cpu", Open: OpenCPU, Shared: newShared(t)})
}

// newShared is a process's state for one test, closed when it ends.
func newShared(t *testing.T) *trainer.Shared {
	s := trainer.NewShared()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRunInProcess(t *testing.T) {
	rec := &recorder{}
	var progress int
	hello, sum, err := Run(context.Background(), local(t), "cpu", smallSpec(),
		Sink{Observer: rec, Progress: func(trainer.Progress) { progress++ }})
	if err != nil {
		t.Fatal(err)
	}
	if hello.Device != "cpu" || hello.Build != "cpu" {
		t.Fatalf("hello %+v", hello)
	}
	if !sum.GraphEnabled || sum.Steps == 0 || sum.ParamsSHA256 == "" || progress == 0 {
		t.Fatalf("summary %+v, %d progress reports", sum, progress)
	}
	if len(rec.got) == 0 {
		t.Fatal("no observations reached the coordinator")
	}
}

func TestCancelInterruptsWithACheckpoint(t *testing.T) {
	spec := smallSpec()
	spec.Epochs, spec.RunDir = 1000, t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	sink := Sink{Progress: func(p trainer.Progress) {
		if p.EpochDone && p.Epoch == 2 {
			cancel()
		}
	}}
	done := make(chan struct{})
	var sum trainer.Summary
	var err error
	go func() {
		defer close(done)
		_, sum, err = Run(ctx, local(t), "cpu", spec, sink)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("a cancelled run did not stop")
	}
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Interrupted || sum.Steps >= 1000*8 {
		t.Fatalf("summary after cancel: interrupted=%v steps=%d", sum.Interrupted, sum.Steps)
	}
}

func TestErrorsCarryTheirKind(t *testing.T) {
	bad := smallSpec()
	bad.Epochs = 0
	_, _, err := Run(context.Background(), local(t), "cpu", bad, Sink{})
	var we *worker.Error
	if !errors.As(err, &we) || we.Kind != worker.KindUsage {
		t.Fatalf("bad spec: %v", err)
	}
	_, _, err = Run(context.Background(), local(t), "cuda", smallSpec(), Sink{})
	if !errors.As(err, &we) || we.Kind != worker.KindNoDevice {
		t.Fatalf("cuda in process: %v", err)
	}
	missing := smallSpec()
	missing.Dataset, missing.DataDir = "fashion-mnist", t.TempDir()
	_, _, err = Run(context.Background(), local(t), "cpu", missing, Sink{})
	if !errors.As(err, &we) || we.Kind != worker.KindUsage {
		t.Fatalf("missing data: %v", err)
	}
	_, _, err = local(t).Call(context.Background(), worker.Request{Type: "train", Device: "cpu"}, worker.Sink{})
	if !errors.As(err, &we) || we.Kind != worker.KindUsage {
		t.Fatalf("an unknown request: %v", err)
	}
}

func TestBenchThroughTheProtocol(t *testing.T) {
	var lines int
	cfg := bench.Config{Preset: bench.PresetTiny, Epochs: 2, Steps: 16, ProbeKernels: -1, Progress: func(string) { lines++ }}
	hello, rep, err := Bench(context.Background(), local(t), "cpu", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hello.Device != "cpu" || rep == nil || len(rep.Records) != 4 || lines == 0 {
		t.Fatalf("hello %+v, report %+v, %d progress lines", hello, rep, lines)
	}
	if rep.Summary.Speedup <= 0 {
		t.Fatalf("summary did not survive the protocol: %+v", rep.Summary)
	}
}

// TestServeRunsThePlanItIsGiven: an in-process run hands Serve the plan
// made in this process, with its data; Serve runs it as it is, without
// loading the spec's data again (here the spec sent names a directory
// without data, so loading would fail).
func TestServeRunsThePlanItIsGiven(t *testing.T) {
	spec := smallSpec()
	train, test, err := spec.LoadData()
	if err != nil {
		t.Fatal(err)
	}
	plan, err := spec.Plan(train, test)
	if err != nil {
		t.Fatal(err)
	}
	sent := spec
	sent.Dataset, sent.DataDir = "fashion-mnist", t.TempDir()
	_, sum, err := Run(context.Background(), InProcess(Config{Build: "cpu", Open: OpenCPU, Shared: newShared(t), Plan: plan}), "cpu", sent, Sink{})
	if err != nil {
		t.Fatalf("running the plan: %v", err)
	}
	if want := spec.Epochs * plan.Trainer.StepsPerEpoch(); sum.Steps != want {
		t.Fatalf("%d steps, want the plan's %d", sum.Steps, want)
	}
	if _, _, err := Run(context.Background(), local(t), "cpu", sent, Sink{}); err == nil {
		t.Fatal("without a plan, Serve trained on a spec whose data does not exist")
	}
}

// TestSubprocessWorker: a CPU tolaria-worker process (this test binary)
// answers a probe, refuses cuda with its kind, and runs a job whose
// measurements and progress reach the coordinator.
func TestSubprocessWorker(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(serveAsWorkerEnv, "1")
	p := &worker.Process{Path: exe, HelloTimeout: time.Minute}
	h, err := p.Probe(context.Background(), "cpu")
	if err != nil || h.Device != "cpu" || h.Build != "cpu" || h.PID == os.Getpid() {
		t.Fatalf("probe: hello %+v, %v", h, err)
	}
	_, err = p.Probe(context.Background(), "cuda")
	var we *worker.Error
	if !errors.As(err, &we) || we.Kind != worker.KindNoDevice {
		t.Fatalf("probe for cuda: %v", err)
	}
	spec := smallSpec()
	spec.RunDir = t.TempDir()
	rec := &recorder{}
	var progress int
	_, s, err := Run(context.Background(), p, "cpu", spec, Sink{Observer: rec, Progress: func(trainer.Progress) { progress++ }})
	if err != nil || s.Steps == 0 || s.ParamsSHA256 == "" || len(rec.got) == 0 || progress == 0 {
		t.Fatalf("run: %+v, %d measurements, %d progress reports, %v", s, len(rec.got), progress, err)
	}
}

// TestSummaryCrossesWhole: the summary a worker sends arrives as it was.
func TestSummaryCrossesWhole(t *testing.T) {
	want := trainer.Summary{Device: "cpu", Steps: 7, Fallbacks: map[string]int{"capture_failed": 2}, EpochSeconds: []float64{0.5}}
	serve := func(_ context.Context, in io.Reader, out io.Writer) error {
		conn, err := worker.Accept(in, out)
		if err != nil {
			return err
		}
		return errors.Join(conn.Hello(worker.Hello{Device: "cpu"}), conn.Result(want))
	}
	_, got, err := Run(context.Background(), worker.InProcess(serve), "cpu", job.Default(), Sink{})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("summary %+v, %v; want %+v", got, err, want)
	}
}

// TestServeNeedsTheSharedState: a server without the process's state
// refuses to serve rather than run without a guard or a pool.
func TestServeNeedsTheSharedState(t *testing.T) {
	_, _, err := Run(context.Background(), InProcess(Config{Build: "cpu", Open: OpenCPU}), "cpu", smallSpec(), Sink{})
	if err == nil || !strings.Contains(err.Error(), "Shared") {
		t.Fatalf("serving without the process's state: %v", err)
	}
}

func TestParseFault(t *testing.T) {
	for in, want := range map[string]Fault{
		"step=5,exit=7":              {Step: 5, Exit: 7},
		"step=2,kill":                {Step: 2, Kill: true},
		"step=4,hang":                {Step: 4, Hang: true},
		"step=6,wedge":               {Step: 6, Wedge: true},
		"step=3,exit=1,run=b,lr=0.1": {Step: 3, Exit: 1, Run: "b,lr=0.1"},
		" step=1 , exit=0 ,run=x":    {Step: 1, Run: "x"},
	} {
		got, err := ParseFault(in)
		if err != nil || got != want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "exit=1", "step=0,exit=1", "step=x", "step=1,crash", "step=1,kill,hang", "step=1,exit=2,hang", "step=1,wedge,hang", "step=1,exit=2,wedge", "step=1,kill,wedge"} {
		if _, err := ParseFault(in); err == nil || !strings.Contains(err.Error(), FaultEnv) {
			t.Errorf("ParseFault(%q): %v", in, err)
		}
	}
	f := Fault{Step: 3, Run: "b"}
	spec := job.Default()
	spec.RunDir = "/s/b"
	if !f.Hits(spec, 3) || f.Hits(spec, 2) {
		t.Error("the fault fires at its step in its run")
	}
	spec.RunDir = "/s/bb"
	if f.Hits(spec, 3) {
		t.Error("the fault fired in another run")
	}
}

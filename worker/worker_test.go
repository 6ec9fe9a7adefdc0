package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestMain(m *testing.M) {
	// The test binary doubles as a CPU worker for the subprocess tests.
	if os.Getenv(serveAsWorkerEnv) == "1" {
		os.Exit(serveAsWorker())
	}
	goleak.VerifyTestMain(m)
}

// serveAsWorkerEnv makes the test binary a CPU worker (see TestMain).
const serveAsWorkerEnv = "TOLARIA_WORKER_TEST_SERVE"

// serveAsWorker is tolaria-worker serve for the CPU device, run by the
// test binary in a subprocess.
func serveAsWorker() int {
	out := os.Stdout
	if os.Getenv(ProtocolFDEnv) == "3" {
		out = os.NewFile(3, "protocol")
	}
	if err := Serve(context.Background(), os.Stdin, out, ServeConfig{Build: "cpu", Open: OpenCPU}); err != nil {
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
// protocol.
func TestObservationsRoundTrip(t *testing.T) {
	var wire bytes.Buffer
	enc := newEncoder(&wire)
	remote, direct := remoteObserver{enc}, &recorder{}
	for _, o := range []trainer.Observer{remote, direct} {
		for _, m := range []trainer.Measurement{
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
			trainer.Event{Kind: "capture", Fields: map[string]any{"n": 1.0}},
		} {
			o.Observe(m)
		}
	}
	replayed := &recorder{}
	dec := newDecoder(&wire)
	for {
		m, err := dec.next()
		if err != nil {
			break
		}
		if err := replay(replayed, m); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(replayed.got, direct.got) {
		t.Fatalf("through the protocol:\n%v\ndirect:\n%v", replayed.got, direct.got)
	}
	if len(direct.got) != len(trainer.Measurements()) {
		t.Fatalf("%d measurements for %d kinds", len(direct.got), len(trainer.Measurements()))
	}
}

func smallSpec() job.Spec {
	s := job.Default()
	s.Device, s.Dataset, s.SyntheticSize, s.Epochs, s.Hidden, s.EnableGraphs = "cpu", "synthetic", 512, 2, []int{16}, true
	return s
}

func TestRunInProcess(t *testing.T) {
	rec := &recorder{}
	var progress int
	hello, sum, err := RunInProcess(context.Background(), "cpu", smallSpec(), ServeConfig{Build: "cpu", Open: OpenCPU},
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
		_, sum, err = RunInProcess(ctx, "cpu", spec, ServeConfig{Build: "cpu", Open: OpenCPU}, sink)
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
	_, _, err := RunInProcess(context.Background(), "cpu", bad, ServeConfig{Build: "cpu", Open: OpenCPU}, Sink{})
	var we *Error
	if !errors.As(err, &we) || we.Kind != KindUsage {
		t.Fatalf("bad spec: %v", err)
	}
	_, _, err = RunInProcess(context.Background(), "cuda", smallSpec(), ServeConfig{Build: "cpu", Open: OpenCPU}, Sink{})
	if !errors.As(err, &we) || we.Kind != KindNoDevice {
		t.Fatalf("cuda in process: %v", err)
	}
	missing := smallSpec()
	missing.Dataset, missing.DataDir = "fashion-mnist", t.TempDir()
	_, _, err = RunInProcess(context.Background(), "cpu", missing, ServeConfig{Build: "cpu", Open: OpenCPU}, Sink{})
	if !errors.As(err, &we) || we.Kind != KindUsage {
		t.Fatalf("missing data: %v", err)
	}
}

func TestBenchThroughTheProtocol(t *testing.T) {
	toWorker, fromCoord := io.Pipe()
	toCoord, fromWorker := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- Serve(context.Background(), toWorker, fromWorker, ServeConfig{Build: "cpu", Open: OpenCPU})
		fromWorker.Close()
	}()
	var lines int
	cfg := bench.Config{Preset: bench.PresetTiny, Epochs: 2, Steps: 16, ProbeKernels: -1}
	hello, res, err := converse(context.Background(), fromCoord, toCoord,
		Message{Type: TypeBench, Device: "cpu", Bench: &cfg}, Sink{Log: func(string) { lines++ }})
	fromCoord.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	toCoord.Close()
	if err != nil {
		t.Fatal(err)
	}
	if hello.Device != "cpu" || res.Report == nil || len(res.Report.Records) != 4 || lines == 0 {
		t.Fatalf("hello %+v, report %+v, %d progress lines", hello, res.Report, lines)
	}
	if res.Report.Summary.Speedup <= 0 {
		t.Fatalf("summary did not survive the protocol: %+v", res.Report.Summary)
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
	_, sum, err := RunInProcess(context.Background(), "cpu", sent, ServeConfig{Build: "cpu", Open: OpenCPU, Plan: plan}, Sink{})
	if err != nil {
		t.Fatalf("running the plan: %v", err)
	}
	if want := spec.Epochs * plan.Trainer.StepsPerEpoch(); sum.Steps != want {
		t.Fatalf("%d steps, want the plan's %d", sum.Steps, want)
	}
	if _, _, err := RunInProcess(context.Background(), "cpu", sent, ServeConfig{Build: "cpu", Open: OpenCPU}, Sink{}); err == nil {
		t.Fatal("without a plan, Serve trained on a spec whose data does not exist")
	}
}

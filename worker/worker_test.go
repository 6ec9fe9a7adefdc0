package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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

// recorder writes every Observer call as a line.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(f string, a ...any) {
	r.mu.Lock()
	r.calls = append(r.calls, fmt.Sprintf(f, a...))
	r.mu.Unlock()
}
func (r *recorder) GraphEnabled(on bool)            { r.add("graph_enabled %v", on) }
func (r *recorder) Captured(s float64, p bool)      { r.add("captured %v %v", s, p) }
func (r *recorder) Replayed(s float64)              { r.add("replayed %v", s) }
func (r *recorder) StageCopied(s float64)           { r.add("stage %v", s) }
func (r *recorder) Fallback(x string)               { r.add("fallback %s", x) }
func (r *recorder) ExecUpdated()                    { r.add("updated") }
func (r *recorder) PoolReserved(b int64)            { r.add("pool %d", b) }
func (r *recorder) PrefetchToDeviceDisabled(d bool) { r.add("prefetch %v", d) }
func (r *recorder) Stepped(s float64, n int)        { r.add("stepped %v %d", s, n) }
func (r *recorder) TrainLoss(v float64)             { r.add("loss %v", v) }
func (r *recorder) EvalAccuracy(v float64)          { r.add("acc %v", v) }
func (r *recorder) Epoch(n int)                     { r.add("epoch %d", n) }
func (r *recorder) DeviceMemory(k string, b int64)  { r.add("mem %s %d", k, b) }
func (r *recorder) Event(e trainer.Event)           { r.add("event %s %v", e.Kind, e.Fields["n"]) }

// TestObservationsRoundTrip: every Observer method survives the protocol.
func TestObservationsRoundTrip(t *testing.T) {
	var wire bytes.Buffer
	enc := newEncoder(&wire)
	remote, direct := remoteObserver{enc}, &recorder{}
	for _, o := range []trainer.Observer{remote, direct} {
		o.GraphEnabled(true)
		o.Captured(0.25, true)
		o.Replayed(0.001)
		o.StageCopied(0.0005)
		o.Fallback("capture_failed")
		o.ExecUpdated()
		o.PoolReserved(1 << 20)
		o.PrefetchToDeviceDisabled(true)
		o.Stepped(0.01, 64)
		o.TrainLoss(0.5)
		o.EvalAccuracy(0.9)
		o.Epoch(3)
		o.DeviceMemory("in_use", 4096)
		o.Event(trainer.Event{Kind: "capture", Fields: map[string]any{"n": 1.0}})
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
	if fmt.Sprint(replayed.calls) != fmt.Sprint(direct.calls) {
		t.Fatalf("through the protocol:\n%v\ndirect:\n%v", replayed.calls, direct.calls)
	}
	if len(direct.calls) != 14 {
		t.Fatalf("%d calls", len(direct.calls))
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
	if len(rec.calls) == 0 {
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

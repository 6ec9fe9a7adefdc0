package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary doubles as a worker for the subprocess tests.
	if os.Getenv(serveAsWorkerEnv) == "1" {
		os.Exit(serveAsWorker())
	}
	goleak.VerifyTestMain(m)
}

// serveAsWorkerEnv makes the test binary a worker (see TestMain).
const serveAsWorkerEnv = "TOLARIA_WORKER_TEST_SERVE"

// serveAsWorker is a worker process serving echo: the protocol without a
// device or a job.
func serveAsWorker() int {
	out := os.Stdout
	if os.Getenv(ProtocolFDEnv) == "3" {
		out = os.NewFile(3, "protocol")
	}
	serve := echo
	if slices.Contains(os.Args[1:], KeepArg) {
		serve = echoKept
	}
	if err := serve(context.Background(), os.Stdin, out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// echoKept serves echo requests one after another, as tolaria-worker
// serve --keep does, until the input ends.
func echoKept(ctx context.Context, in io.Reader, out io.Writer) error {
	l := Listen(in, out)
	for {
		conn, err := l.Accept()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := echoOn(ctx, conn, out); err != nil {
			return err
		}
	}
}

// echo serves one request as a worker does, with no device: it says hello
// for the device asked, refuses "cuda" as a worker without a GPU does,
// answers a probe with the hello alone, and otherwise sends a measurement,
// a progress report and a log line, then the request's body back as the
// result. A body {"wait": true} makes it wait for cancel (or the end of
// input) first and answer {"cancelled": true}. {"advances": true} makes
// its hello say that it advances the work counter; {"advance_ms": N}
// advances it every N milliseconds while it is busy ({"busy_ms"}) or
// waits.
func echo(ctx context.Context, in io.Reader, out io.Writer) error {
	conn, err := Accept(in, out)
	if err != nil {
		return err
	}
	return echoOn(ctx, conn, out)
}

// echoOn serves the request conn read (see echo).
func echoOn(ctx context.Context, conn *Conn, out io.Writer) (err error) {
	req := conn.Request()
	if req.Device == "cuda" {
		return conn.Fail(&Error{Kind: KindNoDevice, Message: "no GPU here"})
	}
	var ask struct {
		Wait      bool
		BusyMS    int    `json:"busy_ms"`
		Exit      int    `json:"exit"`
		Crash     bool   `json:"crash"`
		Garbage   string `json:"garbage"`
		Advances  bool   `json:"advances"`
		AdvanceMS int    `json:"advance_ms"`
		// StopAdvancing stops the counter once busy_ms is over.
		StopAdvancing bool `json:"stop_advancing"`
	}
	_ = json.Unmarshal(req.Body, &ask)
	if err := conn.Hello(Hello{Device: req.Device, Description: "echo", Build: "cpu", PID: os.Getpid(), Advances: ask.Advances}); err != nil || req.Type == TypeProbe {
		return err
	}
	stopAdvancing := func() {}
	if ask.AdvanceMS > 0 {
		stop := make(chan struct{})
		var once sync.Once
		stopAdvancing = func() { once.Do(func() { close(stop) }) }
		defer stopAdvancing()
		go func() {
			t := time.NewTicker(time.Duration(ask.AdvanceMS) * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					conn.Advance("echo step")
				}
			}
		}()
	}
	defer conn.StartHeartbeat()()
	runCtx, wait := conn.WatchCancel(ctx)
	defer wait()
	switch {
	case ask.Exit != 0:
		os.Exit(ask.Exit)
	case ask.Crash:
		self, _ := os.FindProcess(os.Getpid())
		_ = self.Kill() // SIGKILL: a crash the worker cannot report
		select {}
	case ask.Garbage != "":
		_, _ = fmt.Fprintln(out, ask.Garbage)
	case ask.BusyMS > 0:
		// A long step: nothing is sent but the heartbeats.
		time.Sleep(time.Duration(ask.BusyMS) * time.Millisecond)
	}
	if ask.StopAdvancing {
		stopAdvancing()
	}
	if ask.Wait {
		<-runCtx.Done()
		return conn.Result(map[string]bool{"cancelled": true})
	}
	err = errors.Join(
		conn.Observe("epoch", json.RawMessage(`{"epoch":1}`)),
		conn.Progress(json.RawMessage(`{"step":1}`)),
		conn.Log("halfway"),
		conn.Result(req.Body))
	return err
}

// got records what a sink receives, in order.
type got struct{ answers []string }

func (g *got) sink() Sink {
	return Sink{
		Hello: func(h Hello) { g.answers = append(g.answers, "hello "+h.Device) },
		Observe: func(name string, body json.RawMessage) error {
			g.answers = append(g.answers, name+" "+string(body))
			return nil
		},
		Progress: func(body json.RawMessage) error { g.answers = append(g.answers, "progress "+string(body)); return nil },
		Log:      func(line string) { g.answers = append(g.answers, "log "+line) },
	}
}

// TestInProcessCarriesEveryAnswer: every kind of answer reaches the sink
// in order, payloads as they were sent, and the result comes back.
func TestInProcessCarriesEveryAnswer(t *testing.T) {
	var g got
	body := json.RawMessage(`{"epochs":2,"hidden":[16]}`)
	hello, res, err := InProcess(echo).Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: body}, g.sink())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"hello cpu", `epoch {"epoch":1}`, `progress {"step":1}`, "log halfway"}
	if !reflect.DeepEqual(g.answers, want) || hello.Device != "cpu" || string(res) != string(body) {
		t.Fatalf("answers %q, hello %+v, result %s; want %q and the body back", g.answers, hello, res, want)
	}
}

// TestSinkErrorEndsTheRequest: a payload its owner cannot decode ends
// the request with the owner's error.
func TestSinkErrorEndsTheRequest(t *testing.T) {
	sink := Sink{Observe: func(name string, _ json.RawMessage) error { return fmt.Errorf("unknown measurement %q", name) }}
	_, _, err := InProcess(echo).Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{}`)}, sink)
	if err == nil || !strings.Contains(err.Error(), `unknown measurement "epoch"`) {
		t.Fatalf("err %v, want the sink's", err)
	}
}

// TestCancelReachesTheWorker: cancelling the caller's context sends
// cancel; the worker answers, and its answer is returned.
func TestCancelReachesTheWorker(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var res json.RawMessage
	var err error
	go func() {
		defer close(done)
		_, res, err = InProcess(echo).Call(ctx, Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"wait":true}`)},
			Sink{Hello: func(Hello) { cancel() }})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a cancelled request did not end")
	}
	if err != nil || string(res) != `{"cancelled":true}` {
		t.Fatalf("result %s, %v; want the worker's answer to the cancel", res, err)
	}
}

func TestErrorsCarryTheirKind(t *testing.T) {
	_, _, err := InProcess(echo).Call(context.Background(), Request{Type: TypeStart, Device: "cuda"}, Sink{})
	var we *Error
	if !errors.As(err, &we) || we.Kind != KindNoDevice || we.Message != "no GPU here" {
		t.Fatalf("err %v, want the worker's no_device error", err)
	}
}

// TestProbeEndsAtHello: a probe's answer is the hello alone.
func TestProbeEndsAtHello(t *testing.T) {
	var g got
	hello, res, err := InProcess(echo).Call(context.Background(), Request{Type: TypeProbe, Device: "cpu"}, g.sink())
	if err != nil || hello.Device != "cpu" || res != nil || len(g.answers) != 1 {
		t.Fatalf("hello %+v, result %s, answers %q, %v", hello, res, g.answers, err)
	}
}

// TestAliveSeesEveryMessage: Sink.Alive hears every message, the
// heartbeats of a long silent step included, not only those the other
// callbacks receive.
func TestAliveSeesEveryMessage(t *testing.T) {
	var g got
	sink := g.sink()
	var alive atomic.Int64
	sink.Alive = func() { alive.Add(1) }
	req := Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"busy_ms":300}`), Heartbeat: 20 * time.Millisecond}
	if _, _, err := InProcess(echo).Call(context.Background(), req, sink); err != nil {
		t.Fatal(err)
	}
	// hello, the measurement, progress, log and result are 5; a 300ms step
	// with a heartbeat every 20ms adds about 15.
	if n, others := alive.Load(), int64(len(g.answers)+1); n < others+5 {
		t.Errorf("Alive called %d times for %d answers, a result and a 300ms step's heartbeats", n, others-1)
	}
}

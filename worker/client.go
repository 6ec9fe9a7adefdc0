package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Sink receives what a worker reports.
type Sink struct {
	Observer trainer.Observer
	Progress func(trainer.Progress)
	Hello    func(Hello)
	Log      func(line string) // benchmark progress lines
}

// converse sends the request and reads the answer until a result, an
// error or the end of the worker's output. Cancelling ctx sends cancel
// once; the worker then checkpoints and answers with a result.
func converse(ctx context.Context, w io.Writer, r io.Reader, req Message, sink Sink) (Hello, Message, error) {
	enc, dec := newEncoder(w), newDecoder(r)
	if err := enc.send(req); err != nil {
		return Hello{}, Message{}, fmt.Errorf("worker: sending the request: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = enc.send(Message{Type: TypeCancel}) })
	defer stop()
	var hello Hello
	for {
		m, err := dec.next()
		if err != nil {
			return hello, Message{}, fmt.Errorf("worker: %w", err)
		}
		switch m.Type {
		case TypeHello:
			if m.Hello != nil {
				hello = *m.Hello
				if sink.Hello != nil {
					sink.Hello(hello)
				}
			}
			if req.Type == TypeProbe {
				return hello, m, nil
			}
		case TypeObserve:
			if sink.Observer != nil {
				if err := replay(sink.Observer, m); err != nil {
					return hello, Message{}, err
				}
			}
		case TypeProgress:
			if sink.Progress != nil && m.Progress != nil {
				sink.Progress(*m.Progress)
			}
		case TypeLog:
			if sink.Log != nil {
				sink.Log(m.Text)
			}
		case TypeResult:
			if m.Summary == nil && m.Report == nil {
				return hello, Message{}, errors.New("worker: result without a summary or report")
			}
			return hello, m, nil
		case TypeError:
			if m.Error == nil {
				return hello, Message{}, errors.New("worker: error without a description")
			}
			return hello, Message{}, m.Error
		default:
			return hello, Message{}, fmt.Errorf("worker protocol: unexpected message %q", m.Type)
		}
	}
}

func summaryOf(m Message) trainer.Summary {
	if m.Summary == nil {
		return trainer.Summary{}
	}
	return *m.Summary
}

// RunInProcess runs a job through the protocol against Serve in this
// process: the CPU device's path, the same protocol as a subprocess.
func RunInProcess(ctx context.Context, deviceName string, spec job.Spec, cfg ServeConfig, sink Sink) (Hello, trainer.Summary, error) {
	toWorker, fromCoord := io.Pipe()
	toCoord, fromWorker := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := Serve(context.WithoutCancel(ctx), toWorker, fromWorker, cfg)
		fromWorker.CloseWithError(io.EOF)
		toWorker.Close()
		served <- err
	}()
	hello, res, err := converse(ctx, fromCoord, toCoord, Message{Type: TypeStart, Device: deviceName, Job: &spec}, sink)
	fromCoord.Close()
	toCoord.Close()
	if serr := <-served; err == nil && serr != nil {
		err = serr
	}
	return hello, summaryOf(res), err
}

// Process is a tolaria-worker binary.
type Process struct {
	Path   string
	Logger *slog.Logger
	// Stderr receives the worker's standard error (its logs) as well as the
	// tail kept for error messages; nil discards it.
	Stderr io.Writer
	// HelloTimeout bounds the wait for the worker's hello (device start-up).
	HelloTimeout time.Duration
	// Grace is how long a cancelled worker may take to checkpoint and exit.
	Grace time.Duration
}

// tail keeps the last bytes written, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > 4096 {
		t.buf = t.buf[n-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, nil)))
}

// Probe starts the worker, asks it to open deviceName and returns its hello.
func (p *Process) Probe(ctx context.Context, deviceName string) (Hello, error) {
	h, _, err := p.run(ctx, Message{Type: TypeProbe, Device: deviceName}, Sink{})
	return h, err
}

// Run runs a job in the worker process.
func (p *Process) Run(ctx context.Context, deviceName string, spec job.Spec, sink Sink) (Hello, trainer.Summary, error) {
	h, res, err := p.run(ctx, Message{Type: TypeStart, Device: deviceName, Job: &spec}, sink)
	return h, summaryOf(res), err
}

// Bench runs the benchmark in the worker process on its device.
func (p *Process) Bench(ctx context.Context, deviceName string, cfg bench.Config, sink Sink) (Hello, *bench.Report, error) {
	h, res, err := p.run(ctx, Message{Type: TypeBench, Device: deviceName, Bench: &cfg}, sink)
	if err != nil {
		return h, nil, err
	}
	if res.Report == nil {
		return h, nil, errors.New("worker: benchmark result without a report")
	}
	return h, res.Report, nil
}

// ErrWorkerExited reports a worker that ended without an answer.
var ErrWorkerExited = errors.New("worker exited without an answer")

// ProtocolFDEnv names the environment variable that tells a worker which
// file descriptor carries the protocol's output. Its standard output then
// goes to the coordinator's log, so a library printing there cannot break
// the protocol.
const ProtocolFDEnv = "TOLARIA_PROTOCOL_FD"

func (p *Process) run(ctx context.Context, req Message, sink Sink) (Hello, Message, error) {
	helloTimeout, grace := p.HelloTimeout, p.Grace
	if helloTimeout == 0 {
		helloTimeout = 60 * time.Second
	}
	if grace == 0 {
		grace = 30 * time.Second
	}
	cmd := exec.Command(p.Path, "serve")
	var errTail tail
	var logs io.Writer = &errTail
	if p.Stderr != nil {
		logs = io.MultiWriter(&errTail, p.Stderr)
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	protoR, protoW, err := os.Pipe()
	if err != nil {
		return Hello{}, Message{}, err
	}
	defer protoR.Close()
	cmd.ExtraFiles = []*os.File{protoW} // fd 3 in the worker
	cmd.Env = append(os.Environ(), ProtocolFDEnv+"=3")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		protoW.Close()
		return Hello{}, Message{}, err
	}
	if err := cmd.Start(); err != nil {
		protoW.Close()
		return Hello{}, Message{}, fmt.Errorf("worker %s: %w", p.Path, err)
	}
	protoW.Close()
	w := &watchdog{cmd: cmd, exited: make(chan struct{}), gotHello: make(chan struct{})}
	inner := sink
	inner.Hello = func(h Hello) {
		w.helloOnce.Do(func() { close(w.gotHello) })
		if sink.Hello != nil {
			sink.Hello(h)
		}
	}
	go w.watch(ctx, helloTimeout, grace)
	hello, res, convErr := converse(ctx, stdin, protoR, req, inner)
	stdin.Close()
	waitErr := cmd.Wait()
	close(w.exited)
	if convErr == nil {
		return hello, res, nil
	}
	var we *Error
	if errors.As(convErr, &we) {
		return hello, res, convErr
	}
	status := "exited"
	if waitErr != nil {
		status = waitErr.Error()
	}
	if why := w.reason(); why != "" {
		status += "; " + why
	}
	return hello, res, fmt.Errorf("%w: %s (%s; %v); its last output: %s", ErrWorkerExited, p.Path, status, convErr, orNone(errTail.String()))
}

// watchdog kills a worker that never says hello (stuck in driver start-up),
// one that is cancelled before saying hello (nothing to save yet), and one
// that ignores a cancellation for longer than the grace period.
type watchdog struct {
	cmd       *exec.Cmd
	exited    chan struct{}
	gotHello  chan struct{}
	helloOnce sync.Once
	mu        sync.Mutex
	why       string
}

func (w *watchdog) kill(why string) {
	w.mu.Lock()
	w.why = why
	w.mu.Unlock()
	_ = w.cmd.Process.Kill()
}

func (w *watchdog) reason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.why
}

func (w *watchdog) watch(ctx context.Context, helloTimeout, grace time.Duration) {
	select {
	case <-w.gotHello:
	case <-w.exited:
		return
	case <-ctx.Done():
		w.kill("killed by tolaria: cancelled before the worker reported a device")
		return
	case <-time.After(helloTimeout):
		w.kill(fmt.Sprintf("killed by tolaria: no hello within %s", helloTimeout))
		return
	}
	select {
	case <-w.exited:
	case <-ctx.Done():
		select {
		case <-w.exited:
		case <-time.After(grace):
			w.kill(fmt.Sprintf("killed by tolaria: still running %s after being cancelled", grace))
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

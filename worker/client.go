package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Sink receives what a worker reports while it serves a request. Payloads
// come as the JSON the worker sent; the side that owns their type decodes
// them, and an error it returns ends the request.
type Sink struct {
	Hello    func(Hello)
	Observe  func(name string, body json.RawMessage) error
	Progress func(body json.RawMessage) error
	Log      func(line string) // benchmark progress lines
}

// Transport carries one request to a worker and brings back its answers:
// the hello, and the result's JSON (none for a probe), or the worker's
// *Error, or why the worker could not answer.
type Transport interface {
	Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error)
}

// converse sends the request and reads the answer until a result, an
// error or the end of the worker's output. Cancelling ctx sends cancel
// once; the worker then checkpoints and answers with a result.
func converse(ctx context.Context, w io.Writer, r io.Reader, req Request, sink Sink) (Hello, json.RawMessage, error) {
	enc, dec := newEncoder(w), newDecoder(r)
	if err := enc.send(Message{Type: req.Type, Device: req.Device, Body: req.Body}); err != nil {
		return Hello{}, nil, fmt.Errorf("worker: sending the request: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = enc.send(Message{Type: TypeCancel}) })
	defer stop()
	var hello Hello
	for {
		m, err := dec.next()
		if err != nil {
			return hello, nil, fmt.Errorf("worker: %w", err)
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
				return hello, nil, nil
			}
		case TypeObserve:
			if sink.Observe != nil {
				if m.Name == "" {
					return hello, nil, errors.New("worker protocol: observe message without a measurement")
				}
				if err := sink.Observe(m.Name, m.Body); err != nil {
					return hello, nil, fmt.Errorf("worker protocol: %w", err)
				}
			}
		case TypeProgress:
			if sink.Progress != nil && len(m.Body) > 0 {
				if err := sink.Progress(m.Body); err != nil {
					return hello, nil, fmt.Errorf("worker protocol: progress: %w", err)
				}
			}
		case TypeLog:
			if sink.Log != nil {
				sink.Log(m.Text)
			}
		case TypeResult:
			if len(m.Body) == 0 {
				return hello, nil, errors.New("worker: result without a body")
			}
			return hello, m.Body, nil
		case TypeError:
			if m.Error == nil {
				return hello, nil, errors.New("worker: error without a description")
			}
			return hello, nil, m.Error
		default:
			return hello, nil, fmt.Errorf("worker protocol: unexpected message %q", m.Type)
		}
	}
}

// InProcess is a transport to a worker served in this process, over
// pipes: the CPU device's path, the same protocol as a subprocess. The
// function serves one request read from in, answering on out, as a
// tolaria-worker does on its standard input and protocol descriptor.
type InProcess func(ctx context.Context, in io.Reader, out io.Writer) error

// Call serves req with f and returns its answer. Cancelling ctx sends
// cancel, as to a subprocess; the server itself runs until it answers.
func (f InProcess) Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error) {
	toWorker, fromCoord := io.Pipe()
	toCoord, fromWorker := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := f(context.WithoutCancel(ctx), toWorker, fromWorker)
		fromWorker.CloseWithError(io.EOF)
		toWorker.Close()
		served <- err
	}()
	hello, res, err := converse(ctx, fromCoord, toCoord, req, sink)
	fromCoord.Close()
	toCoord.Close()
	if serr := <-served; serr != nil {
		if err == nil {
			err = serr
		} else {
			// The server's own failure is why the conversation broke.
			err = fmt.Errorf("%w (the in-process worker: %w)", err, serr)
		}
	}
	return hello, res, err
}

// Process is a tolaria-worker binary.
type Process struct {
	Path   string
	Logger *slog.Logger
	// Stderr receives the worker's standard error (its logs) as well as the
	// tail kept for error messages; nil discards it.
	Stderr io.Writer
	// HelloTimeout bounds the wait for the worker's hello (device start-up),
	// not the job that follows it; 0 means DefaultHelloTimeout.
	HelloTimeout time.Duration
	// Grace is how long a cancelled worker may take to checkpoint and exit;
	// 0 means DefaultGrace.
	Grace time.Duration
	// Env is added to the worker's environment (this process's), e.g.
	// CUDA_VISIBLE_DEVICES=1 to give it one GPU.
	Env []string
}

const (
	// DefaultHelloTimeout is how long a worker may take from its start to
	// its hello, which it sends once its device is open. A worker that is
	// silent that long is stuck (in driver start-up, or not a worker at
	// all) and is killed.
	// Opening a GPU (driver start-up, loading the kernels) takes seconds;
	// tolaria's --worker-start-timeout overrides it.
	DefaultHelloTimeout = 20 * time.Second
	// DefaultGrace is how long a cancelled worker may take to checkpoint.
	DefaultGrace = 30 * time.Second
	// exitTimeout is how long a worker may take to exit once its request
	// is over (answered, failed or abandoned) before it is killed.
	exitTimeout = 10 * time.Second
	// pipeDelay bounds the reading of pipes that a worker's descendants
	// still hold once the worker has exited or been killed.
	pipeDelay = 2 * time.Second
	// reapTimeout bounds the wait for a killed worker to be reaped (a
	// process stuck in the kernel, in a GPU driver, may outlive SIGKILL).
	reapTimeout = 5 * time.Second
)

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
	h, _, err := p.Call(ctx, Request{Type: TypeProbe, Device: deviceName}, Sink{})
	return h, err
}

// ErrWorkerExited reports a worker that ended without an answer.
var ErrWorkerExited = errors.New("worker exited without an answer")

// ErrNoAnswer reports a worker that started but did not say hello in time;
// the error is a *NoAnswerError.
var ErrNoAnswer = errors.New("worker did not answer")

// NoAnswerError is a worker that started but did not say hello within
// After, and was killed with its process group.
type NoAnswerError struct {
	Path   string
	After  time.Duration
	Output string // the tail of its output, if any
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("the worker %s started but did not answer within %s, so tolaria stopped it; its last output: %s",
		e.Path, e.After, orNone(e.Output))
}

func (e *NoAnswerError) Unwrap() error { return ErrNoAnswer }

// ProtocolFDEnv names the environment variable that tells a worker which
// file descriptor carries the protocol's output. Its standard output then
// goes to the coordinator's log, so a library printing there cannot break
// the protocol.
const ProtocolFDEnv = "TOLARIA_PROTOCOL_FD"

// Call starts the worker in a process group of its own, sends req and reads
// the answer. Every wait is bounded: for the hello (HelloTimeout), for a
// cancelled worker (Grace), for the exit once the request is over
// (exitTimeout) and for pipes that descendants hold (pipeDelay). Whatever
// happens, the worker's whole process group is killed before Call returns.
func (p *Process) Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error) {
	helloTimeout, grace := p.HelloTimeout, p.Grace
	if helloTimeout <= 0 {
		helloTimeout = DefaultHelloTimeout
	}
	if grace <= 0 {
		grace = DefaultGrace
	}
	cmd := exec.Command(p.Path, "serve")
	ownProcessGroup(cmd)
	// All the worker's pipes are files of ours, so Wait returns as soon as
	// the worker exits even if a descendant holds them; WaitDelay is a
	// second guard should exec ever copy through pipes of its own.
	cmd.WaitDelay = pipeDelay
	var errTail tail
	var logs io.Writer = &errTail
	if p.Stderr != nil {
		logs = io.MultiWriter(&errTail, p.Stderr)
	}
	var pipes [3][2]*os.File // stdin, protocol, logs: read and write ends
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			for _, pp := range pipes[:i] {
				pp[0].Close()
				pp[1].Close()
			}
			return Hello{}, nil, err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	stdinR, stdinW := pipes[0][0], pipes[0][1]
	protoR, protoW := pipes[1][0], pipes[1][1]
	logR, logW := pipes[2][0], pipes[2][1]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, logW, logW
	cmd.ExtraFiles = []*os.File{protoW} // fd 3 in the worker
	cmd.Env = append(append(os.Environ(), p.Env...), ProtocolFDEnv+"=3")
	err := cmd.Start()
	stdinR.Close()
	protoW.Close()
	logW.Close()
	if err != nil {
		stdinW.Close()
		protoR.Close()
		logR.Close()
		return Hello{}, nil, fmt.Errorf("worker %s: %w", p.Path, err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(logs, logR)
	}()
	w := &watchdog{cmd: cmd, in: stdinW, out: []*os.File{protoR, logR}, exited: make(chan struct{}), gotHello: make(chan struct{})}
	go w.wait()
	inner := sink
	inner.Hello = func(h Hello) {
		w.helloOnce.Do(func() { close(w.gotHello) })
		if sink.Hello != nil {
			sink.Hello(h)
		}
	}
	go w.watch(ctx, helloTimeout, grace)
	hello, res, convErr := converse(ctx, stdinW, protoR, req, inner)
	stdinW.Close() // the end of input tells the worker to finish
	reaped := w.awaitExit()
	if reaped {
		<-copied // bounded: the logs' read deadline is set once the worker is reaped
	}
	protoR.Close()
	logR.Close()
	if convErr == nil {
		return hello, res, nil
	}
	var we *Error
	if errors.As(convErr, &we) {
		return hello, res, convErr
	}
	if w.noHello() {
		return hello, res, &NoAnswerError{Path: p.Path, After: helloTimeout, Output: errTail.String()}
	}
	status := "exited"
	if !reaped {
		status = "still running after SIGKILL"
	} else if w.waitErr != nil {
		status = w.waitErr.Error()
	}
	if why := w.reason(); why != "" {
		status += "; " + why
	}
	return hello, res, fmt.Errorf("%w: %s (%s; %v); its last output: %s", ErrWorkerExited, p.Path, status, convErr, orNone(errTail.String()))
}

// watchdog kills a worker that never says hello (stuck in driver start-up),
// one that is cancelled before saying hello (nothing to save yet), one
// that ignores a cancellation for longer than the grace period and one
// that does not exit once its request is over. It kills the worker's
// process group, so a wrapper script's children go too.
type watchdog struct {
	cmd       *exec.Cmd
	in        *os.File   // the coordinator's end of the worker's stdin
	out       []*os.File // the coordinator's ends of the protocol and log pipes
	exited    chan struct{}
	waitErr   error // cmd.Wait's, set before exited is closed
	gotHello  chan struct{}
	helloOnce sync.Once
	mu        sync.Mutex
	why       string
	helloLate bool
}

// wait reaps the worker, then kills what is left of its process group:
// descendants holding the protocol pipe would otherwise keep the
// coordinator reading.
func (w *watchdog) wait() {
	w.waitErr = w.cmd.Wait()
	killGroup(w.cmd)
	w.unblock()
	close(w.exited)
}

// unblock bounds the coordinator's reads and writes on the worker's pipes,
// which a surviving descendant could hold open: what is already there can
// still be read.
func (w *watchdog) unblock() {
	deadline := time.Now().Add(pipeDelay)
	for _, f := range w.out {
		_ = f.SetReadDeadline(deadline)
	}
	_ = w.in.SetWriteDeadline(deadline)
}

func (w *watchdog) kill(why string) {
	w.mu.Lock()
	if w.why == "" {
		w.why = why
	}
	w.mu.Unlock()
	killGroup(w.cmd)
	w.unblock()
}

func (w *watchdog) reason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.why
}

func (w *watchdog) noHello() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.helloLate
}

// awaitExit gives a worker whose request is over exitTimeout to exit, then
// kills its process group. It reports whether the worker was reaped; one
// that survives SIGKILL for reapTimeout is left behind rather than waited
// for.
func (w *watchdog) awaitExit() bool {
	t := time.NewTimer(exitTimeout)
	defer t.Stop()
	select {
	case <-w.exited:
		return true
	case <-t.C:
	}
	w.kill(fmt.Sprintf("killed by tolaria: still running %s after its request ended", exitTimeout))
	t.Reset(reapTimeout)
	select {
	case <-w.exited:
		return true
	case <-t.C:
		return false
	}
}

func (w *watchdog) watch(ctx context.Context, helloTimeout, grace time.Duration) {
	hello := time.NewTimer(helloTimeout)
	defer hello.Stop()
	select {
	case <-w.gotHello:
	case <-w.exited:
		return
	case <-ctx.Done():
		w.kill("killed by tolaria: cancelled before the worker reported a device")
		return
	case <-hello.C:
		w.mu.Lock()
		w.helloLate = true
		w.mu.Unlock()
		w.kill(fmt.Sprintf("killed by tolaria: no hello within %s", helloTimeout))
		return
	}
	select {
	case <-w.exited:
	case <-ctx.Done():
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-w.exited:
		case <-t.C:
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

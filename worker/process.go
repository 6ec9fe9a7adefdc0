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
	"sync/atomic"
	"syscall"
	"time"
)

// Process is a tolaria-worker binary.
type Process struct {
	Path   string
	Logger *slog.Logger
	// Stderr receives the worker's standard error (its logs), after a
	// header line per start naming the time, the pid and the command; the
	// tail kept for error messages is taken from the same stream. nil
	// discards it.
	Stderr io.Writer
	// HelloTimeout bounds the wait for the worker's hello (device start-up),
	// not the job that follows it; 0 means DefaultHelloTimeout.
	HelloTimeout time.Duration
	// Grace is how long a cancelled worker may take to checkpoint and exit;
	// 0 means DefaultGrace.
	Grace time.Duration
	// HeartbeatTimeout is how long a worker that has said hello may stay
	// silent (no heartbeat, no other message) before it is taken for hung
	// and killed; 0 means DefaultHeartbeatTimeout. The worker is asked for
	// a heartbeat several times within it (see HeartbeatInterval). A worker
	// whose hello says it advances a work counter (Hello.Advances) is also
	// taken for hung when the counter its heartbeats carry stands still
	// that long: alive, but wedged.
	HeartbeatTimeout time.Duration
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
	// DefaultHeartbeatTimeout is how long a working worker may be silent,
	// or make no progress. Heartbeats come from a goroutine of their own,
	// so only a stopped (SIGSTOP) or frozen process misses them; a worker
	// wedged in its work still beats, and is found by the work counter the
	// beats carry. The bound is loose enough for a loaded machine's
	// scheduling, a long GC pause and the longest stretch of work between
	// two advances (one data file read, one capture).
	DefaultHeartbeatTimeout = 30 * time.Second
	// MinHeartbeatTimeout is the shortest heartbeat timeout accepted: below
	// it, ordinary scheduling delays would read as a hang.
	MinHeartbeatTimeout = time.Second
	// maxHeartbeatInterval caps the interval between heartbeats, so that a
	// cancelled worker shows it is still alive within cancelSilence.
	maxHeartbeatInterval = 2 * time.Second
	// exitTimeout is how long a worker may take to exit once its request
	// is over (answered, failed or abandoned) before it is killed.
	exitTimeout = 10 * time.Second
	// pipeDelay bounds the reading of pipes that a worker's descendants
	// still hold once the worker has exited or been killed.
	pipeDelay = 2 * time.Second
	// reapTimeout bounds the wait for a killed worker to be reaped (a
	// process stuck in the kernel, in a GPU driver, may outlive SIGKILL).
	reapTimeout = 5 * time.Second
	// tailLines is how many of the worker's last log lines an error carries.
	tailLines = 15
)

// CheckHeartbeatTimeout refuses a heartbeat timeout under
// MinHeartbeatTimeout, saying why and what to give: the one check of the
// bound, for every command and library. A caller whose zero value means
// DefaultHeartbeatTimeout checks only a timeout it was given.
func CheckHeartbeatTimeout(d time.Duration) error {
	if d < MinHeartbeatTimeout {
		return fmt.Errorf("%s is too short (a loaded machine's scheduling could pass for a hang); give at least %s, such as %s",
			d, MinHeartbeatTimeout, DefaultHeartbeatTimeout)
	}
	return nil
}

// HeartbeatInterval is how often a worker watched with the given timeout
// is asked to send a heartbeat: six times within the timeout, and at least
// every two seconds.
func HeartbeatInterval(timeout time.Duration) time.Duration {
	return min(timeout/6, maxHeartbeatInterval)
}

// cancelSilence is how long a cancelled worker may stay silent after the
// cancel before it is taken for hung: three heartbeats. A stopped worker
// is so found within seconds of Ctrl-C rather than after the grace period.
func cancelSilence(interval time.Duration) time.Duration { return 3 * interval }

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

// String is the last tailLines lines.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(bytes.ToValidUTF8(t.buf, nil)))
	if lines := strings.Split(s, "\n"); len(lines) > tailLines {
		s = strings.Join(lines[len(lines)-tailLines:], "\n")
	}
	return s
}

// Probe starts the worker, asks it to open deviceName and returns its hello.
func (p *Process) Probe(ctx context.Context, deviceName string) (Hello, error) {
	h, _, err := p.Call(ctx, Request{Type: TypeProbe, Device: deviceName}, Sink{})
	return h, err
}

// ErrWorkerExited reports a worker that ended without an answer: it
// exited, crashed, broke the protocol or was killed. The error is a
// *ProcessError saying which.
var ErrWorkerExited = errors.New("worker exited without an answer")

// ErrHung reports a worker that fell silent (no heartbeat within the
// heartbeat timeout, or none within seconds of being cancelled), or whose
// work made no progress within the heartbeat timeout while it still sent
// heartbeats (wedged), and was killed with its process group; the error
// is a *ProcessError.
var ErrHung = errors.New("worker hung")

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

// Why a worker process failed, in a ProcessError: short words, fit for a
// results table or a metric's label.
const (
	ReasonHung     = "hung"     // silent, or without progress, past the heartbeat timeout; or silent after a cancel
	ReasonCrashed  = "crashed"  // ended by a signal it did not get from tolaria
	ReasonExit     = "exit"     // exited (with a non-zero code, or zero without an answer)
	ReasonProtocol = "protocol" // sent what the protocol does not allow
	ReasonKilled   = "killed"   // killed by tolaria: cancelled past the grace period, or aborted
)

// ProcessError is a worker process that failed without answering: hung,
// crashed, exited or broke the protocol. Its whole process group has been
// killed by the time Call returns it.
type ProcessError struct {
	Reason string // one of the Reason constants
	Path   string
	PID    int
	// Detail says what happened: the exit status, the protocol error, or
	// what tolaria killed it for.
	Detail string
	// Silent is, for a hung worker, how long it had been silent when it
	// was killed.
	Silent time.Duration
	// Stalled is, for a hung worker that still sent heartbeats, how long
	// its work had made no progress when it was killed; 0 for one that
	// fell silent.
	Stalled time.Duration
	Output  string // the last lines of its log
}

func (e *ProcessError) Error() string {
	var what string
	switch e.Reason {
	case ReasonHung:
		what = fmt.Sprintf("hung: %s, so tolaria killed its process group", e.Detail)
	case ReasonCrashed:
		what = "crashed: " + e.Detail
	case ReasonExit:
		what = "exited without an answer: " + e.Detail
	case ReasonProtocol:
		what = "broke the protocol: " + e.Detail
	default:
		what = e.Detail
	}
	if e.PID == 0 { // a scheduler's task: Path names it
		return fmt.Sprintf("the worker (%s) %s; its last output: %s", e.Path, what, orNone(e.Output))
	}
	return fmt.Sprintf("the worker %s (pid %d) %s; its last output: %s", e.Path, e.PID, what, orNone(e.Output))
}

// Is makes a hung worker ErrHung and every other failure ErrWorkerExited.
func (e *ProcessError) Is(target error) bool {
	if e.Reason == ReasonHung {
		return target == ErrHung
	}
	return target == ErrWorkerExited
}

// ProtocolFDEnv names the environment variable that tells a worker which
// file descriptor carries the protocol's output. Its standard output then
// goes to the coordinator's log, so a library printing there cannot break
// the protocol.
const ProtocolFDEnv = "TOLARIA_PROTOCOL_FD"

// limits are p's hello timeout, grace and heartbeat timeout, each its
// default where unset.
func (p *Process) limits() (hello, grace, beat time.Duration) {
	hello, grace, beat = p.HelloTimeout, p.Grace, p.HeartbeatTimeout
	if hello <= 0 {
		hello = DefaultHelloTimeout
	}
	if grace <= 0 {
		grace = DefaultGrace
	}
	if beat <= 0 {
		beat = DefaultHeartbeatTimeout
	}
	return hello, grace, beat
}

// Call starts the worker in a process group of its own, sends req and reads
// the answer. Every wait is bounded: for the hello (HelloTimeout), for each
// heartbeat once the worker has said hello (HeartbeatTimeout), for a
// cancelled worker (Grace, and three heartbeats of silence), for the exit
// once the request is over (exitTimeout) and for pipes that descendants
// hold (pipeDelay). A Stopper in ctx (see WithStopper) kills it at once.
// Whatever happens, the worker's whole process group is killed before Call
// returns. A failure of the process is a *ProcessError or a
// *NoAnswerError; a failure the worker reported is an *Error.
func (p *Process) Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error) {
	helloTimeout, grace, beatTimeout := p.limits()
	req.Heartbeat = HeartbeatInterval(beatTimeout)
	stopper := stopperOf(ctx)
	if !stopper.enter() {
		return Hello{}, nil, &ProcessError{Reason: ReasonKilled, Path: p.Path, Detail: "not started: every worker is being stopped"}
	}
	defer stopper.leave()

	var errTail tail
	var logs io.Writer = &errTail
	if p.Stderr != nil {
		logs = io.MultiWriter(&errTail, p.Stderr)
	}
	sp, err := p.start([]string{"serve"}, logs, func(pid int) {
		if p.Stderr != nil {
			// Before the copy starts, so the header leads this start's lines.
			fmt.Fprintf(p.Stderr, "=== %s tolaria-worker pid %d started: %s serve (%s)\n",
				time.Now().UTC().Format(time.RFC3339), pid, p.Path, req.Type)
		}
	})
	if err != nil {
		return Hello{}, nil, err
	}
	stdinW, protoR, logR, copied := sp.stdin, sp.proto, sp.logs, sp.copied
	w := sp.watchdog()
	w.seen()
	go w.wait()
	inner := sink
	inner.Hello = func(h Hello) {
		w.helloOnce.Do(func() { close(w.gotHello) })
		if sink.Hello != nil {
			sink.Hello(h)
		}
	}
	go w.watch(ctx, stopper.killed(), watchTimes{hello: helloTimeout, grace: grace, beat: beatTimeout, interval: req.Heartbeat}, nil)
	hello, res, convErr := converse(ctx, stdinW, protoR, req, inner, w.heard)
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
	return hello, res, w.failure(p.Path, reaped, convErr, errTail.String())
}

// spawned is a worker process started, and the coordinator's ends of its
// pipes: its standard input, the protocol's output and its logs (copied
// until copied is closed).
type spawned struct {
	cmd                *exec.Cmd
	stdin, proto, logs *os.File
	copied             chan struct{}
	reap               *reaped
	// enc and dec carry a kept worker's requests, one after another.
	enc *encoder
	dec *decoder
}

// reaped is a worker process's end: exited is closed once it is reaped,
// err being cmd.Wait's.
type reaped struct {
	exited chan struct{}
	err    error
}

// start starts the worker with args in a process group of its own, its
// logs copied to logs; started is called with its pid before the copy
// begins.
func (p *Process) start(args []string, logs io.Writer, started func(pid int)) (*spawned, error) {
	cmd := exec.Command(p.Path, args...)
	ownProcessGroup(cmd)
	// All the worker's pipes are files of ours, so Wait returns as soon as
	// the worker exits even if a descendant holds them; WaitDelay is a
	// second guard should exec ever copy through pipes of its own.
	cmd.WaitDelay = pipeDelay
	var pipes [3][2]*os.File // stdin, protocol, logs: read and write ends
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			for _, pp := range pipes[:i] {
				pp[0].Close()
				pp[1].Close()
			}
			return nil, err
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
		return nil, fmt.Errorf("worker %s: %w", p.Path, err)
	}
	started(cmd.Process.Pid)
	sp := &spawned{cmd: cmd, stdin: stdinW, proto: protoR, logs: logR, copied: make(chan struct{}), reap: &reaped{exited: make(chan struct{})}}
	go func() {
		defer close(sp.copied)
		_, _ = io.Copy(logs, logR)
	}()
	return sp, nil
}

// watchdog is a new watchdog of the process, for one request.
func (sp *spawned) watchdog() *watchdog {
	return &watchdog{cmd: sp.cmd, in: sp.stdin, out: []*os.File{sp.proto, sp.logs}, reap: sp.reap, gotHello: make(chan struct{})}
}

// failure says why a worker that did not answer failed.
func (w *watchdog) failure(path string, reaped bool, convErr error, output string) *ProcessError {
	e := &ProcessError{Path: path, PID: w.cmd.Process.Pid, Output: output}
	w.mu.Lock()
	reason, why, silent, stalled := w.reasonKind, w.why, w.silent, w.stalledFor
	w.mu.Unlock()
	status := "still running after SIGKILL"
	if reaped {
		status = "exit status 0"
		if w.reap.err != nil {
			status = w.reap.err.Error()
		}
	}
	var ee *exec.ExitError
	// A worker that exited before it read the whole request (not a
	// tolaria-worker, or one that failed at start-up) fails the write with
	// EPIPE: it ended, as one that closed its end after reading did.
	ended := errors.Is(convErr, io.EOF) || errors.Is(convErr, os.ErrDeadlineExceeded) || errors.Is(convErr, os.ErrClosed) ||
		reaped && errors.Is(convErr, syscall.EPIPE)
	switch {
	case reason != "": // tolaria killed it
		e.Reason, e.Detail, e.Silent, e.Stalled = reason, why, silent, stalled
		return e
	case !ended:
		e.Reason, e.Detail = ReasonProtocol, fmt.Sprintf("%v (%s)", convErr, status)
	case errors.As(w.reap.err, &ee) && !ee.Exited():
		e.Reason, e.Detail = ReasonCrashed, status
	default:
		e.Reason, e.Detail = ReasonExit, status
	}
	return e
}

// watchTimes are the bounds a watchdog enforces.
type watchTimes struct {
	hello, grace, beat, interval time.Duration
}

// watchdog kills a worker that never says hello (stuck in driver start-up),
// one that is cancelled before saying hello (nothing to save yet), one
// that falls silent (no heartbeat), one that ignores a cancellation for
// longer than the grace period, one that is aborted, and one that does
// not exit once its request is over. It kills the worker's process group,
// so a wrapper script's children go too.
type watchdog struct {
	liveness
	cmd        *exec.Cmd
	in         *os.File   // the coordinator's end of the worker's stdin
	out        []*os.File // the coordinator's ends of the protocol and log pipes
	reap       *reaped    // the process's end, shared by its requests' watchdogs
	gotHello   chan struct{}
	helloOnce  sync.Once
	why        string // guarded by liveness.mu
	reasonKind string
	silent     time.Duration
	stalledFor time.Duration
	helloLate  bool
}

// liveness is what a coordinator knows of a worker's signs of life: when
// it last spoke, and how its work counter moved. Both transports that
// watch a worker (a local process, a scheduler's task) judge it by it.
type liveness struct {
	lastSeen atomic.Int64 // unix nanoseconds of the last message
	mu       sync.Mutex
	work     progress // guarded by mu
}

// progress is what the watchdog knows of a worker's work counter.
type progress struct {
	watched bool      // the hello said it advances, and no answer has come yet
	count   uint64    // the counter of the last heartbeat
	stage   string    // what advanced last
	movedAt time.Time // when the counter last moved (or the hello came)
	beatAt  time.Time // when the last heartbeat came (or the hello)
}

// seen notes a message from the worker: it is alive.
func (w *liveness) seen() { w.lastSeen.Store(time.Now().UnixNano()) }

// heard notes a message from the worker: it is alive, and its heartbeat's
// work counter says whether its work moved. Once the worker has answered,
// its work is over and only silence counts.
func (w *liveness) heard(m Message) {
	w.seen()
	switch m.Type {
	case TypeHello:
		if m.Hello != nil && m.Hello.Advances {
			w.mu.Lock()
			now := time.Now()
			w.work = progress{watched: true, movedAt: now, beatAt: now}
			w.mu.Unlock()
		}
	case TypeBeat:
		w.mu.Lock()
		now := time.Now()
		if m.Work != w.work.count {
			w.work.count, w.work.movedAt = m.Work, now
		}
		w.work.beatAt = now
		if m.Stage != "" {
			w.work.stage = m.Stage
		}
		w.mu.Unlock()
	case TypeResult, TypeError:
		w.mu.Lock()
		w.work.watched = false
		w.mu.Unlock()
	}
}

// stalled is how long the watched work counter has stood still as the
// heartbeats saw it: from its last move to the last heartbeat (0 when it
// is not watched). A worker that falls silent stops this clock, so a
// stopped process is found by its silence, and a wedged one, whose
// heartbeats go on, by this.
func (w *liveness) stalled() (time.Duration, progress) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.work.watched {
		return 0, w.work
	}
	return max(w.work.beatAt.Sub(w.work.movedAt), 0), w.work
}

func (w *liveness) silence() time.Duration {
	return time.Since(time.Unix(0, w.lastSeen.Load()))
}

// wait reaps the worker, then kills what is left of its process group:
// descendants holding the protocol pipe would otherwise keep the
// coordinator reading.
func (w *watchdog) wait() {
	w.reap.err = w.cmd.Wait()
	killGroup(w.cmd)
	w.unblock()
	close(w.reap.exited)
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

// kill kills the process group for a reason (one of the Reason
// constants) and says why; the first reason is kept.
func (w *watchdog) kill(reason, why string) {
	w.mu.Lock()
	if w.why == "" {
		w.why, w.reasonKind = why, reason
		if reason == ReasonHung {
			w.silent = w.silence()
		}
	}
	w.mu.Unlock()
	killGroup(w.cmd)
	w.unblock()
}

// killedFor says why the watchdog killed the worker; "" when it did not.
func (w *watchdog) killedFor() string {
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
	case <-w.reap.exited:
		return true
	case <-t.C:
	}
	w.kill(ReasonKilled, fmt.Sprintf("killed by tolaria: still running %s after its request ended", exitTimeout))
	t.Reset(reapTimeout)
	select {
	case <-w.reap.exited:
		return true
	case <-t.C:
		return false
	}
}

// watch watches the worker until it is reaped or killed, or until over is
// closed (a kept worker's request is over; nil for a worker of one
// request).
func (w *watchdog) watch(ctx context.Context, abort <-chan struct{}, d watchTimes, over <-chan struct{}) {
	hello := time.NewTimer(d.hello)
	defer hello.Stop()
	select {
	case <-over:
		return
	case <-w.gotHello:
	case <-w.reap.exited:
		return
	case <-abort:
		w.kill(ReasonKilled, "killed by tolaria: stopped at once (a second interrupt)")
		return
	case <-ctx.Done():
		w.kill(ReasonKilled, "killed by tolaria: cancelled before the worker reported a device")
		return
	case <-hello.C:
		w.mu.Lock()
		w.helloLate = true
		w.mu.Unlock()
		w.kill(ReasonKilled, fmt.Sprintf("killed by tolaria: no hello within %s", d.hello))
		return
	}
	tick := time.NewTicker(max(d.interval/2, 5*time.Millisecond))
	defer tick.Stop()
	done := ctx.Done()
	var cancelled time.Time
	var graceEnd <-chan time.Time
	for {
		select {
		case <-over:
			return
		case <-w.reap.exited:
			return
		case <-abort:
			w.kill(ReasonKilled, "killed by tolaria: stopped at once (a second interrupt)")
			return
		case <-done:
			done, cancelled = nil, time.Now()
			g := time.NewTimer(d.grace)
			defer g.Stop()
			graceEnd = g.C
		case <-graceEnd:
			w.kill(ReasonKilled, fmt.Sprintf("killed by tolaria: still running %s after being cancelled", d.grace))
			return
		case <-tick.C:
			if why, stalled := w.hung(d, cancelled); why != "" {
				w.mu.Lock()
				if w.why == "" {
					w.stalledFor = stalled
				}
				w.mu.Unlock()
				w.kill(ReasonHung, why)
				return
			}
		}
	}
}

// hung says why a worker that has said hello is taken for hung, or ""
// while it is not: silent past the heartbeat timeout; alive but its work
// counter standing still that long (stalled says how long); or, once
// cancelled (at cancelled, zero before), silent for a few heartbeats.
func (w *liveness) hung(d watchTimes, cancelled time.Time) (why string, stalled time.Duration) {
	silent := w.silence()
	if silent >= d.beat {
		return fmt.Sprintf("no heartbeat for %s (heartbeat timeout %s): the process is stopped or wedged", silent.Round(time.Millisecond), d.beat), 0
	}
	if stalled, p := w.stalled(); stalled >= d.beat {
		return noProgress(stalled, silent, d.beat, p), stalled
	}
	// A cancelled worker is alive if it has spoken since the cancel, or
	// shortly before it; one stopped (SIGSTOP) is found within seconds
	// rather than after the grace period.
	if !cancelled.IsZero() && time.Since(cancelled) >= cancelSilence(d.interval) && silent >= cancelSilence(d.interval) {
		return fmt.Sprintf("no heartbeat for %s after it was asked to stop: the process is stopped or wedged", silent.Round(time.Millisecond)), 0
	}
	return "", 0
}

// noProgress says why a worker that still sends heartbeats was taken for
// hung.
func noProgress(stalled, silent, timeout time.Duration, p progress) string {
	last := "none since it said hello"
	if p.count > 0 {
		last = fmt.Sprintf("%s, advance %d", orNone(p.stage), p.count)
	}
	return fmt.Sprintf("alive (last heartbeat %s ago) but made no progress for %s (heartbeat timeout %s; last progress: %s): its work is wedged, in a deadlock or an endless loop",
		silent.Round(time.Millisecond), stalled.Round(time.Millisecond), timeout, last)
}

// Stopper lets a coordinator kill every worker process started under a
// context at once (a second interrupt) and wait until each is reaped, so
// that no worker outlives it. See WithStopper.
type Stopper struct {
	mu      sync.Mutex
	running int
	kill    chan struct{}
	once    sync.Once
}

// NewStopper makes a Stopper.
func NewStopper() *Stopper { return &Stopper{kill: make(chan struct{})} }

type stopperKey struct{}

// WithStopper returns a context under which every Process.Call is killed
// when s.KillAll is called.
func WithStopper(ctx context.Context, s *Stopper) context.Context {
	return context.WithValue(ctx, stopperKey{}, s)
}

func stopperOf(ctx context.Context) *Stopper {
	s, _ := ctx.Value(stopperKey{}).(*Stopper)
	return s
}

// KillAll kills every worker process running under s, and every one
// started later, with its process group.
func (s *Stopper) KillAll() { s.once.Do(func() { close(s.kill) }) }

// Wait waits, up to timeout, until no worker process runs under s (each
// killed one reaped and its Call returned), and reports whether that came.
func (s *Stopper) Wait(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		n := s.running
		s.mu.Unlock()
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// enter counts a worker in; false once KillAll has been called. A nil
// Stopper counts nothing.
func (s *Stopper) enter() bool {
	if s == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.kill:
		return false
	default:
	}
	s.running++
	return true
}

func (s *Stopper) leave() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
}

func (s *Stopper) killed() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.kill
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

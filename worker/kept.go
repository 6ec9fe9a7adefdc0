package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// KeepArg is the argument of tolaria-worker serve that keeps the worker
// for one request after another (serve --keep): it opens its device for
// the first job and keeps it, its graph pool and its driver context, for
// the next, until its input ends.
const KeepArg = "--keep"

// Kept is a tolaria-worker process kept for successive requests, one at
// a time: a sweep's trials of the same shape on one device slot, whose
// later captures the worker's graph pool then serves (see `tolaria sweep
// --reuse-workers`). The first Call starts the worker (serve --keep);
// each Call sends one request and reads its answer under the same bounds
// as Process.Call (hello, heartbeats, cancellation, grace); once the
// answer is in it sends TypeEnd and the worker waits for the next
// request. A worker that fails (hung, crashed, exited, broke the
// protocol) is killed with its process group, as Process.Call kills it,
// and the next Call starts a fresh one; so does one that died while
// idle. Close ends the worker. A Kept is safe for concurrent use; its
// calls take turns.
type Kept struct {
	// Process gives the binary, the bounds and the environment; its
	// Stderr receives the logs of every request not given a writer of its
	// own (see For).
	Process Process

	mu     sync.Mutex
	proc   *spawned
	logs   switchWriter
	starts int // processes started
	served int // requests the running process has answered
	closed bool
}

// ErrKeptClosed refuses a call on a closed Kept.
var ErrKeptClosed = errors.New("worker: the kept worker is closed")

// switchWriter writes to whichever writer the running call set. What
// the worker writes between calls (after an answer: its device check) is
// kept, up to maxBetween bytes, for the next call's writer.
type switchWriter struct {
	mu      sync.Mutex
	w       io.Writer
	between []byte
}

// maxBetween bounds what a kept worker's log keeps between two calls.
const maxBetween = 64 << 10

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w = w
	if w != nil && len(s.between) > 0 {
		_, _ = w.Write(s.between)
		s.between = nil
	}
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w != nil {
		_, _ = s.w.Write(p)
	} else if len(s.between)+len(p) <= maxBetween {
		s.between = append(s.between, p...)
	}
	return len(p), nil
}

// Starts is how many worker processes the Kept has started: 1 while one
// process served every request.
func (k *Kept) Starts() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.starts
}

// Call serves req on the kept worker, starting it first when none runs;
// its logs go to Process.Stderr.
func (k *Kept) Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error) {
	return k.call(ctx, req, sink, k.Process.Stderr)
}

// For is a transport of k whose requests' logs go to stderr (a trial's
// own log file) rather than to Process.Stderr.
func (k *Kept) For(stderr io.Writer) Transport { return keptFor{k, stderr} }

type keptFor struct {
	k      *Kept
	stderr io.Writer
}

func (f keptFor) Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error) {
	return f.k.call(ctx, req, sink, f.stderr)
}

func (k *Kept) call(ctx context.Context, req Request, sink Sink, stderr io.Writer) (Hello, json.RawMessage, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := &k.Process
	if k.closed {
		return Hello{}, nil, ErrKeptClosed
	}
	helloTimeout, grace, beatTimeout := p.limits()
	req.Heartbeat = HeartbeatInterval(beatTimeout)
	stopper := stopperOf(ctx)
	if !stopper.enter() {
		return Hello{}, nil, &ProcessError{Reason: ReasonKilled, Path: p.Path, Detail: "not started: every worker is being stopped"}
	}
	defer stopper.leave()

	var errTail tail
	if stderr != nil {
		k.logs.set(io.MultiWriter(&errTail, stderr))
	} else {
		k.logs.set(&errTail)
	}
	defer k.logs.set(nil)
	times := watchTimes{hello: helloTimeout, grace: grace, beat: beatTimeout, interval: req.Heartbeat}
	for retry := true; ; retry = false {
		hello, res, diedIdle, err := k.once(ctx, req, sink, stderr, &errTail, times, stopper)
		if diedIdle && retry {
			// The kept worker had died while idle, unnoticed until the
			// request went to it: no trial's failure; a fresh one serves
			// the request.
			errTail = tail{}
			continue
		}
		return hello, res, err
	}
}

// once sends req to the kept worker, starting one first when none runs;
// diedIdle says that the request failed on a worker kept from before that
// answered nothing to it: one that had died while idle. k.mu is held.
func (k *Kept) once(ctx context.Context, req Request, sink Sink, stderr io.Writer, errTail *tail, times watchTimes, stopper *Stopper) (hello Hello, res json.RawMessage, diedIdle bool, err error) {
	p := &k.Process
	if k.proc != nil && k.gone() {
		// It died while idle: its end is no trial's failure.
		k.stop()
	}
	reused := k.proc != nil
	if k.proc == nil {
		sp, err := p.start([]string{"serve", KeepArg}, &k.logs, func(pid int) {
			if stderr != nil {
				fmt.Fprintf(stderr, "=== %s tolaria-worker pid %d started: %s serve %s (%s)\n",
					time.Now().UTC().Format(time.RFC3339), pid, p.Path, KeepArg, req.Type)
			}
		})
		if err != nil {
			return Hello{}, nil, false, err
		}
		k.proc, k.starts, k.served = sp, k.starts+1, 0
		w := sp.watchdog()
		go w.wait()
		sp.enc, sp.dec = newEncoder(sp.stdin), newDecoder(sp.proto)
	} else if stderr != nil {
		fmt.Fprintf(stderr, "=== %s tolaria-worker pid %d kept: request %d (%s)\n",
			time.Now().UTC().Format(time.RFC3339), k.proc.cmd.Process.Pid, k.served+1, req.Type)
	}
	sp := k.proc
	w := sp.watchdog()
	w.seen()
	inner := sink
	inner.Hello = func(h Hello) {
		w.helloOnce.Do(func() { close(w.gotHello) })
		if sink.Hello != nil {
			sink.Hello(h)
		}
	}
	heard := false
	alive := func(m Message) {
		heard = true
		w.heard(m)
	}
	over, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		w.watch(ctx, stopper.killed(), times, over)
	}()
	hello, res, convErr := converseOn(ctx, sp.enc, sp.dec, req, inner, alive)
	close(over)
	<-watched
	var we *Error
	if convErr == nil || errors.As(convErr, &we) {
		k.served++
		if err := sp.enc.send(Message{Type: TypeEnd}); err != nil || w.killedFor() != "" {
			// Answered, but gone or killed since: the next call starts
			// afresh.
			k.stop()
		}
		return hello, res, false, convErr
	}
	sp.stdin.Close()
	reaped := w.awaitExit()
	k.closePipes(reaped)
	k.proc = nil
	diedIdle = reused && !heard && w.killedFor() == ""
	if w.noHello() {
		return hello, res, diedIdle, &NoAnswerError{Path: p.Path, After: times.hello, Output: errTail.String()}
	}
	return hello, res, diedIdle, w.failure(p.Path, reaped, convErr, errTail.String())
}

// gone reports whether the kept process has ended; k.mu is held.
func (k *Kept) gone() bool {
	select {
	case <-k.proc.reap.exited:
		return true
	default:
		return false
	}
}

// stop ends the kept process: its input closed (the worker exits), then
// reaped within exitTimeout or killed with its process group; k.mu is
// held.
func (k *Kept) stop() {
	if k.proc == nil {
		return
	}
	k.proc.stdin.Close()
	w := k.proc.watchdog()
	k.closePipes(w.awaitExit())
	k.proc = nil
}

func (k *Kept) closePipes(reaped bool) {
	if reaped {
		<-k.proc.copied // bounded: the logs' read deadline is set once the worker is reaped
	}
	k.proc.proto.Close()
	k.proc.logs.Close()
}

// Close ends the kept worker, if one runs: it closes its input, so the
// worker closes its device and exits, and reaps it (killing its process
// group if it does not exit in time). Later calls are refused.
func (k *Kept) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	k.stop()
	return nil
}

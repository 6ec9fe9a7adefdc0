package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Why a scheduler's task failed, in a ProcessError, besides the Reason
// constants of a local process.
const (
	ReasonCancelled = "cancelled"  // cancelled by someone else (scancel), or by the scheduler before it ran
	ReasonTimeLimit = "time_limit" // ended by the scheduler at its time limit
	ReasonNodeFail  = "node_fail"  // its node failed, or the scheduler lost it
)

// TaskPhase is where a scheduler's task is.
type TaskPhase int

// Task phases.
const (
	TaskPending TaskPhase = iota // queued, not started
	TaskRunning                  // started (or ending)
	TaskEnded                    // over, for whatever reason
)

// TaskState is what the scheduler says of a task.
type TaskState struct {
	Phase TaskPhase
	// Reason is, for an ended task, why it ended other than by finishing
	// (one of the Reason constants), or "" for a task that completed.
	Reason string
	// Detail is the scheduler's own words: its state and exit code.
	Detail string
	// Gone says the scheduler has no record of the task (it forgets ended
	// tasks after a while, and a task cancelled in the queue at once): it
	// has ended, but how is unknown.
	Gone bool
}

// Task is a worker that a scheduler runs (a Slurm array task).
type Task interface {
	// State asks the scheduler where the task is. It may answer from a
	// recent query shared with other tasks.
	State(ctx context.Context) (TaskState, error)
	// Cancel asks the scheduler to end the task (its worker gets SIGTERM,
	// then SIGKILL).
	Cancel() error
	// String names the task, e.g. "slurm job 12_3".
	String() string
}

// Remote is a transport to a worker that a scheduler starts, on any node
// that shares Dir with this process: the conversation goes through the
// spool in Dir (see SpoolIn), and the scheduler's word on the task stands
// in for a process's exit status. It enforces the bounds Process does,
// counted from the task's start rather than its submission (a task may
// wait in the queue for as long as the cluster is busy): the hello, the
// heartbeats, the grace of a cancelled worker; a task that ends without
// an answer is a *ProcessError whose reason says how it ended
// (ReasonCancelled, ReasonTimeLimit, ReasonNodeFail, ReasonExit). Whatever
// happens, the task has ended or been cancelled when Call returns.
type Remote struct {
	// Dir holds the spool; it must be on a filesystem the worker's node
	// shares.
	Dir string
	// Start submits (or claims) the task that serves Dir's spool. It runs
	// after the request is in the spool.
	Start func(ctx context.Context) (Task, error)
	// Log is the worker's log file (its standard error, written by the
	// scheduler's task), whose last lines an error carries.
	Log string
	// HelloTimeout, Grace and HeartbeatTimeout are as for Process; 0 means
	// the same defaults.
	HelloTimeout, Grace, HeartbeatTimeout time.Duration
	// Poll is how often the task's state is looked at (the spool, at most
	// every DefaultSpoolPoll); 0 means a second.
	Poll time.Duration
}

// endDrain is how long the answers of a task that has ended may take to
// show in the spool (a network filesystem's delay) before it counts as
// ended without an answer.
const endDrain = 3 * time.Second

// Call submits the task, sends req through the spool and reads the
// answer. A Stopper in ctx (see WithStopper) cancels the task at once.
func (r *Remote) Call(ctx context.Context, req Request, sink Sink) (Hello, json.RawMessage, error) {
	t := watchTimes{hello: r.HelloTimeout, grace: r.Grace, beat: r.HeartbeatTimeout}
	if t.hello <= 0 {
		t.hello = DefaultHelloTimeout
	}
	if t.grace <= 0 {
		t.grace = DefaultGrace
	}
	if t.beat <= 0 {
		t.beat = DefaultHeartbeatTimeout
	}
	t.interval = HeartbeatInterval(t.beat)
	req.Heartbeat = t.interval
	spoolPoll, statePoll := min(DefaultSpoolPoll, max(r.Poll, time.Millisecond)), r.Poll
	if statePoll <= 0 {
		spoolPoll, statePoll = DefaultSpoolPoll, time.Second
	}
	stopper := stopperOf(ctx)
	if !stopper.enter() {
		return Hello{}, nil, &ProcessError{Reason: ReasonKilled, Path: r.Dir, Detail: "not submitted: every worker is being stopped"}
	}
	defer stopper.leave()

	in, err := newSpool(r.Dir)
	if err != nil {
		return Hello{}, nil, fmt.Errorf("worker: preparing the spool: %w", err)
	}
	defer in.Close()
	task, err := r.Start(ctx)
	if err != nil {
		return Hello{}, nil, err
	}
	w := &remoteWatch{task: task, gotHello: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), quit: make(chan struct{})}
	w.seen()
	out := &follower{path: filepath.Join(r.Dir, SpoolOut), poll: spoolPoll, stop: w.stop}
	defer out.Close()
	inner := sink
	inner.Hello = func(h Hello) {
		w.helloOnce.Do(func() { close(w.gotHello) })
		if sink.Hello != nil {
			sink.Hello(h)
		}
	}
	go w.watch(ctx, stopper.killed(), t, statePoll)
	hello, res, convErr := converse(ctx, in, out, req, inner, w.heard)
	// The worker's input ends: it exits once it has answered.
	closeErr := closeSpool(r.Dir)
	w.finish()
	end := w.awaitEnd(ctx, statePoll, closeErr != nil)
	output := LogTail(r.Log)
	if convErr == nil && ctx.Err() == nil && end.Phase == TaskEnded && !end.Gone && end.Reason != "" && end.Reason != ReasonExit {
		// It answered, but because the scheduler ended it: a run stopped
		// by scancel or its time limit checkpoints and answers like one
		// stopped by tolaria. That is a failure of the attempt, with the
		// scheduler's reason.
		return hello, nil, &ProcessError{Reason: end.Reason, Path: task.String(), Output: output,
			Detail: fmt.Sprintf("ended by the scheduler (%s) after it answered", end.Detail)}
	}
	if convErr == nil {
		return hello, res, nil
	}
	var we *Error
	if errors.As(convErr, &we) {
		return hello, res, convErr
	}
	if w.noHello() {
		return hello, res, &NoAnswerError{Path: task.String(), After: t.hello, Output: output}
	}
	return hello, res, w.failure(task, convErr, end, output)
}

// remoteWatch watches a scheduler's task as watchdog watches a process.
type remoteWatch struct {
	liveness
	task      Task
	gotHello  chan struct{}
	helloOnce sync.Once
	stop      chan struct{} // closed to end the spool's reading
	stopOnce  sync.Once
	done      chan struct{} // closed when watch returns
	quit      chan struct{}
	quitOnce  sync.Once
	// guarded by liveness.mu
	reason, why string
	helloLate   bool
	cancelled   bool // Cancel was called
	last        TaskState
}

// fail ends the conversation for a reason, the first one kept, and
// cancels the task unless it has ended.
func (w *remoteWatch) fail(reason, why string, cancel bool) {
	w.mu.Lock()
	if w.why == "" {
		w.reason, w.why = reason, why
	}
	w.mu.Unlock()
	if cancel {
		w.cancel()
	}
	w.stopOnce.Do(func() { close(w.stop) })
}

func (w *remoteWatch) cancel() {
	w.mu.Lock()
	already := w.cancelled
	w.cancelled = true
	w.mu.Unlock()
	if !already {
		_ = w.task.Cancel()
	}
}

// spoke reports whether the worker has said hello: its task runs,
// whatever the scheduler last said.
func (w *remoteWatch) spoke() bool {
	select {
	case <-w.gotHello:
		return true
	default:
		return false
	}
}

func (w *remoteWatch) noHello() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.helloLate
}

// finish stops the watch once the conversation is over.
func (w *remoteWatch) finish() {
	w.quitOnce.Do(func() { close(w.quit) })
	<-w.done
}

// state asks the scheduler, keeping the last answer.
func (w *remoteWatch) state(ctx context.Context) (TaskState, bool) {
	st, err := w.task.State(ctx)
	if err != nil {
		return TaskState{}, false
	}
	w.mu.Lock()
	w.last = st
	w.mu.Unlock()
	return st, true
}

func (w *remoteWatch) watch(ctx context.Context, abort <-chan struct{}, d watchTimes, poll time.Duration) {
	quit := w.quit
	defer close(w.done)
	tick := time.NewTicker(min(poll, max(d.interval/2, 5*time.Millisecond)))
	defer tick.Stop()
	// Timers start once the task runs: before, it waits for the cluster.
	var runningSince, endedAt, cancelledAt time.Time
	done := ctx.Done()
	var lastState time.Time
	for {
		select {
		case <-quit:
			return
		case <-abort:
			w.fail(ReasonKilled, "cancelled by tolaria: stopped at once (a second interrupt)", true)
			return
		case <-done:
			done, cancelledAt = nil, time.Now()
		case <-tick.C:
		}
		if time.Since(lastState) >= poll {
			lastState = time.Now()
			if st, ok := w.state(ctx); ok {
				if st.Phase != TaskPending && runningSince.IsZero() {
					runningSince = time.Now()
					w.seen() // silence counts from the start
				}
				if st.Phase == TaskEnded && endedAt.IsZero() {
					endedAt = time.Now()
				}
			}
		}
		if runningSince.IsZero() && w.spoke() {
			// The worker spoke before the scheduler's answer said it runs.
			runningSince = time.Now()
		}
		if !endedAt.IsZero() {
			// Its last answers may still be on their way through the
			// filesystem.
			if time.Since(endedAt) >= endDrain {
				w.mu.Lock()
				st := w.last
				w.mu.Unlock()
				w.fail(orExit(st.Reason), "the task ended without an answer: "+st.Detail, false)
				return
			}
			continue
		}
		if runningSince.IsZero() {
			// Cancelled while queued: the scheduler's answer may be a poll
			// old, so a task that has just started is given two polls to
			// show it before it is cancelled with nothing to save.
			if !cancelledAt.IsZero() && time.Since(cancelledAt) >= 2*poll {
				w.fail(ReasonKilled, "cancelled by tolaria before the task started", true)
				return
			}
			continue
		}
		select {
		case <-w.gotHello:
		default:
			if time.Since(runningSince) >= d.hello {
				w.mu.Lock()
				w.helloLate = true
				w.mu.Unlock()
				w.fail(ReasonKilled, fmt.Sprintf("cancelled by tolaria: no hello within %s of the task's start", d.hello), true)
				return
			}
			// Cancelled while it runs but before its hello has come
			// through the spool: the hello may be a poll behind a worker
			// already at work, and the cancel is in its input, so it is
			// given the grace a worker that spoke gets to answer.
			if !cancelledAt.IsZero() && time.Since(cancelledAt) >= d.grace {
				w.fail(ReasonKilled, fmt.Sprintf("cancelled by tolaria: no hello within %s of being asked to stop", d.grace), true)
				return
			}
			continue
		}
		if !cancelledAt.IsZero() && time.Since(cancelledAt) >= d.grace {
			w.fail(ReasonKilled, fmt.Sprintf("cancelled by tolaria: still running %s after being asked to stop", d.grace), true)
			return
		}
		if why, _ := w.hung(d, cancelledAt); why != "" {
			w.fail(ReasonHung, why, true)
			return
		}
	}
}

// awaitEnd waits, bounded, for the task to end once the conversation is
// over, cancelling it (at once when cancelNow) if it does not; it returns
// the scheduler's last word.
func (w *remoteWatch) awaitEnd(ctx context.Context, poll time.Duration, cancelNow bool) TaskState {
	if cancelNow {
		w.cancel()
	}
	ctx = context.WithoutCancel(ctx)
	var last TaskState
	for _, limit := range []time.Duration{exitTimeout, reapTimeout} {
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(poll) {
			if st, ok := w.state(ctx); ok {
				last = st
				if st.Phase == TaskEnded {
					return st
				}
			}
		}
		w.cancel()
	}
	return last
}

func orExit(reason string) string {
	if reason == "" {
		return ReasonExit
	}
	return reason
}

// failure says why a task that did not answer failed.
func (w *remoteWatch) failure(task Task, convErr error, end TaskState, output string) *ProcessError {
	e := &ProcessError{Path: task.String(), Output: output}
	w.mu.Lock()
	reason, why := w.reason, w.why
	w.mu.Unlock()
	switch {
	case reason != "":
		e.Reason, e.Detail = reason, why
	case errors.Is(convErr, errSpoolStopped):
		e.Reason, e.Detail = orExit(end.Reason), "the task ended without an answer: "+orNone(end.Detail)
	default:
		e.Reason, e.Detail = ReasonProtocol, fmt.Sprintf("%v (%s)", convErr, orNone(end.Detail))
	}
	return e
}

// LogTail is the last lines of a worker's log file since its last start
// (the "=== " header line a transport writes before each), for error
// messages; "" when there is none.
func LogTail(path string) string {
	const maxBytes, maxLines = 8 << 10, 15
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-maxBytes, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	text := string(buf)
	if i := strings.LastIndex(text, "\n=== "); i >= 0 {
		if j := strings.IndexByte(text[i+1:], '\n'); j >= 0 {
			text = text[i+1+j+1:]
		}
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

package coordinator

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tolaria-ml/tolaria/worker"
)

// abortWait bounds how long a second signal waits for the worker
// processes to be killed and reaped before tolaria ends anyway (a process
// stuck in the kernel, in a GPU driver, may outlive SIGKILL), and then how
// long it waits for the run to report what it saved.
const abortWait = 10 * time.Second

// SameRequestWithin is how soon after the first signal the same signal
// again counts as the same request to stop, not a second one: timeout(1)
// sends its signal to tolaria and then to its process group, which holds
// tolaria too, and a script may send it to the process and to the group;
// so one stop arrives twice within microseconds to milliseconds. A person
// pressing Ctrl-C again takes longer than this.
const SameRequestWithin = 100 * time.Millisecond

// StopOnSignal returns a context that the first SIGINT or SIGTERM cancels,
// with the signal as its cause, so a run stops with a checkpoint. The same
// signal again within SameRequestWithin is the same request. A second
// signal after that (or another signal) kills every worker process started
// under the context (see worker.WithStopper) with its process group, waits
// until each is reaped, lets the run report what was and was not saved
// (until stop is called, for up to abortWait), then ends the process by
// that signal, as the default handling would: no worker outlives tolaria
// or writes to a run directory whose lock is gone. A third signal ends
// the process at once. stop releases the handler; call it in any case.
// After a second signal it does not return: the process ends by that
// signal.
func StopOnSignal(parent context.Context) (ctx context.Context, stop func()) {
	workers := worker.NewStopper()
	ctx, cancel := context.WithCancelCause(worker.WithStopper(parent, workers))
	sigs := make(chan os.Signal, 3)
	h := &signalHandler{sigs: sigs, done: make(chan struct{}), reported: make(chan struct{}), cancel: cancel,
		kill: workers.KillAll, reaped: func() { workers.Wait(abortWait) }, reportWait: abortWait, now: time.Now, end: endBy}
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go h.handle()
	return ctx, func() {
		if h.aborting.Load() {
			// The process ends by the second signal, once the workers
			// are reaped and the run has reported, not by an exit code of
			// its own.
			h.report.Do(func() { close(h.reported) })
			select {}
		}
		signal.Stop(sigs)
		close(h.done)
		cancel(nil)
	}
}

// signalHandler tells a first signal (stop with a checkpoint) from a
// second (stop at once).
type signalHandler struct {
	sigs     <-chan os.Signal
	done     chan struct{} // the handler is released
	reported chan struct{} // the run has reported after a second signal
	report   sync.Once
	aborting atomic.Bool
	cancel   context.CancelCauseFunc
	kill     func() // kills every worker process
	reaped   func() // returns once they are reaped, or it gave up
	// reportWait bounds the wait for reported.
	reportWait time.Duration
	now        func() time.Time
	end        func(os.Signal) // ends the process by the signal
}

func (h *signalHandler) handle() {
	var first os.Signal
	var at time.Time
	select {
	case first = <-h.sigs:
		at = h.now()
		if s, ok := first.(syscall.Signal); ok {
			h.cancel(stopSignal{s})
		} else {
			h.cancel(nil)
		}
	case <-h.done:
		return
	}
	for {
		select {
		case sig := <-h.sigs:
			if sig == first && h.now().Sub(at) < SameRequestWithin {
				continue // the first request, delivered again
			}
			h.abort(sig)
			return
		case <-h.done:
			return
		}
	}
}

// abort stops at once on sig: every worker is killed and reaped, the run
// reports, and the process ends by sig; a further signal ends it at once.
func (h *signalHandler) abort(sig os.Signal) {
	h.aborting.Store(true)
	h.kill()
	reaped := make(chan struct{})
	go func() {
		h.reaped()
		close(reaped)
	}()
	select {
	case <-reaped:
	case <-h.sigs:
		h.end(sig)
		return
	}
	// The run reads what its workers left (a learner killed before its
	// checkpoint) and says so before the process ends.
	t := time.NewTimer(h.reportWait)
	defer t.Stop()
	select {
	case <-h.reported:
	case <-t.C:
	case <-h.sigs:
	}
	h.end(sig)
}

// endBy ends the process by sig with the default handling, so that a
// shell reports the signal (130 for SIGINT).
func endBy(sig os.Signal) {
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Signal(sig)
	}
	time.Sleep(time.Second) // the signal is delivered meanwhile
	os.Exit(128 + int(sig.(syscall.Signal)))
}

// stopSignal is the cause of a context's cancellation on a signal.
type stopSignal struct{ sig syscall.Signal }

func (s stopSignal) Error() string { return "stopped by " + s.sig.String() }

// StoppedBy is the signal that stopped ctx (see StopOnSignal), if one did.
func StoppedBy(ctx context.Context) (syscall.Signal, bool) {
	var s stopSignal
	if errors.As(context.Cause(ctx), &s) {
		return s.sig, true
	}
	return 0, false
}

package coordinator

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tolaria-ml/tolaria/worker"
)

// abortWait bounds how long a second signal waits for the worker
// processes to be killed and reaped before tolaria ends anyway (a process
// stuck in the kernel, in a GPU driver, may outlive SIGKILL).
const abortWait = 10 * time.Second

// StopOnSignal returns a context that the first SIGINT or SIGTERM cancels,
// with the signal as its cause, so a run stops with a checkpoint. A second
// signal kills every worker process started under the context (see
// worker.WithStopper) with its process group, waits until each is reaped,
// then ends the process by that signal, as the default handling would:
// no worker outlives tolaria or writes to a run directory whose lock is
// gone. A third signal ends the process at once. stop releases the
// handler; call it in any case. After a second signal it does not return:
// the process ends by that signal.
func StopOnSignal(parent context.Context) (ctx context.Context, stop func()) {
	workers := worker.NewStopper()
	ctx, cancel := context.WithCancelCause(worker.WithStopper(parent, workers))
	sigs := make(chan os.Signal, 3)
	done := make(chan struct{})
	var aborting atomic.Bool
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			if s, ok := sig.(syscall.Signal); ok {
				cancel(stopSignal{s})
			} else {
				cancel(nil)
			}
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			aborting.Store(true)
			workers.KillAll()
			reaped := make(chan struct{})
			go func() {
				workers.Wait(abortWait)
				close(reaped)
			}()
			select {
			case <-reaped:
			case <-sigs:
			}
			endBy(sig)
		case <-done:
		}
	}()
	return ctx, func() {
		if aborting.Load() {
			// The process ends by the second signal, once the workers
			// are reaped, not by an exit code of its own.
			select {}
		}
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
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

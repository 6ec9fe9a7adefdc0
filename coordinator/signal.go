package coordinator

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

// StopOnSignal returns a context that the first SIGINT or SIGTERM cancels,
// with the signal as its cause, so a run stops with a checkpoint. After
// that signal the default handling is back, so a second one ends the
// process at once. stop releases the handler; call it in any case.
func StopOnSignal(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-sigs:
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			if s, ok := sig.(syscall.Signal); ok {
				cancel(stopSignal{s})
			} else {
				cancel(nil)
			}
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
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

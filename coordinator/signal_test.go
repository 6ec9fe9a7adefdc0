package coordinator

import (
	"context"
	"syscall"
	"testing"
	"time"
)

func TestFirstSignalStopsTheContext(t *testing.T) {
	ctx, stop := StopOnSignal(context.Background())
	defer stop()
	if _, ok := StoppedBy(ctx); ok {
		t.Fatal("a context no signal stopped reports a signal")
	}
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not stop the context")
	}
	if sig, ok := StoppedBy(ctx); !ok || sig != syscall.SIGTERM {
		t.Fatalf("StoppedBy = %v, %v; want SIGTERM", sig, ok)
	}
}

func TestStopReleasesTheHandler(t *testing.T) {
	ctx, stop := StopOnSignal(context.Background())
	stop()
	if ctx.Err() == nil {
		t.Fatal("stop left the context running")
	}
	if _, ok := StoppedBy(ctx); ok {
		t.Fatal("a stopped context reports a signal")
	}
}

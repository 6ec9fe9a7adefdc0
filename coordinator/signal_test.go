package coordinator

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
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

// handlerUnderTest is a signalHandler with a clock the test moves and
// its kills and end recorded.
type handlerUnderTest struct {
	*signalHandler
	ctx      context.Context
	sigs     chan os.Signal
	clock    atomic.Int64 // nanoseconds since the start
	kills    atomic.Int32
	ended    chan endRecord
	finished chan struct{}
}

type endRecord struct {
	sig      os.Signal
	reported bool // whether the run had reported when the process ended
}

func newHandlerUnderTest(t *testing.T) *handlerUnderTest {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	u := &handlerUnderTest{ctx: ctx, sigs: make(chan os.Signal), ended: make(chan endRecord, 1), finished: make(chan struct{})}
	start := time.Unix(0, 0)
	u.signalHandler = &signalHandler{sigs: u.sigs, done: make(chan struct{}), reported: make(chan struct{}), cancel: cancel,
		kill: func() { u.kills.Add(1) }, reaped: func() {}, reportWait: time.Hour,
		now: func() time.Time { return start.Add(time.Duration(u.clock.Load())) }}
	u.end = func(sig os.Signal) {
		rec := endRecord{sig: sig}
		select {
		case <-u.reported:
			rec.reported = true
		default:
		}
		u.ended <- rec
	}
	go func() {
		defer close(u.finished)
		u.handle()
	}()
	return u
}

// release ends the handler (a run that ended) and waits until it has.
func (u *handlerUnderTest) release() {
	close(u.done)
	<-u.finished
}

// TestSignalRepeatedAtOnceIsOneRequest: timeout(1) delivers its SIGINT
// twice (to tolaria, then to its process group) within microseconds: the
// run stops with a checkpoint as for one signal; nothing is killed.
func TestSignalRepeatedAtOnceIsOneRequest(t *testing.T) {
	u := newHandlerUnderTest(t)
	u.sigs <- syscall.SIGINT
	u.clock.Store(int64(SameRequestWithin / 10))
	u.sigs <- syscall.SIGINT // taken by the handler once this send returns
	u.sigs <- syscall.SIGINT
	u.release()
	if sig, ok := StoppedBy(u.ctx); !ok || sig != syscall.SIGINT {
		t.Fatalf("StoppedBy = %v, %v; want SIGINT", sig, ok)
	}
	if n := u.kills.Load(); n != 0 {
		t.Fatalf("a signal repeated within %s killed the workers (%d times): one request counted as two", SameRequestWithin, n)
	}
	select {
	case rec := <-u.ended:
		t.Fatalf("a signal repeated within %s ended the process by %v", SameRequestWithin, rec.sig)
	default:
	}
}

// TestSecondSignalStopsAtOnceAfterTheReport: a second Ctrl-C, later than
// SameRequestWithin, or another signal at once, kills every worker, and
// the process ends by it once the run has reported what it saved.
func TestSecondSignalStopsAtOnceAfterTheReport(t *testing.T) {
	for _, c := range []struct {
		name          string
		first, second syscall.Signal
		after         time.Duration
	}{
		{"a second Ctrl-C", syscall.SIGINT, syscall.SIGINT, SameRequestWithin},
		{"a second Ctrl-C much later", syscall.SIGINT, syscall.SIGINT, time.Minute},
		{"SIGTERM after SIGINT at once", syscall.SIGINT, syscall.SIGTERM, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newHandlerUnderTest(t)
			u.sigs <- c.first
			u.clock.Store(int64(c.after))
			u.sigs <- c.second
			// The run reports (stop is called) once its workers were
			// killed.
			for u.kills.Load() == 0 {
				runtime.Gosched()
			}
			u.report.Do(func() { close(u.reported) })
			rec := <-u.ended
			<-u.finished
			if rec.sig != c.second || !rec.reported {
				t.Fatalf("the process ended by %v (the run had reported: %v); want %v, after the report", rec.sig, rec.reported, c.second)
			}
			if sig, _ := StoppedBy(u.ctx); sig != c.first {
				t.Fatalf("StoppedBy = %v; want the first signal, %v", sig, c.first)
			}
		})
	}
}

// TestThirdSignalEndsAtOnce: while the run reports after a second
// signal, a third ends the process without waiting for the report.
func TestThirdSignalEndsAtOnce(t *testing.T) {
	u := newHandlerUnderTest(t)
	u.sigs <- syscall.SIGINT
	u.clock.Store(int64(time.Second))
	u.sigs <- syscall.SIGINT
	u.sigs <- syscall.SIGINT
	rec := <-u.ended
	<-u.finished
	if rec.sig != syscall.SIGINT || rec.reported || u.kills.Load() != 1 {
		t.Fatalf("after a third signal: ended by %v, reported %v, %d kills; want SIGINT at once, after one kill", rec.sig, rec.reported, u.kills.Load())
	}
}

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
	"testing"
	"time"
)

// fakeTask is a scheduler's task served by a goroutine: it waits in the
// queue for pending, then serves the spool with serve; Cancel ends it as
// SIGKILL would (its reads stop), and it ends with the reason the test
// gives, or ReasonCancelled when cancelled.
type fakeTask struct {
	dir     string
	pending time.Duration
	serve   func(ctx context.Context, in io.Reader, out io.Writer) error
	endAs   string // the reason it ends with when not cancelled

	mu        sync.Mutex
	phase     TaskPhase
	cancelled bool
	kill      chan struct{}
	killOnce  sync.Once
	ended     chan struct{}
	states    int
}

func (f *fakeTask) start(context.Context) (Task, error) {
	f.kill, f.ended = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(f.ended)
		select {
		case <-time.After(f.pending):
		case <-f.kill:
			f.end()
			return
		}
		f.mu.Lock()
		f.phase = TaskRunning
		f.mu.Unlock()
		in := &follower{path: filepath.Join(f.dir, SpoolIn), closed: filepath.Join(f.dir, SpoolClosed), poll: 5 * time.Millisecond, stop: f.kill}
		out, err := os.OpenFile(filepath.Join(f.dir, SpoolOut), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_ = f.serve(context.Background(), in, out)
			out.Close()
		}
		in.Close()
		f.end()
	}()
	return f, nil
}

func (f *fakeTask) end() {
	f.mu.Lock()
	f.phase = TaskEnded
	f.mu.Unlock()
}

func (f *fakeTask) State(context.Context) (TaskState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states++
	st := TaskState{Phase: f.phase}
	if f.phase == TaskEnded {
		st.Reason, st.Detail = f.endAs, "ENDED"
		if f.cancelled {
			st.Reason, st.Detail = ReasonCancelled, "CANCELLED"
		}
	}
	return st, nil
}

func (f *fakeTask) Cancel() error {
	f.mu.Lock()
	f.cancelled = f.phase != TaskEnded
	f.mu.Unlock()
	f.killOnce.Do(func() { close(f.kill) })
	return nil
}

func (f *fakeTask) String() string { return "fake task" }

func (f *fakeTask) wasCancelled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancelled
}

func remote(f *fakeTask) *Remote {
	return &Remote{Dir: f.dir, Start: f.start, Poll: 10 * time.Millisecond, HelloTimeout: time.Second, HeartbeatTimeout: time.Second}
}

// TestRemoteCarriesTheConversation: through the spool the worker's answers
// arrive in order, the result comes back, and the task, let go, ends by
// itself; its time in the queue (longer than the hello timeout) is not
// counted against its start-up.
func TestRemoteCarriesTheConversation(t *testing.T) {
	f := &fakeTask{dir: t.TempDir(), pending: 1500 * time.Millisecond, serve: echo}
	var g got
	_, res, err := remote(f).Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"x":1}`)}, g.sink())
	if err != nil {
		t.Fatal(err)
	}
	<-f.ended
	want := []string{"hello cpu", `epoch {"epoch":1}`, `progress {"step":1}`, "log halfway"}
	if string(res) != `{"x":1}` || strings.Join(g.answers, "|") != strings.Join(want, "|") || f.wasCancelled() {
		t.Fatalf("result %s, answers %q, cancelled %v; want the body back, %q, and a task that ended by itself", res, g.answers, f.wasCancelled(), want)
	}
}

// TestRemoteTaskEndedWithoutAnswer: a task that ends without answering
// (its node failed) is a ProcessError with the scheduler's reason.
func TestRemoteTaskEndedWithoutAnswer(t *testing.T) {
	f := &fakeTask{dir: t.TempDir(), endAs: ReasonNodeFail, serve: func(ctx context.Context, in io.Reader, out io.Writer) error {
		conn, err := Accept(in, out)
		if err != nil {
			return err
		}
		return conn.Hello(Hello{Device: "cpu"})
	}}
	_, _, err := remote(f).Call(context.Background(), Request{Type: TypeStart, Device: "cpu"}, Sink{})
	var pe *ProcessError
	if !errors.As(err, &pe) || pe.Reason != ReasonNodeFail || !errors.Is(err, ErrWorkerExited) {
		t.Fatalf("a task that ended without an answer: %v; want a ProcessError of reason %s", err, ReasonNodeFail)
	}
}

// TestRemoteCancelledByTheScheduler: a worker that the scheduler stops
// (scancel) answers, as one stopped by tolaria does, but the attempt is a
// failure with reason cancelled.
func TestRemoteCancelledByTheScheduler(t *testing.T) {
	f := &fakeTask{dir: t.TempDir()}
	f.serve = func(ctx context.Context, in io.Reader, out io.Writer) error {
		go func() {
			time.Sleep(100 * time.Millisecond)
			f.mu.Lock()
			f.cancelled = true
			f.mu.Unlock()
		}()
		return echo(ctx, in, out)
	}
	_, _, err := remote(f).Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"busy_ms":300}`)}, Sink{})
	var pe *ProcessError
	if !errors.As(err, &pe) || pe.Reason != ReasonCancelled {
		t.Fatalf("a task cancelled by the scheduler: %v; want a ProcessError of reason %s", err, ReasonCancelled)
	}
}

// TestRemoteSilentWorkerIsHung: a worker that says hello, then falls
// silent, is taken for hung after the heartbeat timeout and its task is
// cancelled.
func TestRemoteSilentWorkerIsHung(t *testing.T) {
	f := &fakeTask{dir: t.TempDir()}
	f.serve = func(ctx context.Context, in io.Reader, out io.Writer) error {
		conn, err := Accept(in, out)
		if err != nil {
			return err
		}
		if err := conn.Hello(Hello{Device: "cpu"}); err != nil {
			return err
		}
		<-f.kill // no heartbeat, no answer, until cancelled
		return nil
	}
	_, _, err := remote(f).Call(context.Background(), Request{Type: TypeStart, Device: "cpu"}, Sink{})
	if !errors.Is(err, ErrHung) || !f.wasCancelled() {
		t.Fatalf("a silent worker: %v, task cancelled %v; want hung and cancelled", err, f.wasCancelled())
	}
	<-f.ended
}

// TestRemoteInterruptedWhilePending: cancelling the call while the task
// waits in the queue cancels the task at once.
func TestRemoteInterruptedWhilePending(t *testing.T) {
	f := &fakeTask{dir: t.TempDir(), pending: time.Hour, serve: echo}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, _, err := remote(f).Call(ctx, Request{Type: TypeStart, Device: "cpu"}, Sink{})
	var pe *ProcessError
	if !errors.As(err, &pe) || pe.Reason != ReasonKilled || !f.wasCancelled() {
		t.Fatalf("interrupted while pending: %v, cancelled %v", err, f.wasCancelled())
	}
	<-f.ended
}

// TestRemoteInterruptedWhileRunning: cancelling the call sends cancel
// through the spool; the worker answers and its task ends by itself.
func TestRemoteInterruptedWhileRunning(t *testing.T) {
	f := &fakeTask{dir: t.TempDir(), serve: echo}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, res, err := remote(f).Call(ctx, Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"wait":true}`)}, Sink{})
	if err != nil || string(res) != `{"cancelled":true}` || f.wasCancelled() {
		t.Fatalf("interrupted while running: %s, %v, task cancelled %v; want the worker's answer and no scancel", res, err, f.wasCancelled())
	}
	<-f.ended
}

// TestRemoteInterruptedBeforeItsHelloArrives: a task that runs but whose
// hello has not come through the spool when the call is cancelled is not
// cancelled on the spot: it reads the cancel, answers, and ends by itself
// (its work, a checkpoint say, is not lost to a poll's lag).
func TestRemoteInterruptedBeforeItsHelloArrives(t *testing.T) {
	f := &fakeTask{dir: t.TempDir(), serve: func(ctx context.Context, in io.Reader, out io.Writer) error {
		time.Sleep(400 * time.Millisecond)
		return echo(ctx, in, out)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, res, err := remote(f).Call(ctx, Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"wait":true}`)}, Sink{})
	if err != nil || string(res) != `{"cancelled":true}` || f.wasCancelled() {
		t.Fatalf("interrupted before the hello arrived: %s, %v, task cancelled %v; want the worker's answer and no scancel", res, err, f.wasCancelled())
	}
	<-f.ended
}

// TestFollowerSeesAppendsAndTheEnd: the follower returns what is appended
// as it comes, and EOF only once the closed marker exists.
func TestFollowerSeesAppendsAndTheEnd(t *testing.T) {
	dir := t.TempDir()
	in, err := newSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	r, _, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		for _, s := range []string{"one\n", "two\n"} {
			time.Sleep(50 * time.Millisecond)
			_, _ = in.WriteString(s)
		}
		_ = closeSpool(dir)
	}()
	all, err := io.ReadAll(r)
	if err != nil || string(all) != "one\ntwo\n" {
		t.Fatalf("followed %q, %v; want both lines then EOF", all, err)
	}
	if _, _, err := OpenSpool(t.TempDir()); err == nil || !strings.Contains(err.Error(), SpoolIn) {
		t.Fatalf("a spool without a request: %v", err)
	}
}

// TestAnsweredWorkerLetsGoByItself: a worker that has answered ends once
// its let-go time has passed, though the coordinator never closes the
// spool (it died): its task must not hold its node.
func TestAnsweredWorkerLetsGoByItself(t *testing.T) {
	dir := t.TempDir()
	in, err := newSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	start, _ := json.Marshal(Message{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"x":1}`)})
	if _, err := in.Write(append(start, '\n')); err != nil {
		t.Fatal(err)
	}
	f := &follower{path: filepath.Join(dir, SpoolIn), closed: filepath.Join(dir, SpoolClosed), poll: 5 * time.Millisecond, letGo: 200 * time.Millisecond}
	out, err := os.OpenFile(filepath.Join(dir, SpoolOut), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	served := make(chan error, 1)
	go func() { served <- echo(context.Background(), f, out) }()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not end after answering, without the coordinator's let-go")
	}
	raw, _ := os.ReadFile(filepath.Join(dir, SpoolOut))
	if !strings.Contains(string(raw), `"type":"result"`) {
		t.Fatalf("no result in the spool:\n%s", raw)
	}
}

// TestLogTailIsTheLastStartsEnd: a failure reported by the worker carries
// the last lines of worker.log since the worker's own start, not an
// earlier worker's.
func TestLogTailIsTheLastStartsEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.log")
	var b strings.Builder
	b.WriteString("=== 2026-01-01T00:00:00Z tolaria-worker pid 1 started: w serve (start)\nfirst worker's line\n")
	b.WriteString("=== 2026-01-01T00:01:00Z tolaria-worker pid 2 started: w serve (start)\n")
	for i := range 20 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(LogTail(path), "\n")
	if len(got) != 15 || got[0] != "line 5" || got[14] != "line 19" {
		t.Fatalf("tail %q", got)
	}
	if LogTail(filepath.Join(t.TempDir(), "none")) != "" {
		t.Fatal("a missing log has a tail")
	}
}

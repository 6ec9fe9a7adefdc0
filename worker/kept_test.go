//go:build unix

package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// keptCall sends body to a kept echo worker and returns the pid its hello
// gave, the result and the error.
func keptCall(t Transport, body string) (int, json.RawMessage, error) {
	pid := 0
	sink := Sink{Hello: func(h Hello) { pid = h.PID }}
	_, res, err := t.Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(body)}, sink)
	return pid, res, err
}

// TestKeptServesRequestsInOneProcess: a kept worker answers successive
// requests from one process (the same pid in every hello), its
// reported failures included, each request's log header going to that
// request's writer; a worker that crashes during a request fails that
// request and the next starts a fresh process; one killed while idle is
// replaced without failing anything; Close ends the process and refuses
// later calls.
func TestKeptServesRequestsInOneProcess(t *testing.T) {
	k := &Kept{Process: Process{Path: echoWorker(t), HelloTimeout: time.Minute}}
	defer k.Close()
	first, res, err := keptCall(k, `{"n":1}`)
	if err != nil || string(res) != `{"n":1}` || first == 0 {
		t.Fatalf("first request: pid %d, result %s, %v", first, res, err)
	}
	var log bytes.Buffer
	pid, res, err := keptCall(k.For(&log), `{"n":2}`)
	if err != nil || string(res) != `{"n":2}` || pid != first {
		t.Fatalf("second request: pid %d (first %d), result %s, %v; want the same process", pid, first, res, err)
	}
	if !strings.Contains(log.String(), "kept: request 2") {
		t.Fatalf("the second request's log says %q, want its kept header", log.String())
	}
	_, _, err = k.Call(context.Background(), Request{Type: TypeStart, Device: "cuda"}, Sink{})
	if we := (*Error)(nil); !errors.As(err, &we) || we.Kind != KindNoDevice {
		t.Fatalf("a request the worker refuses: %v, want its *Error", err)
	}
	if pid, _, err = keptCall(k, `{"n":3}`); err != nil || pid != first || k.Starts() != 1 {
		t.Fatalf("after a refused request: pid %d (first %d), %d starts, %v; want the same process", pid, first, k.Starts(), err)
	}

	_, _, err = keptCall(k, `{"crash":true}`)
	requireReason(t, err, ReasonCrashed, ErrWorkerExited)
	requireGone(t, first)
	second, res, err := keptCall(k, `{"n":4}`)
	if err != nil || string(res) != `{"n":4}` || second == first || k.Starts() != 2 {
		t.Fatalf("after a crash: pid %d (crashed %d), %d starts, result %s, %v; want a fresh process", second, first, k.Starts(), res, err)
	}

	if err := syscall.Kill(second, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	requireGone(t, second)
	third, res, err := keptCall(k, `{"n":5}`)
	if err != nil || string(res) != `{"n":5}` || third == second || k.Starts() != 3 {
		t.Fatalf("after the idle worker was killed: pid %d (killed %d), %d starts, result %s, %v; want a fresh process and no failure",
			third, second, k.Starts(), res, err)
	}

	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	requireGone(t, third)
	if _, _, err := keptCall(k, `{"n":6}`); !errors.Is(err, ErrKeptClosed) {
		t.Fatalf("a call after Close: %v, want ErrKeptClosed", err)
	}
}

// TestKeptCancelEndsOnlyTheRequest: a cancelled request of a kept worker
// answers as a cancelled request does, and the same process serves the
// next one.
func TestKeptCancelEndsOnlyTheRequest(t *testing.T) {
	k := &Kept{Process: Process{Path: echoWorker(t), HelloTimeout: time.Minute}}
	defer k.Close()
	ctx, cancel := context.WithCancel(context.Background())
	pid := 0
	sink := Sink{Hello: func(h Hello) { pid = h.PID; cancel() }}
	_, res, err := k.Call(ctx, Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(`{"wait":true}`)}, sink)
	if err != nil || string(res) != `{"cancelled":true}` {
		t.Fatalf("cancelled request: result %s, %v", res, err)
	}
	next, res, err := keptCall(k, `{"n":1}`)
	if err != nil || string(res) != `{"n":1}` || next != pid || k.Starts() != 1 {
		t.Fatalf("after a cancelled request: pid %d (was %d), %d starts, result %s, %v; want the same process", next, pid, k.Starts(), res, err)
	}
}

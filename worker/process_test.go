//go:build unix

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The sleeps of the misbehaving workers are far longer than any bound a
// test asserts, so a test that passes did not wait for them.
const (
	longSleep = "300"
	returnsIn = 30 * time.Second
)

// script writes an executable shell script; %[1]s in body is a file for
// the script to write a pid to.
func script(t *testing.T, name, body string) (path, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	path, pidFile = filepath.Join(dir, name), filepath.Join(dir, name+".pid")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+fmt.Sprintf(body, pidFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, pidFile
}

// readPID waits for the script to have written its pid file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(returnsIn)
	for {
		raw, err := os.ReadFile(file)
		if s := strings.TrimSpace(string(raw)); err == nil && strings.HasSuffix(string(raw), "\n") {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("pid file %s: %q", file, raw)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the script did not write %s", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether pid is a live process (a zombie waiting for its
// reaper counts as gone).
func alive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// pid (comm) STATE ...; comm may hold spaces and parentheses.
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// requireGone fails unless pid is dead (killed by the client, not by the
// test, which kills it afterwards either way).
func requireGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(returnsIn)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d was left behind", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// timed runs f and fails if it takes returnsIn or longer.
func timed(t *testing.T, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if d := time.Since(start); d >= returnsIn {
		t.Fatalf("%s took %s: it waited for the worker's sleep", what, d)
	}
}

func requireNoAnswer(t *testing.T, err error, path string) {
	t.Helper()
	var na *NoAnswerError
	if !errors.As(err, &na) || !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrWorkerExited) {
		t.Fatalf("want a NoAnswerError, got %v", err)
	}
	msg := Unavailable(path, err)
	for _, want := range []string{path, "started but did not answer within 1s", "--device cpu"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Unavailable does not say %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "exited") {
		t.Errorf("a worker that did not answer is said to have exited: %s", msg)
	}
}

// TestHangingScriptWorker: a wrapper script that runs its worker (here a
// sleep) as a child instead of exec'ing it. The shell and the child both
// hold the pipes; both must be killed when the hello does not come.
func TestHangingScriptWorker(t *testing.T) {
	path, pidFile := script(t, "hanging-worker", "echo 'starting the driver' >&2\nsleep "+longSleep+" &\necho $! > %[1]s\nwait $!\n")
	p := &Process{Path: path, HelloTimeout: time.Second}
	var err error
	timed(t, "Probe", func() { _, err = p.Probe(context.Background(), "cuda") })
	requireNoAnswer(t, err, path)
	if !strings.Contains(err.Error(), "starting the driver") {
		t.Errorf("the error does not carry the worker's output: %v", err)
	}
	requireGone(t, readPID(t, pidFile))
}

// TestHangingExecWorker: the worker process itself hangs.
func TestHangingExecWorker(t *testing.T) {
	path, pidFile := script(t, "exec-worker", "echo $$ > %[1]s\nexec sleep "+longSleep+"\n")
	p := &Process{Path: path, HelloTimeout: time.Second}
	var err error
	timed(t, "Call", func() {
		_, _, err = p.Call(context.Background(), Request{Type: TypeStart, Device: "cuda", Body: json.RawMessage(`{}`)}, Sink{})
	})
	requireNoAnswer(t, err, path)
	requireGone(t, readPID(t, pidFile))
}

// TestWorkerExitingAtOnce: a worker that exits at start-up, as a CUDA
// build does without a GPU, keeps the "exited" message, and returns at
// once even though a child it left behind holds the pipes.
func TestWorkerExitingAtOnce(t *testing.T) {
	path, pidFile := script(t, "dying-worker", "sleep "+longSleep+" &\necho $! > %[1]s\necho 'cuInit failed: no CUDA-capable device is detected' >&2\nexit 1\n")
	p := &Process{Path: path} // the default hello timeout: the exit is noticed first
	var err error
	timed(t, "Probe", func() { _, err = p.Probe(context.Background(), "cuda") })
	if !errors.Is(err, ErrWorkerExited) || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("want ErrWorkerExited, got %v", err)
	}
	msg := Unavailable(path, err)
	for _, want := range []string{"exited at start-up", "cuInit failed", "--device cpu"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Unavailable does not say %q: %s", want, msg)
		}
	}
	requireGone(t, readPID(t, pidFile))
}

// TestProgramThatReadsNothingExited: a program that exits without reading
// its request (here /bin/true, given as --worker by mistake, with a
// request larger than a pipe holds, so the write fails) exited without an
// answer; it did not break the protocol.
func TestProgramThatReadsNothingExited(t *testing.T) {
	p := &Process{Path: "/bin/true"}
	body := json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)
	_, _, err := p.Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: body}, Sink{})
	var pe *ProcessError
	if !errors.As(err, &pe) || pe.Reason != ReasonExit || !strings.Contains(err.Error(), "exited without an answer: exit status 0") {
		t.Fatalf("got %v; want the worker to have exited without an answer", err)
	}
}

// TestEscapedDescendantCannotHoldTheCoordinator: a descendant that left
// the worker's process group (and so cannot be killed with it) keeps the
// pipes open; the coordinator still returns.
func TestEscapedDescendantCannotHoldTheCoordinator(t *testing.T) {
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Skip("no setsid")
	}
	path, pidFile := script(t, "escaping-worker", setsid+" sleep "+longSleep+" &\necho $! > %[1]s\nexit 1\n")
	p := &Process{Path: path, HelloTimeout: time.Minute}
	timed(t, "Probe", func() { _, err = p.Probe(context.Background(), "cuda") })
	pid := readPID(t, pidFile)
	_ = syscall.Kill(pid, syscall.SIGKILL) // out of the client's reach by design
	if !errors.Is(err, ErrWorkerExited) || errors.Is(err, ErrNoAnswer) {
		t.Fatalf("want ErrWorkerExited, got %v", err)
	}
}

// TestCancelBeforeHelloKillsTheGroup: cancelling during start-up does not
// wait for the hello timeout.
func TestCancelBeforeHelloKillsTheGroup(t *testing.T) {
	path, pidFile := script(t, "hanging-worker", "sleep "+longSleep+" &\necho $! > %[1]s\nwait $!\n")
	p := &Process{Path: path, HelloTimeout: 10 * time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	timed(t, "Probe", func() {
		go func() {
			for start := time.Now(); time.Since(start) < returnsIn; time.Sleep(10 * time.Millisecond) {
				if raw, _ := os.ReadFile(pidFile); strings.HasSuffix(string(raw), "\n") {
					break
				}
			}
			cancel()
		}()
		_, err = p.Probe(ctx, "cuda")
	})
	if !errors.Is(err, ErrWorkerExited) || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("want a cancelled worker, got %v", err)
	}
	requireGone(t, readPID(t, pidFile))
}

// TestWorkerThatDoesNotExitAfterItsAnswer: the probe's answer counts, and
// the worker that stays is killed with its children.
func TestWorkerThatDoesNotExitAfterItsAnswer(t *testing.T) {
	hello := `{"type":"hello","hello":{"device":"cuda:0","description":"fake","build":"cuda","pid":1}}`
	path, pidFile := script(t, "lingering-worker", "echo '"+hello+"' >&3\nsleep "+longSleep+" &\necho $! > %[1]s\nwait $!\n")
	p := &Process{Path: path, HelloTimeout: time.Second}
	var h Hello
	var err error
	timed(t, "Probe", func() { h, err = p.Probe(context.Background(), "cuda") })
	if err != nil || h.Device != "cuda:0" {
		t.Fatalf("hello %+v, %v", h, err)
	}
	requireGone(t, readPID(t, pidFile))
}

// TestSubprocessWorker: a real worker process (this test binary, serving
// echo) behind a wrapper script answers a probe and a request through the
// process group and pipes set up here, and exits by itself.
func TestSubprocessWorker(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path, pidFile := script(t, "worker", "echo $$ > %[1]s\n"+serveAsWorkerEnv+"=1 exec '"+exe+"' \"$@\"\n")
	p := &Process{Path: path, HelloTimeout: time.Minute}
	var h Hello
	timed(t, "Probe", func() { h, err = p.Probe(context.Background(), "cpu") })
	if err != nil || h.Device != "cpu" || h.Build != "cpu" {
		t.Fatalf("probe: hello %+v, %v", h, err)
	}
	requireGone(t, readPID(t, pidFile))
	_, err = p.Probe(context.Background(), "cuda")
	var we *Error
	if !errors.As(err, &we) || we.Kind != KindNoDevice {
		t.Fatalf("probe for cuda: %v", err)
	}
	var g got
	body := json.RawMessage(`{"epochs":2}`)
	_, res, err := p.Call(context.Background(), Request{Type: TypeStart, Device: "cpu", Body: body}, g.sink())
	if err != nil || string(res) != string(body) || len(g.answers) != 4 {
		t.Fatalf("request: result %s, answers %q, %v", res, g.answers, err)
	}
	requireGone(t, readPID(t, pidFile))
}

// echoWorker is a wrapper script exec'ing this test binary as an echo
// worker (see serveAsWorker): the worker's pid is the script's.
func echoWorker(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path, _ := script(t, "worker", serveAsWorkerEnv+"=1 exec '"+exe+"' \"$@\"\n")
	return path
}

// callEcho sends body to an echo worker; onHello gets the worker's pid.
func callEcho(ctx context.Context, p *Process, body string, onHello func(pid int)) (json.RawMessage, error) {
	sink := Sink{Hello: func(h Hello) {
		if onHello != nil {
			onHello(h.PID)
		}
	}}
	_, res, err := p.Call(ctx, Request{Type: TypeStart, Device: "cpu", Body: json.RawMessage(body)}, sink)
	return res, err
}

func requireReason(t *testing.T, err error, reason string, sentinel error) *ProcessError {
	t.Helper()
	var pe *ProcessError
	if !errors.As(err, &pe) || pe.Reason != reason || !errors.Is(err, sentinel) {
		t.Fatalf("want a ProcessError %q (%v), got %v", reason, sentinel, err)
	}
	return pe
}

// TestStoppedWorkerIsHung: a worker stopped with SIGSTOP sends no
// heartbeat; it is killed, with its group, within the heartbeat timeout
// (plus the watchdog's tick), not waited on.
// One whose hello says it advances its work counter is found by its
// silence too, not taken for wedged, even when its counter had stood
// still for a while before it was stopped.
func TestStoppedWorkerIsHung(t *testing.T) {
	for _, body := range []string{`{"wait":true}`, `{"wait":true,"advances":true,"advance_ms":20,"busy_ms":100,"stop_advancing":true}`} {
		p := &Process{Path: echoWorker(t), HeartbeatTimeout: time.Second}
		var pid int
		start := time.Now()
		_, err := callEcho(context.Background(), p, body, func(worker int) {
			pid = worker
			// After some heartbeats and advances (then none), while the
			// heartbeats are read.
			time.AfterFunc(500*time.Millisecond, func() { _ = syscall.Kill(worker, syscall.SIGSTOP) })
		})
		took := time.Since(start)
		pe := requireReason(t, err, ReasonHung, ErrHung)
		if errors.Is(err, ErrWorkerExited) {
			t.Errorf("%s: a hung worker is also ErrWorkerExited: %v", body, err)
		}
		if pe.Silent < time.Second || pe.Stalled != 0 || !strings.Contains(err.Error(), "no heartbeat") {
			t.Errorf("%s: silent %s, stalled %s: %v", body, pe.Silent, pe.Stalled, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s: a stopped worker was found after %s; the heartbeat timeout is 1s", body, took)
		}
		requireGone(t, pid)
	}
}

// TestHeartbeatsFlowWhileBusy: a worker busy longer than the heartbeat
// timeout, sending nothing else, is alive and answers.
func TestHeartbeatsFlowWhileBusy(t *testing.T) {
	p := &Process{Path: echoWorker(t), HeartbeatTimeout: time.Second}
	res, err := callEcho(context.Background(), p, `{"busy_ms":2500}`, nil)
	if err != nil || !strings.Contains(string(res), "busy_ms") {
		t.Fatalf("busy worker: %s, %v", res, err)
	}
}

// TestWedgedWorkerIsHung: a worker whose hello says it advances its work
// counter, and whose heartbeats keep coming while the counter stands
// still (its work is wedged, its heartbeat goroutine is not), is killed
// as hung within the heartbeat timeout (plus the watchdog's tick), with a
// reason that tells it from a silent one.
func TestWedgedWorkerIsHung(t *testing.T) {
	p := &Process{Path: echoWorker(t), HeartbeatTimeout: time.Second}
	// Should the wedge go unnoticed, the cancel at the deadline ends the
	// call with the worker's answer rather than the test with a timeout.
	ctx, cancel := context.WithTimeout(context.Background(), returnsIn)
	defer cancel()
	var pid int
	start := time.Now()
	_, err := callEcho(ctx, p, `{"wait":true,"advances":true}`, func(worker int) { pid = worker })
	took := time.Since(start)
	pe := requireReason(t, err, ReasonHung, ErrHung)
	if pe.Stalled < time.Second || pe.Silent >= time.Second {
		t.Errorf("stalled %s, silent %s; want no progress for the timeout (1s) with heartbeats still coming: %v", pe.Stalled, pe.Silent, err)
	}
	for _, want := range []string{"alive", "made no progress for", "none since it said hello", "wedged"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "no heartbeat") {
		t.Errorf("a wedged worker that beats is said to be silent: %v", err)
	}
	if took > 5*time.Second {
		t.Errorf("a wedged worker was found after %s; the heartbeat timeout is 1s", took)
	}
	requireGone(t, pid)
}

// TestAdvancingWorkerIsAlive: a worker busy for longer than the heartbeat
// timeout whose work counter moves is not taken for wedged; nor is one
// that does not say it advances (an older worker), which is watched for
// silence only (TestHeartbeatsFlowWhileBusy).
func TestAdvancingWorkerIsAlive(t *testing.T) {
	p := &Process{Path: echoWorker(t), HeartbeatTimeout: time.Second}
	res, err := callEcho(context.Background(), p, `{"busy_ms":2500,"advances":true,"advance_ms":100}`, nil)
	if err != nil || !strings.Contains(string(res), "busy_ms") {
		t.Fatalf("busy, advancing worker: %s, %v", res, err)
	}
}

// TestWedgedWorkerNamesItsLastProgress: a worker whose work moved, then
// stopped moving, is killed as hung with what advanced last.
func TestWedgedWorkerNamesItsLastProgress(t *testing.T) {
	p := &Process{Path: echoWorker(t), HeartbeatTimeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), returnsIn)
	defer cancel()
	// Busy and advancing for 1.5s, then waiting for a cancel that comes
	// only at the deadline, its counter still.
	_, err := callEcho(ctx, p, `{"busy_ms":1500,"advances":true,"advance_ms":50,"wait":true,"stop_advancing":true}`, nil)
	requireReason(t, err, ReasonHung, ErrHung)
	if !strings.Contains(err.Error(), "last progress: echo step, advance ") {
		t.Errorf("the error does not name the last progress: %v", err)
	}
}

// TestCancelledStoppedWorkerIsKilledPromptly: Ctrl-C on a stopped worker
// does not wait for the grace period (ten minutes here) nor the heartbeat
// timeout (a minute): three heartbeats of silence after the cancel do.
func TestCancelledStoppedWorkerIsKilledPromptly(t *testing.T) {
	p := &Process{Path: echoWorker(t), HeartbeatTimeout: time.Minute, Grace: 10 * time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pid int
	start := time.Now()
	_, err := callEcho(ctx, p, `{"wait":true}`, func(worker int) {
		pid = worker
		_ = syscall.Kill(worker, syscall.SIGSTOP)
		cancel()
	})
	took := time.Since(start)
	requireReason(t, err, ReasonHung, ErrHung)
	if limit := cancelSilence(HeartbeatInterval(time.Minute)) + 5*time.Second; took > limit {
		t.Errorf("a cancelled, stopped worker was killed after %s, want within %s", took, limit)
	}
	requireGone(t, pid)
}

// TestStopperKillsEveryWorker: KillAll ends a running worker at once, and
// Wait returns once it is reaped; a Call after KillAll starts nothing.
func TestStopperKillsEveryWorker(t *testing.T) {
	p := &Process{Path: echoWorker(t), Grace: 10 * time.Minute}
	st := NewStopper()
	ctx := WithStopper(context.Background(), st)
	var pid int
	var err error
	timed(t, "Call", func() {
		_, err = callEcho(ctx, p, `{"wait":true}`, func(worker int) { pid = worker; st.KillAll() })
	})
	requireReason(t, err, ReasonKilled, ErrWorkerExited)
	if !st.Wait(time.Second) {
		t.Fatal("Wait: a worker is still counted after its Call returned")
	}
	requireGone(t, pid)
	_, err = callEcho(ctx, p, `{}`, nil)
	requireReason(t, err, ReasonKilled, ErrWorkerExited)
}

// TestProcessFailuresHaveReasons: a crash, an exit with a code and a
// message outside the protocol are each named.
func TestProcessFailuresHaveReasons(t *testing.T) {
	for _, c := range []struct{ body, reason, detail string }{
		{`{"crash":true}`, ReasonCrashed, "signal: killed"},
		{`{"exit":3}`, ReasonExit, "exit status 3"},
		{`{"garbage":"not json"}`, ReasonProtocol, "bad message"},
	} {
		p := &Process{Path: echoWorker(t)}
		var err error
		timed(t, c.body, func() { _, err = callEcho(context.Background(), p, c.body, nil) })
		pe := requireReason(t, err, c.reason, ErrWorkerExited)
		if !strings.Contains(pe.Detail, c.detail) {
			t.Errorf("%s: detail %q does not say %q", c.body, pe.Detail, c.detail)
		}
	}
}

// TestHeaderPerStart: every start writes a header line naming its pid
// and command to Stderr, before the worker's own lines.
func TestHeaderPerStart(t *testing.T) {
	var log syncBuffer
	p := &Process{Path: echoWorker(t), Stderr: &log}
	for range 2 {
		var pid int
		if _, err := callEcho(context.Background(), p, `{}`, func(w int) { pid = w }); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("tolaria-worker pid %d started: %s serve", pid, p.Path); !strings.Contains(log.String(), want) {
			t.Fatalf("no header %q in:\n%s", want, log.String())
		}
	}
	if n := strings.Count(log.String(), "=== "); n != 2 {
		t.Fatalf("%d headers for 2 starts:\n%s", n, log.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMissingSaysWhy: a worker path that is not there is said to not
// exist; one that cannot be looked at says why, not that it is missing.
func TestMissingSaysWhy(t *testing.T) {
	_, err := os.Stat(filepath.Join(t.TempDir(), "none"))
	if got := Missing(err); got != "does not exist" {
		t.Errorf("a missing path: %q", got)
	}
	_, err = os.Stat(filepath.Join("/dev/null", "x")) // through a file: ENOTDIR
	if got := Missing(err); !strings.HasPrefix(got, "cannot be used (") || !strings.Contains(got, "not a directory") {
		t.Errorf("a path through a file: %q", got)
	}
}

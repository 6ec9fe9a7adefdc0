package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tolaria-ml/tolaria/coordinator"
)

// TestSecondSignalEndsTolariaAtOnce: the first SIGINT stops a run with a
// checkpoint, however long the worker takes to write it; a second SIGINT
// ends tolaria at once, as a signal death, once it has killed the worker's
// process group and reaped it. The worker is frozen (SIGSTOP)
// so that the stop the first signal asks for cannot finish by itself.
func TestSecondSignalEndsTolariaAtOnce(t *testing.T) {
	for _, second := range []bool{false, true} {
		name := map[bool]string{false: "first signal alone checkpoints", true: "second signal ends at once"}[second]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			run := filepath.Join(dir, "run")
			cmd, stderr := startRun(t, dir, longer(run, "--isolate")...)
			events := filepath.Join(run, "events.jsonl")
			waitFor(t, "the first epoch", func() bool { return epochsLogged(events) >= 1 })
			worker := childOf(t, cmd.Process.Pid)
			t.Cleanup(func() { _ = syscall.Kill(-worker, syscall.SIGKILL) }) // its own process group
			if err := syscall.Kill(worker, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// Until every thread has stopped, one woken in a read of its
			// input could still take the cancel message sent below.
			waitFor(t, "the worker to stop", func() bool { return stopped(worker) })
			if n := epochsLogged(events); n >= 4 {
				t.Fatalf("the run finished (%d epochs) before its worker was frozen; make it longer", n)
			}
			before := checkpointsLogged(events)
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			// tolaria cancels the worker once it has taken the first
			// signal, so the cancel message waiting in the frozen worker's
			// input shows that the next signal counts as the second.
			waitFor(t, "tolaria to cancel the worker", func() bool { return pendingInput(t, worker) > 0 })

			if !second {
				if err := syscall.Kill(worker, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				err := cmd.Wait()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 130 {
					t.Fatalf("after one SIGINT: %v, want exit 130\n%s", err, stderr)
				}
				if after := checkpointsLogged(events); after <= before || !strings.Contains(stderr.String(), "--resume --run-dir") {
					t.Fatalf("after one SIGINT: %d checkpoints logged (%d before the signal), stderr:\n%s", after, before, stderr)
				}
				return
			}

			// Later than SameRequestWithin: a second Ctrl-C, not the
			// first one delivered again.
			time.Sleep(coordinator.SameRequestWithin)
			sent := time.Now()
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			status, err := waitWithin(cmd, 10*time.Second)
			if err != nil {
				t.Fatalf("after a second SIGINT: %v\n%s", err, stderr)
			}
			if !status.Signaled() || status.Signal() != syscall.SIGINT {
				t.Fatalf("after a second SIGINT tolaria ended with %v, want death by SIGINT (a shell reports 130)\n%s", status, stderr)
			}
			if d := time.Since(sent); d > 5*time.Second {
				t.Fatalf("tolaria took %s to end after the second SIGINT", d)
			}
			if after := checkpointsLogged(events); after != before {
				t.Fatalf("%d checkpoints logged after the second signal, %d before: the run was not ended at once", after, before)
			}
			// The worker went before tolaria, and with it the run
			// directory's lock: nothing writes there any more.
			if !gone(worker) {
				t.Fatalf("the worker %d outlived tolaria after the second signal", worker)
			}
		})
	}
}

// waitWithin waits for cmd to end, killing it after d.
func waitWithin(cmd *exec.Cmd, d time.Duration) (syscall.WaitStatus, error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return 0, err
		}
		return cmd.ProcessState.Sys().(syscall.WaitStatus), nil
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return 0, fmt.Errorf("still running %s later", d)
	}
}

// stopped reports whether every thread of process pid is stopped by a
// signal, read from /proc.
func stopped(pid int) bool {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces, so split after ')'.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) == 0 || f[0] != "T" {
			return false
		}
	}
	return len(stats) > 0
}

func checkpointsLogged(path string) int {
	raw, _ := os.ReadFile(path)
	return bytes.Count(raw, []byte(`"kind":"checkpoint"`))
}

// pendingInput is the number of bytes written to process pid's standard
// input (a pipe) and not yet read.
func pendingInput(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/0", pid), os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// TIOCINQ is FIONREAD on Linux: for a pipe, the bytes not yet read.
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ)
	if err != nil {
		t.Fatalf("FIONREAD on the standard input of %d: %v", pid, err)
	}
	return n
}

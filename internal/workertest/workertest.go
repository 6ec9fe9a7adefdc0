// Package workertest makes a test binary double as a CPU tolaria-worker,
// so that the coordinator's tests run their workers (a sweep's trials, an
// evaluation's shards, an RL run's actors and learners) in real worker
// processes: a test sets ServeEnv and gives os.Args[0] as the worker.
package workertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Main is a package's TestMain: the worker when ServeEnv says so, else
// the tests, checked for leaked goroutines.
func Main(m *testing.M) {
	if os.Getenv(ServeEnv) == "1" {
		os.Exit(serve())
	}
	goleak.VerifyTestMain(m)
}

// StartAfterEnv ("NAME=OTHER") makes the test worker of the job whose run
// directory is named NAME wait, before it serves, until the trial OTHER of
// the same sweep has been granted its budget (its events say so), so a
// test can order the trials' budget requests.
const StartAfterEnv = "TOLARIA_TEST_WORKER_START_AFTER"

// delayedStart reads the request's first line and, when StartAfterEnv
// names its job, waits before handing it on.
func delayedStart(stdin io.Reader) io.Reader {
	name, other, ok := strings.Cut(os.Getenv(StartAfterEnv), "=")
	if !ok {
		return stdin
	}
	r := bufio.NewReader(stdin)
	line, _ := r.ReadBytes('\n')
	var start struct {
		Body job.Spec `json:"body"`
	}
	if json.Unmarshal(line, &start) == nil && filepath.Base(start.Body.RunDir) == name {
		events := filepath.Join(filepath.Dir(start.Body.RunDir), other, "events.jsonl")
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if raw, err := os.ReadFile(events); err == nil && bytes.Contains(raw, []byte(`"budget_grant"`)) {
				break
			}
		}
	}
	return io.MultiReader(bytes.NewReader(line), r)
}

// ServeEnv, set to 1, makes a test binary whose TestMain is Main a CPU
// worker.
const ServeEnv = "TOLARIA_TEST_WORKER_SERVE"

// ProtocolOut is where a test worker writes the protocol: descriptor 3
// when Process started it so (ProtocolFDEnv), else standard output.
func ProtocolOut() *os.File {
	if os.Getenv(worker.ProtocolFDEnv) == "3" {
		return os.NewFile(3, "protocol")
	}
	return os.Stdout
}

// serve is tolaria-worker serve for the CPU device, with the test-only
// fault switch (jobserver.FaultEnv).
func serve() int {
	out := ProtocolOut()
	shared := trainer.NewShared()
	defer shared.Close()
	fmt.Fprintf(os.Stderr, "test worker pid %d serving\n", os.Getpid())
	cfg := jobserver.Config{Build: "cpu", Open: jobserver.OpenCPU, Shared: shared}
	if v := os.Getenv(jobserver.FaultEnv); v != "" {
		f, err := jobserver.ParseFault(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		cfg.AfterStep = func(spec job.Spec, steps int) {
			if !f.Hits(spec, steps) {
				return
			}
			if f.Kill {
				fmt.Fprintf(os.Stderr, "fault switch: killing myself after step %d\n", steps)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			if f.Hang {
				// Stopped whole, heartbeats included, as cmd/tolaria-worker does.
				fmt.Fprintf(os.Stderr, "fault switch: stopping myself after step %d\n", steps)
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				select {}
			}
			if f.Wedge {
				// The training goroutine blocks, the heartbeats go on, as
				// cmd/tolaria-worker does.
				fmt.Fprintf(os.Stderr, "fault switch: wedging the work after step %d\n", steps)
				select {}
			}
			fmt.Fprintf(os.Stderr, "fault switch: exiting with %d after step %d\n", f.Exit, steps)
			os.Exit(f.Exit)
		}
	}
	in := delayedStart(os.Stdin)
	serveIt := jobserver.Serve
	if slices.Contains(os.Args[1:], worker.KeepArg) {
		serveIt = jobserver.ServeKept // tolaria-worker serve --keep
	}
	if err := serveIt(context.Background(), in, out, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

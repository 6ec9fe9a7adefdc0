package coordinator

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

func TestMain(m *testing.M) {
	// The test binary doubles as a CPU tolaria-worker, so the sweep tests
	// run trials in real worker processes.
	if os.Getenv(serveAsWorkerEnv) == "1" {
		os.Exit(serveAsWorker())
	}
	goleak.VerifyTestMain(m)
}

// serveAsWorkerEnv makes the test binary a CPU worker (see TestMain).
const serveAsWorkerEnv = "TOLARIA_COORDINATOR_TEST_SERVE"

// serveAsWorker is tolaria-worker serve for the CPU device, with the
// test-only fault switch.
func serveAsWorker() int {
	out := os.Stdout
	if os.Getenv(worker.ProtocolFDEnv) == "3" {
		out = os.NewFile(3, "protocol")
	}
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
			fmt.Fprintf(os.Stderr, "fault switch: exiting with %d after step %d\n", f.Exit, steps)
			os.Exit(f.Exit)
		}
	}
	if err := jobserver.Serve(context.Background(), os.Stdin, out, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

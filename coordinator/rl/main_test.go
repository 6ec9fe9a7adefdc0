package rl

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

func TestMain(m *testing.M) {
	// The test binary doubles as a CPU tolaria-worker, so the agents'
	// actors and learners run in real worker processes.
	if os.Getenv(serveAsWorkerEnv) == "1" {
		os.Exit(serveAsWorker())
	}
	goleak.VerifyTestMain(m)
}

// serveAsWorkerEnv makes the test binary a CPU worker (see TestMain).
const serveAsWorkerEnv = "TOLARIA_RL_TEST_SERVE"

// serveAsWorker is tolaria-worker serve for the CPU device.
func serveAsWorker() int {
	out := os.Stdout
	if os.Getenv(worker.ProtocolFDEnv) == "3" {
		out = os.NewFile(3, "protocol")
	}
	shared := trainer.NewShared()
	defer shared.Close()
	if err := jobserver.Serve(context.Background(), os.Stdin, out, jobserver.Config{Build: "cpu", Open: jobserver.OpenCPU, Shared: shared}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

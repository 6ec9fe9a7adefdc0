package coordinator

import (
	"testing"

	"github.com/tolaria-ml/tolaria/internal/workertest"
)

// The test binary doubles as a CPU tolaria-worker (workertest), so the tests' workers
// run in real worker processes.
func TestMain(m *testing.M) { workertest.Main(m) }

const (
	serveAsWorkerEnv = workertest.ServeEnv
	startAfterEnv    = workertest.StartAfterEnv
)

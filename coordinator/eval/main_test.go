package eval

import (
	"testing"

	"github.com/tolaria-ml/tolaria/internal/workertest"
)

// The test binary doubles as a CPU tolaria-worker (workertest), so the
// shards are scored in real worker processes.
func TestMain(m *testing.M) { workertest.Main(m) }

package sweep

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/internal/workertest"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// The test binary doubles as a CPU tolaria-worker (workertest), so the trials
// run in real worker processes; with holdEnv set, one that holds each
// trial at holdStep (see serveHeld).
func TestMain(m *testing.M) {
	if os.Getenv(holdEnv) == "1" && os.Getenv(serveAsWorkerEnv) == "1" {
		os.Exit(serveHeld())
	}
	workertest.Main(m)
}

const (
	serveAsWorkerEnv = workertest.ServeEnv
	startAfterEnv    = workertest.StartAfterEnv
	// holdEnv, set to 1, makes the test worker hold each trial after its
	// holdStep-th step of this invocation until it is cancelled (see
	// serveHeld).
	holdEnv = "TOLARIA_TEST_SWEEP_HOLD"
	// holdStep is in a small test trial's third epoch (8 steps an
	// epoch), after its first two epochs' checkpoints and progress.
	holdStep = 20
)

// serveHeld is a CPU tolaria-worker whose trials, after step holdStep,
// wait until the coordinator's cancel has reached the worker, so a trial
// cannot end before the test cancels the sweep, however slowly the
// trials beside it start; once cancelled, it stops after that step, as
// any cancelled trial does.
func serveHeld() int {
	out := workertest.ProtocolOut()
	shared := trainer.NewShared()
	defer shared.Close()
	fmt.Fprintf(os.Stderr, "held test worker pid %d serving\n", os.Getpid())
	in := &cancelSeen{r: os.Stdin, seen: make(chan struct{})}
	hold := func(spec job.Spec, steps int) {
		if steps != holdStep {
			return
		}
		select {
		case <-in.seen:
		case <-time.After(2 * time.Minute):
			// A test that never cancels fails on its own; its trial ends.
			fmt.Fprintf(os.Stderr, "test worker: %s held at step %d was never cancelled\n", spec.RunDir, steps)
		}
	}
	cfg := jobserver.Config{Build: "cpu", Open: jobserver.OpenCPU, Shared: shared, AfterStep: hold}
	if err := jobserver.Serve(context.Background(), in, out, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// cancelSeen reads the coordinator's messages and closes seen once the
// worker has taken in a cancel: at the first read after the one that
// returned it, since the worker's reader handles each message it has
// before it reads again.
type cancelSeen struct {
	r       io.Reader
	tail    []byte // the end of what was read, for a message read in two parts
	got     bool   // a cancel was read
	seen    chan struct{}
	closing sync.Once
}

func (c *cancelSeen) Read(p []byte) (int, error) {
	if c.got {
		c.closing.Do(func() { close(c.seen) })
	}
	n, err := c.r.Read(p)
	c.tail = append(c.tail, p[:n]...)
	if bytes.Contains(c.tail, []byte(`"type":"`+worker.TypeCancel+`"`)) {
		c.got = true
	}
	c.tail = c.tail[max(0, len(c.tail)-64):]
	return n, err
}

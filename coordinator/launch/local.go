package launch

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/worker"
)

// Local is the launcher of worker processes on this machine, each in a
// process group of its own (worker.Process), on the slots of this
// machine's devices.
func Local() Kind {
	return Kind{Name: LocalName, Check: checkLocal, New: func(_ context.Context, cfg Config) (Launcher, error) {
		return &local{cfg: cfg}, nil
	}}
}

func checkLocal(c Config) error {
	if c.DryRun {
		return refusal.Config(field.Errorf("dry_run", "prints what %s slurm would submit; local workers have nothing to print", field.Name("launcher")))
	}
	return nil
}

type local struct{ cfg Config }

// Slots resolves device auto (GPU 0 when a CUDA worker can open one, the
// CPU otherwise, saying why in the log) and lays the slots out.
func (l *local) Slots(ctx context.Context) ([]Slot, error) {
	device, gpus := l.cfg.Device, l.cfg.GPUs
	if device == "auto" {
		proc := &worker.Process{Path: l.cfg.Worker, HelloTimeout: l.cfg.WorkerStart}
		hello, err := ProbeCUDA(ctx, proc)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			l.cfg.Logger.Info("device auto: using cpu", "reason", err.Error())
			device = "cpu"
		} else {
			device = "cuda"
			if len(gpus) == 0 {
				gpus = []int{0}
				l.cfg.Logger.Info("device auto: using GPU 0; list more with --devices 0,1,...", "gpu", hello.Description)
			}
		}
	}
	if device == "cuda" && len(gpus) == 0 && !l.cfg.GPUsFromEnv {
		gpus = []int{0}
	}
	return LayOut(device, gpus, l.cfg.PerDevice, l.cfg.Parallel)
}

func (l *local) Plan([]Worker) {}

func (l *local) Hold(ctx context.Context) (context.Context, func()) { return ctx, func() {} }

// Start makes the worker process of the attempt, logging to w.Log; with
// Config.Probe, a CUDA slot's worker first opens its GPU once, unless the
// attempt goes to a kept worker that has it open (w.Kept).
func (l *local) Start(ctx context.Context, w Worker, slot Slot, n int) (*Handle, error) {
	f, err := os.OpenFile(w.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	tail := &logTail{max: 4096}
	proc := &worker.Process{Path: l.cfg.Worker, Stderr: io.MultiWriter(f, tail), Logger: l.cfg.Logger,
		HelloTimeout: l.cfg.WorkerStart, HeartbeatTimeout: l.cfg.HeartbeatTimeout,
		Env: append(slices.Clone(l.cfg.Env), slot.Env()...)}
	h := &Handle{Transport: proc, Tail: tail.String, NotRun: func() string { return "" }, closers: []io.Closer{f}}
	if l.cfg.Probe && slot.Device == "cuda" && !w.Kept {
		if _, err := ProbeCUDA(ctx, proc); err != nil {
			_ = h.Close()
			return nil, err
		}
	}
	return h, nil
}

func (l *local) Release(context.Context, Worker) {}

func (l *local) Describe() (string, []string) { return "", nil }

// ProbeCUDA starts the worker once to open a GPU; its hello timeout
// bounds the wait, and a worker that does not answer is killed with its
// process group. A worker that cannot give a GPU is an ErrSetup saying
// why in one sentence and what to do.
func ProbeCUDA(ctx context.Context, proc *worker.Process) (worker.Hello, error) {
	quiet := *proc
	quiet.Stderr = nil
	hello, err := quiet.Probe(ctx, "cuda")
	switch {
	case err != nil && ctx.Err() != nil:
		return hello, fmt.Errorf("interrupted while the worker %s was starting", proc.Path)
	case err != nil:
		return hello, refusal.Setup(unavailableError{proc.Path, err})
	}
	return hello, nil
}

// unavailableError is a worker that cannot give a GPU; its message says
// why in one sentence and what to do.
type unavailableError struct {
	path string
	err  error
}

func (e unavailableError) Error() string { return worker.Unavailable(e.path, e.err) }
func (e unavailableError) Unwrap() error { return e.err }

// logTail keeps the last max bytes written to it, from a line's start.
type logTail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *logTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > 2*t.max {
		t.buf = append([]byte(nil), t.buf[n-t.max:]...)
	}
	return len(p), nil
}

func (t *logTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
}

package train

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Placement says where a job may run.
type Placement struct {
	Device  string // auto, cpu or cuda
	Isolate bool   // run a CPU job in a tolaria-worker process too
	// Worker is the tolaria-worker binary; "" looks next to this program.
	Worker string
	// WorkerStart bounds a worker's start-up, until it has opened its
	// device; 0 means worker.DefaultHelloTimeout.
	WorkerStart time.Duration
	// HeartbeatTimeout is how long a working worker may be silent, or make
	// no progress while it sends heartbeats, before it is taken for hung
	// and killed; 0 means
	// worker.DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// Stderr receives a worker's logs; nil gives them the run directory's
	// worker.log when a Run starts the worker (see Prepare), and discards
	// them otherwise.
	Stderr io.Writer
	// Env is added to a worker's environment: CUDA_VISIBLE_DEVICES names
	// the one GPU a sweep's trial may use.
	Env []string
	// Transport, when set, is the worker, on Device (cpu or cuda), probed
	// by nobody here: one a launcher started (a sweep's trial's, see
	// launch.Launcher), here or elsewhere.
	Transport worker.Transport
}

// Validate checks the placement's bounds, naming the setting at fault.
func (p Placement) Validate() error {
	if p.WorkerStart < 0 {
		return refusal.Config(field.Errorf("worker_start_timeout", "cannot be negative (%s); give a duration such as 30s", p.WorkerStart))
	}
	if err := worker.CheckHeartbeatTimeout(p.HeartbeatTimeout); p.HeartbeatTimeout != 0 && err != nil { // 0: the default
		return refusal.Config(field.Errorf("heartbeat_timeout", "%w", err))
	}
	return nil
}

// Executor runs jobs on one device through the worker protocol: in this
// process for the CPU device, or in a tolaria-worker process. Only a
// worker process ever touches a GPU.
type Executor struct {
	Device  string          // "cpu" or "cuda"
	Process *worker.Process // nil: in this process, unless Remote
	// Remote is a worker started elsewhere (Placement.Transport).
	Remote worker.Transport
	shared *trainer.Shared
	log    *slog.Logger
}

// Choose resolves a placement to an executor. With device auto it takes
// a GPU when a CUDA worker can open one and the CPU otherwise, saying why
// in the log. shared is the process's state, for in-process runs.
func Choose(ctx context.Context, p Placement, shared *trainer.Shared, log *slog.Logger) (*Executor, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Transport != nil {
		if p.Device != "cpu" && p.Device != "cuda" {
			return nil, refusal.Config(field.Errorf("device", "must be cpu or cuda for a worker started elsewhere, got %q", p.Device))
		}
		return &Executor{Device: p.Device, Remote: p.Transport, shared: shared, log: log}, nil
	}
	inProcess := &Executor{Device: "cpu", shared: shared, log: log}
	if p.Device == "cpu" && !p.Isolate {
		return inProcess, nil
	}
	path, err := worker.Find(p.Worker)
	if err != nil {
		switch {
		case p.Device == "auto" && !p.Isolate:
			log.Info("device auto: using cpu", "reason", "no CUDA worker found")
			return inProcess, nil
		case p.Device != "cuda" && p.Worker != "":
			_, serr := os.Stat(p.Worker)
			return nil, refusal.Setup(field.Errorf("isolate", "runs the job in a tolaria-worker process, and %s, given by %s or $TOLARIA_WORKER, %s: give the path of one, build one with `make build` (bin/tolaria-worker), or drop %s",
				p.Worker, field.Name("worker"), worker.Missing(serr), field.Name("isolate")))
		case p.Device != "cuda":
			// Isolating a CPU job needs any tolaria-worker, not a CUDA one.
			return nil, refusal.Setup(field.Errorf("isolate", "runs the job in a tolaria-worker process, and none was found next to tolaria, at %s or at $TOLARIA_WORKER: build one with `make build` (bin/tolaria-worker), or drop %s",
				field.Name("worker"), field.Name("isolate")))
		}
		return nil, refusal.Setup(fmt.Errorf("%w; or train on the CPU with --device cpu", err))
	}
	proc := &worker.Process{Path: path, Stderr: p.Stderr, HelloTimeout: p.WorkerStart, HeartbeatTimeout: p.HeartbeatTimeout, Env: p.Env}
	if p.Device == "cpu" {
		return &Executor{Device: "cpu", Process: proc, shared: shared, log: log}, nil
	}
	hello, err := probeCUDA(ctx, proc)
	if err != nil {
		if p.Device == "auto" && ctx.Err() == nil {
			log.Info("device auto: using cpu", "reason", err.Error())
			if p.Isolate {
				return &Executor{Device: "cpu", Process: proc, shared: shared, log: log}, nil
			}
			return inProcess, nil
		}
		return nil, err
	}
	log.Info("device: using the CUDA worker", "worker", path, "gpu", hello.Device, "model", hello.Description, "pid", hello.PID)
	return &Executor{Device: "cuda", Process: proc, shared: shared, log: log}, nil
}

// CUDAWorker finds the tolaria-worker (at path, or next to this program
// when path is "") and asks it to open a GPU within start (0: the
// default). It returns the worker, ready to run jobs and benchmarks, or an
// refusal.ErrSetup saying why there is none and what to do.
func CUDAWorker(ctx context.Context, path string, start time.Duration, stderr io.Writer) (*worker.Process, worker.Hello, error) {
	found, err := worker.Find(path)
	if err != nil {
		return nil, worker.Hello{}, refusal.Setup(err)
	}
	proc := &worker.Process{Path: found, Stderr: stderr, HelloTimeout: start}
	hello, err := probeCUDA(ctx, proc)
	if err != nil {
		return nil, worker.Hello{}, err
	}
	return proc, hello, nil
}

// probeCUDA starts the worker once to open a GPU (see launch.ProbeCUDA).
func probeCUDA(ctx context.Context, proc *worker.Process) (worker.Hello, error) {
	return launch.ProbeCUDA(ctx, proc)
}

// unavailableError is a worker that cannot give a GPU; its message says
// why in one sentence and what to do.
type unavailableError struct {
	path string
	err  error
}

func (e unavailableError) Error() string { return worker.Unavailable(e.path, e.err) }
func (e unavailableError) Unwrap() error { return e.err }

// Unavailable is the error of the worker at path that cannot give a GPU
// because of err: its message says why in one sentence and what to do.
func Unavailable(path string, err error) error { return unavailableError{path, err} }

// Plan checks the job before anything is written, so a batch larger than
// the training set, missing data, graphs that would never be captured or a
// checkpoint that does not fit are refused first. spec must have passed
// Validate. An in-process executor loads the data and plans here, and the
// plan keeps the data for the run. A worker process's job is planned by a
// worker (jobserver.PlanJobs): this process loads no dataset, and the
// plan holds the spec alone; the worker that runs the job plans it again
// on its side of the process boundary. A worker started elsewhere
// (Remote) is planned here, unless the caller planned it (Request.Planned).
// It returns the files the data was read from, as read (data.SourcesOf):
// the run directory records them.
func (e *Executor) Plan(ctx context.Context, spec job.Spec) (*job.Plan, []data.SourceFile, error) {
	if e.Process != nil {
		plans, err := jobserver.PlanJobs(ctx, e.Process, []job.Spec{spec})
		if err != nil {
			return nil, nil, fmt.Errorf("planning the job in the worker %s: %w", e.Process.Path, err)
		}
		if err := plans[0].Err(); err != nil {
			return nil, nil, refusal.Config(err)
		}
		return &job.Plan{Spec: spec}, plans[0].Files, nil
	}
	train, test, err := spec.LoadData()
	if err != nil {
		return nil, nil, refusal.Config(err)
	}
	plan, err := spec.Plan(train, test)
	if err != nil {
		return nil, nil, refusal.Config(err)
	}
	return plan, data.SourcesOf(train, test), nil
}

// LogTo sends the worker processes' logs to w from now on (a run's
// worker.log); an in-process executor has none.
func (e *Executor) LogTo(w io.Writer) {
	if e.Process != nil {
		p := *e.Process
		p.Stderr = w
		e.Process = &p
	}
}

// Run trains the plan and returns the summary.
func (e *Executor) Run(ctx context.Context, plan *job.Plan, sink jobserver.Sink) (trainer.Summary, error) {
	var t worker.Transport = e.Process
	if e.Remote != nil {
		t = e.Remote
	} else if e.Process == nil {
		t = jobserver.InProcess(jobserver.Config{Build: "cpu", Open: jobserver.OpenCPU, Shared: e.shared, Logger: e.log, Plan: plan})
	}
	_, sum, err := jobserver.Run(ctx, t, e.Device, plan.Spec, sink)
	return sum, err
}

// cudaModule is the module whose package init initialises CUDA.
const cudaModule = "gorgonia.org/cu"

// LinksCUDA reports whether this binary links the CUDA bindings, whose
// init would have initialised CUDA before main: never for a correct build
// of tolaria (e2e's dependency check enforces it), so a start-up line can
// report what the binary is, not what it is meant to be.
func LinksCUDA() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, dep := range info.Deps {
		if dep.Path == cudaModule {
			return true
		}
	}
	return false
}

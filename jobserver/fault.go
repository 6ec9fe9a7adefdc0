package jobserver

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
)

// FaultEnv names tolaria-worker's test-only fault switch: an environment
// variable that makes the worker fail on purpose, so the tests of the
// coordinator can see a worker die mid-run. Only a worker built with
// -tags testhooks reads it; a release build ignores it.
//
//	TOLARIA_E2E_WORKER_FAULT="step=K,exit=C[,run=NAME]"  exit with code C after step K
//	TOLARIA_E2E_WORKER_FAULT="step=K,kill[,run=NAME]"    SIGKILL itself after step K
//	TOLARIA_E2E_WORKER_FAULT="step=K,hang[,run=NAME]"    SIGSTOP itself after step K: no
//	                                                     heartbeat, no answer, as a frozen worker
//	TOLARIA_E2E_WORKER_FAULT="step=K,wedge[,run=NAME]"   block the step's goroutine forever after
//	                                                     step K while heartbeats go on: alive, no
//	                                                     progress, as a deadlocked worker
//
// run limits the fault to the job whose run directory is named NAME (a
// sweep's trial), so one worker of many fails; it comes last, and NAME
// may hold commas.
//
// shard=S makes it a fault of evaluation shard S instead (tolaria eval),
// fired after its K-th batch; attempt=A limits it to the A-th attempt at
// that shard (1: the first, so the retry succeeds). A fault without
// shard= fires in training only, one with it in evaluation only.
const FaultEnv = "TOLARIA_E2E_WORKER_FAULT"

// Fault is a parsed FaultEnv.
type Fault struct {
	Step int  // after this many steps of this invocation
	Exit int  // exit code, when Kill is false
	Kill bool // SIGKILL rather than exit
	Hang bool // SIGSTOP (a hang, heartbeats included) rather than exit
	// Wedge blocks the goroutine that trains (or evaluates) forever, the
	// heartbeats going on, rather than exit.
	Wedge bool
	Run   string // only the job whose run directory's base name is this; "" any
	// OnShard makes it a fault of evaluation shard Shard, after Step batches.
	OnShard bool
	Shard   int
	Attempt int // only this attempt at the shard; 0 any
}

// ParseFault reads a FaultEnv value.
func ParseFault(s string) (Fault, error) {
	var f Fault
	rest := s
	if i := strings.Index(rest, "run="); i >= 0 {
		f.Run, rest = rest[i+len("run="):], strings.TrimSuffix(rest[:i], ",")
	}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		var err error
		switch k {
		case "step":
			f.Step, err = strconv.Atoi(v)
		case "exit":
			f.Exit, err = strconv.Atoi(v)
		case "kill":
			f.Kill = true
		case "hang":
			f.Hang = true
		case "wedge":
			f.Wedge = true
		case "shard":
			f.OnShard = true
			f.Shard, err = strconv.Atoi(v)
		case "attempt":
			f.Attempt, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown part %q", part)
		}
		if err != nil {
			return Fault{}, fmt.Errorf("%s=%q: %w (want step=K,exit=C, step=K,kill, step=K,hang or step=K,wedge, optionally shard=S, attempt=A, run=NAME)", FaultEnv, s, err)
		}
	}
	modes := 0
	for _, on := range []bool{f.Kill, f.Hang, f.Wedge, strings.Contains(rest, "exit=")} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return Fault{}, fmt.Errorf("%s=%q: give one of exit=C, kill, hang and wedge", FaultEnv, s)
	}
	if f.Step < 1 {
		return Fault{}, fmt.Errorf("%s=%q: step must be at least 1", FaultEnv, s)
	}
	return f, nil
}

// Hits reports whether the fault fires for spec after step steps.
func (f Fault) Hits(spec job.Spec, step int) bool {
	return !f.OnShard && step == f.Step && f.inRun(spec)
}

func (f Fault) inRun(spec job.Spec) bool { return f.Run == "" || filepath.Base(spec.RunDir) == f.Run }

// HitsEval reports whether the fault fires for an evaluation shard after
// batches batches.
func (f Fault) HitsEval(ej EvalJob, batches int) bool {
	return f.OnShard && batches == f.Step && ej.Shard == f.Shard && (f.Attempt == 0 || ej.Attempt == f.Attempt) && f.inRun(ej.Spec)
}

// stepCounter calls after with the number of steps trained so far after
// each one.
type stepCounter struct {
	trainer.Observer
	n     int
	after func(int)
}

func (c *stepCounter) Observe(m trainer.Measurement) {
	c.Observer.Observe(m)
	if _, ok := m.(trainer.Stepped); ok {
		c.n++
		c.after(c.n)
	}
}

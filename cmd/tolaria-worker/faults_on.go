//go:build testhooks

package main

import (
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
)

// installFaults arms the test-only fault switch (jobserver.FaultEnv) when
// it is set: a build with -tags testhooks, as tolaria's end-to-end tests
// make, fails on purpose where it says.
func installFaults(cfg *jobserver.Config, log *slog.Logger) error {
	v := os.Getenv(jobserver.FaultEnv)
	if v == "" {
		return nil
	}
	f, err := jobserver.ParseFault(v)
	if err != nil {
		return err
	}
	cfg.AfterStep = func(spec job.Spec, steps int) {
		if f.Hits(spec, steps) {
			fault(f, steps, log)
		}
	}
	cfg.AfterEvalBatch = func(ej jobserver.EvalJob, batches int) {
		if f.HitsEval(ej, batches) {
			fault(f, batches, log)
		}
	}
	return nil
}

// fault carries out the test-only fault switch (jobserver.FaultEnv) once
// it fires.
func fault(f jobserver.Fault, steps int, log *slog.Logger) {
	if f.Kill {
		log.Error("test-only fault switch: killing myself", "step", steps)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	if f.Wedge {
		// Only the goroutine that trains (or evaluates) stops, as one in a
		// deadlock or an endless loop does; the heartbeat's goroutine goes
		// on, so only the work counter shows that nothing moves.
		log.Error("test-only fault switch: wedging the work", "step", steps)
		select {}
	}
	if f.Hang {
		// The whole process stops, the heartbeat's goroutine with it, as a
		// process frozen by a debugger or wedged in a driver would.
		log.Error("test-only fault switch: stopping myself", "step", steps)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		for { // the signal is on its way; once continued, the run stays wedged
			time.Sleep(time.Hour)
		}
	}
	log.Error("test-only fault switch: exiting", "step", steps, "code", f.Exit)
	os.Exit(f.Exit)
}

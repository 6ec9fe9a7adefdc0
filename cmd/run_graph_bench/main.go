// Command run_graph_bench measures what CUDA-graph capture and replay buy
// for a training step: eager against replayed step time in the pipelined
// loop, capture time cold and pooled, kernels, launch cost, device-busy and
// host CPU time per step. It writes a JSON report and a chart. The
// measuring is the bench package's; this command wires flags to it.
//
// This binary runs the CPU device only; it never initialises CUDA. The
// CUDA bench runs through the cuda-tagged worker.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tolaria-ml/tolaria/trainer"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The process's state: its capture guard, which the benchmark's
	// stagers honour and its captures hold.
	shared := trainer.NewShared()
	code := run(ctx, shared, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	_ = shared.Close()
	os.Exit(code)
}

// run executes the command line and returns the exit code.
func run(ctx context.Context, shared *trainer.Shared, args []string, stdout, stderr io.Writer) int {
	root := newRoot(shared, stdout, stderr, args)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintln(stderr, "run_graph_bench:", err)
		return exitUsage
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "run_graph_bench: interrupted")
		return exitInterrupted
	default:
		fmt.Fprintln(stderr, "run_graph_bench:", err)
		return exitFailure
	}
}

// usageError is a bad command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Command tolaria is the coordinator: it resolves configuration, owns the
// run directory, serves metrics and runs training jobs, on the CPU device
// in process or on a GPU through a tolaria-worker process. It never
// initialises CUDA itself.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/field"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // 128 + SIGINT; SIGTERM gives 143
)

// stopSignal is the cause of the context's cancellation on a signal.
type stopSignal struct{ sig syscall.Signal }

func (s stopSignal) Error() string { return "stopped by " + s.sig.String() }

// interruptedCode is the exit code of a run stopped by ctx: 128 plus the
// signal's number, as shells report it.
func interruptedCode(ctx context.Context) int {
	var s stopSignal
	if errors.As(context.Cause(ctx), &s) {
		return 128 + int(s.sig)
	}
	return exitInterrupted
}

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal stops the run with a checkpoint; after it the
		// default handling is back, so a second one ends tolaria at once.
		sig := <-sigs
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		if s, ok := sig.(syscall.Signal); ok {
			cancel(stopSignal{s})
		} else {
			cancel(nil)
		}
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(code)
}

// run executes the command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	var ex exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ex):
		return ex.code
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "tolaria:", field.Render(err, flagOf))
		return exitUsage
	case errors.Is(err, coordinator.ErrConfig):
		fmt.Fprintln(stderr, "tolaria: invalid configuration:", field.Render(err, flagOf))
		return exitUsage
	case errors.Is(err, errSetup):
		fmt.Fprintln(stderr, "tolaria:", strings.TrimPrefix(err.Error(), errSetup.Error()+": "))
		return exitFailure
	case errors.Is(err, coordinator.ErrSetup):
		fmt.Fprintln(stderr, "tolaria:", field.Render(err, flagOf))
		return exitFailure
	case strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintln(stderr, "tolaria:", err)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "tolaria:", err)
		return exitFailure
	}
}

// exitError carries an exit code for an error already reported.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

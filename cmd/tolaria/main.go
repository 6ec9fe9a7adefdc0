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
	// The first signal stops the run with a checkpoint; after it the
	// default handling is back, so a second one ends tolaria at once.
	go func() { <-ctx.Done(); stop() }()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
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
		fmt.Fprintln(stderr, "tolaria:", err)
		return exitUsage
	case errors.Is(err, errSetup):
		fmt.Fprintln(stderr, "tolaria:", strings.TrimPrefix(err.Error(), errSetup.Error()+": "))
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

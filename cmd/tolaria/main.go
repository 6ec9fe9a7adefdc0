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
	"strings"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitInterrupted = 130 // 128 + SIGINT; SIGTERM gives 143
)

// interruptedCode is the exit code of a run stopped by ctx: 128 plus the
// signal's number, as shells report it.
func interruptedCode(ctx context.Context) int {
	if sig, ok := coordinator.StoppedBy(ctx); ok {
		return 128 + int(sig)
	}
	return exitInterrupted
}

// process is what main makes once and passes down: the state the
// in-process runs share, and when tolaria started.
type process struct {
	shared  *trainer.Shared
	started time.Time // a summary's wall time counts from it
}

func main() {
	proc := process{shared: trainer.NewShared(), started: time.Now()}
	ctx, stop := coordinator.StopOnSignal(context.Background())
	code := run(ctx, proc, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	_ = proc.shared.Close()
	os.Exit(code)
}

// run executes the command line and returns the exit code.
func run(ctx context.Context, proc process, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, proc, stdout, stderr)
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
	case errors.Is(err, coordinator.ErrSetup):
		fmt.Fprintln(stderr, "tolaria:", field.Render(err, flagOf))
		return exitFailure
	case strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintln(stderr, "tolaria:", err)
		return exitUsage
	default:
		fmt.Fprintln(stderr, "tolaria:", field.Render(err, flagOf))
		return exitFailure
	}
}

// exitError carries an exit code for an error already reported.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

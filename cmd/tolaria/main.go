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
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/docs/cli"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Exit codes, the same for every command.
const (
	exitOK          = 0
	exitFailure     = 1   // nothing succeeded: no trial, no agent, the run
	exitUsage       = 2   // bad input; nothing was started
	exitSomeFailed  = 3   // some trials, agents or shards failed
	exitInterrupted = 130 // 128 + SIGINT; SIGTERM gives 143
)

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

func newRoot(ctx context.Context, proc process, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "tolaria",
		Short:         "tolaria trains models with CUDA-graph capture and replay",
		Long:          cli.Help("tolaria"),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	// Flag errors (unknown flag, a value that does not parse) are usage;
	// an unknown flag a letter or two off one of the command's is named.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
			var names []string
			cmd.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
			if near := field.Nearest(name, names); near != "" {
				err = fmt.Errorf("%w (did you mean --%s?)", err, near)
			}
		}
		return flagError{usagef("%w; see %s --help", err, cmd.CommandPath())}
	})
	root.AddCommand(newTrainCmd(proc), newSweepCmd(), newEvalCmd(), newSampleCmd(), newRLCmd(), newDevicesCmd(), &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "tolaria", version())
		},
	})
	return root
}

// run executes the command line and returns its exit code: the one
// mapping from errors to codes, for every command. An error names the
// settings at fault by the flags of the command that failed.
func run(ctx context.Context, proc process, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, proc, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	var end *rundir.Ending
	if errors.As(err, &end) {
		return endCode(ctx, end) // reported already
	}
	if strings.HasPrefix(err.Error(), "unknown command") || errors.As(err, new(flagError)) {
		fmt.Fprintln(stderr, "tolaria:", err)
		return exitUsage
	}
	msg, code := field.Render(err, speller(cmd)), exitCode(ctx, err)
	switch {
	case code == exitUsage:
		msg = "invalid configuration: " + msg
	case ctx.Err() != nil:
		msg = "interrupted: " + msg
	}
	fmt.Fprintln(stderr, "tolaria:", msg)
	return code
}

// flagError is a flag the command line got wrong: said as it is, not as
// an invalid configuration.
type flagError struct{ error }

func (e flagError) Unwrap() error { return e.error }

// logger logs text to w from level up.
func logger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// exitCode is the exit status for err, the one mapping from errors to
// codes: errors in what the user gave (flags, files, a checkpoint a worker
// refused) exit 2, a run that ctx stopped 128 plus the signal, an
// evaluation some of whose shards failed 3, anything else 1.
func exitCode(ctx context.Context, err error) int {
	var we *worker.Error
	var shards *eval.ShardsFailedError
	switch {
	case ctx.Err() != nil:
		return interruptedCode(ctx)
	case errors.Is(err, refusal.ErrConfig), errors.As(err, &we) && (we.Kind == worker.KindUsage || we.Kind == worker.KindCheckpoint):
		return exitUsage
	case errors.As(err, &shards):
		return exitSomeFailed
	}
	return exitFailure
}

// endCode is the exit status of an activity's ending. The activity chose
// its Kind when its work ended, before it lingered to serve its final
// metrics; a signal during that linger cuts it short but does not make a
// failure an interruption.
func endCode(ctx context.Context, end *rundir.Ending) int {
	switch end.Kind {
	case rundir.Done:
		return exitOK
	case rundir.SomeFailed:
		return exitSomeFailed
	case rundir.Interrupted:
		return interruptedCode(ctx)
	case rundir.Failed:
		if end.Err != nil {
			return exitCode(context.WithoutCancel(ctx), end.Err)
		}
	}
	return exitFailure
}

// interruptedCode is the exit code of a run stopped by ctx: 128 plus the
// signal's number, as shells report it.
func interruptedCode(ctx context.Context) int {
	if sig, ok := coordinator.StoppedBy(ctx); ok {
		return 128 + int(sig)
	}
	return exitInterrupted
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

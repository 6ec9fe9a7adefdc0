package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newRoot(ctx context.Context, proc process, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "tolaria",
		Short:         "tolaria trains models with CUDA-graph capture and replay",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	// Flag errors (unknown flag, a value that does not parse) are usage.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v", err) })
	root.AddCommand(newTrainCmd(proc), newSweepCmd(), newEvalCmd(), newSampleCmd(), newRLCmd(), &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "tolaria", version())
		},
	})
	return root
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

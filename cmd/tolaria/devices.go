package main

import (
	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/progress"
)

func newDevicesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "list the GPUs a tolaria-worker sees",
		Long: `devices starts a tolaria-worker built for CUDA (--worker, default next to
tolaria or $TOLARIA_WORKER) and prints the GPUs its driver reports, after
CUDA_VISIBLE_DEVICES: ordinal (what cuda:N means), name, PCI bus id, compute
capability, total and free memory (free counts every process on the GPU),
and whether tolaria's kernels run on it (compute capability 8.0 or newer).
tolaria itself never initialises CUDA.

Exit status: 0 listed (an empty list when the driver reports none), 1 no
worker, a worker built without CUDA, or a driver that fails (the message
says which), 130 interrupted.`,
		Args: cobra.NoArgs,
	}
	var workers workerFlags
	var asJSON bool
	fs := cmd.Flags()
	workers.register(fs, "the tolaria-worker")
	fs.BoolVar(&asJSON, "json", false, "print the list as JSON ({\"gpus\": [...]}) instead of a table")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := workers.check(); err != nil {
			return err
		}
		gpus, err := coordinator.GPUs(cmd.Context(), workers.gpus())
		if err != nil {
			return err
		}
		return progress.GPUs(cmd.OutOrStdout(), gpus, asJSON)
	}
	return cmd
}

package main

import (
	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/docs/cli"
	"github.com/tolaria-ml/tolaria/internal/progress"
)

func newDevicesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "list the GPUs a tolaria-worker sees",
		Long:  cli.Help("devices"),
		Args:  cobra.NoArgs,
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

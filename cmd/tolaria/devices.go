package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/coordinator"
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
		gpus, err := coordinator.GPUs(cmd.Context(), coordinator.GPUsRequest{Worker: workers.path,
			WorkerStart: workers.start, HeartbeatTimeout: workers.heartbeat})
		if err != nil {
			return err
		}
		if asJSON {
			if gpus == nil {
				gpus = []coordinator.GPU{}
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"gpus": gpus})
		}
		return printGPUs(cmd.OutOrStdout(), gpus)
	}
	return cmd
}

// printGPUs writes the GPUs as a table, or says there is none.
func printGPUs(w io.Writer, gpus []coordinator.GPU) error {
	if len(gpus) == 0 {
		_, err := fmt.Fprintln(w, "no GPU: the CUDA driver reports none (check CUDA_VISIBLE_DEVICES)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "device\tname\tpci bus id\tcompute\tmemory\tfree\tusable")
	for _, g := range gpus {
		usable := "yes"
		if !g.Usable {
			usable = "no: " + g.Reason
		}
		fmt.Fprintf(tw, "cuda:%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Ordinal, g.Name, g.PCIBusID, g.ComputeCapability,
			humanize.IBytes(uint64(g.TotalBytes)), humanize.IBytes(uint64(g.FreeBytes)), usable)
	}
	return tw.Flush()
}

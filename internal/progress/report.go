package progress

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"text/tabwriter"

	"github.com/dustin/go-humanize"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/internal/shellword"
)

// The reports here are what a command prints once its work has ended: a
// training run's summary, a sweep's ranking, an RL run's agents, an
// evaluation's figures, the GPUs, a Slurm dry run.

// PlotFile is the return-curve chart DrawReturns writes into a run
// directory.
const PlotFile = "returns.png"

// Plotter is run_graph_bench, which draws an RL run's return curves:
// next to the running program, or on the PATH. tolaria links no plotting.
func Plotter() (string, error) {
	bench := "run_graph_bench"
	if self, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(self), bench); fileExists(p) {
			bench = p
		}
	}
	path, err := exec.LookPath(bench)
	if err != nil {
		return "", fmt.Errorf("no run_graph_bench next to tolaria or on the PATH: build it with make build, or leave out --plot and draw the chart later with run_graph_bench rl-plot RUN")
	}
	return path, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// GPUs prints the GPUs as a table, or says there is none; asJSON prints
// them as {"gpus": [...]} instead.
func GPUs(w io.Writer, gpus []coordinator.GPU, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"gpus": append([]coordinator.GPU{}, gpus...)})
	}
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

// dryRun prints what a Slurm dry run shows: the batch script, to be
// written to where, and the sbatch command that would submit it.
func dryRun(w io.Writer, where, script string, command []string) error {
	_, err := fmt.Fprintf(w, "# the batch script (written to %s when submitted):\n%s\n# submitted with:\n%s\n", where, script, shellword.Join(command...))
	return err
}

// Plural is n and noun, with an s unless n is 1.
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

package progress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// The reports here are what a command prints once its work has ended: a
// training run's summary, a sweep's ranking, an RL run's agents, an
// evaluation's figures, the GPUs, a Slurm dry run.

// TrainSummary prints a training run's figures; accuracy says whether its
// loss has one (a regression loss has not).
func TrainSummary(w io.Writer, s trainer.Summary, accuracy bool, runDir string) {
	eval := fmt.Sprintf("test accuracy %.4f, test loss %.4f", s.TestAccuracy, s.TestLoss)
	switch {
	case len(s.EpochSeconds) == 0:
		eval = "no epoch finished, so no evaluation yet" // the zeros in summary.json are not results
	case !accuracy:
		eval = fmt.Sprintf("test loss %.4f", s.TestLoss)
	}
	fmt.Fprintf(w, "device %s, graphs %v: %d steps (%d replays, %d eager), %s, train loss %.4f, %.0f samples/s\n",
		s.Device, s.GraphEnabled, s.Steps, s.GraphReplays, s.EagerSteps, eval, s.TrainLoss, s.SamplesPerSecond)
	if len(s.Fallbacks) > 0 {
		var by []string
		for _, reason := range slices.Sorted(maps.Keys(s.Fallbacks)) {
			by = append(by, fmt.Sprintf("%s %d", reason, s.Fallbacks[reason]))
		}
		fmt.Fprintf(w, "eager fallbacks by reason: %s\n", strings.Join(by, ", "))
	}
	fmt.Fprintf(w, "params sha256 %s\nrun directory %s\n", s.ParamsSHA256, runDir)
}

// TrainStopped says where a stopped run stands and how to go on;
// maxSteps is the --max-steps that stopped it, 0 when it was interrupted.
// --max-steps counts the steps of one start, summary.json's steps the
// whole run's: a resumed run's line says both, so that "--max-steps 3"
// and "8 steps" do not read as a contradiction.
func TrainStopped(w io.Writer, dir *rundir.Dir, sum trainer.Summary, maxSteps int) {
	how := "interrupted"
	if maxSteps > 0 {
		how = fmt.Sprintf("stopped by --max-steps %d", maxSteps)
	}
	if ran := sum.Steps - sum.ResumedFromStep; ran > 0 {
		after := fmt.Sprintf("interrupted after %d steps", ran)
		if maxSteps > 0 {
			after = fmt.Sprintf("stopped after %d steps (--max-steps %d)", ran, maxSteps)
		}
		if sum.ResumedFromStep > 0 {
			after += fmt.Sprintf(", %d in all", sum.Steps)
		}
		fmt.Fprintf(w, "tolaria: %s; checkpoint saved; continue with: tolaria train --resume --run-dir %s\n", after, dir.Path())
		return
	}
	if cks, _ := dir.Checkpoints(); len(cks) > 0 {
		fmt.Fprintf(w, "tolaria: %s before any step ran; the checkpoint of step %d is unchanged; continue with: tolaria train --resume --run-dir %s\n",
			how, sum.ResumedFromStep, dir.Path())
		return
	}
	fmt.Fprintf(w, "tolaria: %s before the first step; nothing to resume: run the same command again (with another --run-dir, or after removing %s)\n", how, dir.Path())
}

// TrainFailed says why a run failed and, when its checkpoint can be
// resumed from, the command that continues it. A worker's refusal of what
// the user gave (refused) gets no hint: the same command would fail again.
func TrainFailed(w io.Writer, err error, interrupted, refused bool, dir *rundir.Dir) {
	var we *worker.Error
	switch {
	case interrupted:
		fmt.Fprintf(w, "tolaria: interrupted: %v\n", err)
	case errors.As(err, &we):
		fmt.Fprintf(w, "tolaria: %s\n", we.Message)
		if refused {
			return
		}
		var wf *train.WorkerFailure
		if errors.As(err, &wf) {
			fmt.Fprintln(w, wf.Note())
		}
	default:
		fmt.Fprintf(w, "tolaria: training failed: %v\n", err)
	}
	if step, ok := dir.ResumableStep(); ok {
		fmt.Fprintf(w, "tolaria: the checkpoint of step %d is kept; continue with: tolaria train --resume --run-dir %s\n", step, dir.Path())
	}
}

// SweepResults prints a sweep's ranked trials.
func SweepResults(w io.Writer, r sweep.Results, dir string) {
	width := len("trial")
	for _, t := range r.Trials {
		width = max(width, len(t.Name))
	}
	fmt.Fprintf(w, "%-4s  %-*s  %-11s  %s\n", "rank", width, "trial", "state", r.RankBy)
	for _, t := range r.Trials {
		rank, value := "-", ""
		if t.Rank > 0 {
			rank = strconv.Itoa(t.Rank)
		}
		if t.Value != nil {
			value = strconv.FormatFloat(*t.Value, 'f', 4, 64)
		} else if t.Reason != "" {
			value = FirstLine(t.Reason, 100)
		}
		fmt.Fprintf(w, "%-4s  %-*s  %-11s  %s\n", rank, width, t.Name, t.State, value)
	}
	fmt.Fprintf(w, "results %s/%s\n", dir, sweep.ResultsJSON)
}

// RLSummary prints an RL run's agents, one row each.
func RLSummary(w io.Writer, s rl.Summary) {
	switch {
	case s.Env != "" && s.Goal.Episodes == 0 && len(s.ScriptedBaseline) > 0:
		each := make([]string, len(s.ScriptedBaseline))
		for i, b := range s.ScriptedBaseline {
			each[i] = fmt.Sprintf("%.2f (agent %d)", b, i)
		}
		fmt.Fprintf(w, "env %s: no goal of its own; the agents must beat the scripted baseline, whose mean return over the greedy evaluation's episodes is %s\n",
			s.Env, strings.Join(each, ", "))
	case s.Env != "":
		fmt.Fprintf(w, "env %s: the goal is a greedy mean return of at least %g over %d episodes\n", s.Env, s.Goal.Return, s.Goal.Episodes)
	}
	fmt.Fprintf(w, "%-5s  %-11s  %8s  %9s  %9s  %11s  %9s  %s\n", "agent", "state", "episodes", "mean-100", "best-100", "greedy best", "env steps", "solved at")
	for _, a := range s.Agents {
		solved, greedy, best := "-", "-", "-"
		if a.SolvedAt >= 0 {
			solved = fmt.Sprint(a.SolvedAt)
		}
		if a.Evaluations > 0 {
			greedy = fmt.Sprintf("%.1f", a.BestEvalMeanReturn)
		}
		if a.Episodes >= rl.MeanEpisodes {
			best = fmt.Sprintf("%.1f", a.BestMeanReturn) // none before a full window
		}
		fmt.Fprintf(w, "%-5d  %-11s  %8d  %9.1f  %9s  %11s  %9d  %s\n", a.Agent, a.State, a.Episodes, a.MeanReturn, best, greedy, a.EnvSteps, solved)
		if a.Reason != "" {
			fmt.Fprintf(w, "       %s\n", FirstLine(a.Reason, 200))
		}
	}
	fmt.Fprintf(w, "summary %s/%s\n", s.Dir, rundir.SummaryFile)
}

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

// DrawReturns has bench (Plotter) draw an RL run's return curves into
// dir's PlotFile. A failure is said on stderr.
func DrawReturns(ctx context.Context, bench, dir string, stdout, stderr io.Writer) {
	draw := exec.CommandContext(context.WithoutCancel(ctx), bench, "rl-plot", dir, "--output", filepath.Join(dir, PlotFile))
	draw.Stdout, draw.Stderr = stdout, stderr
	if err := draw.Run(); err != nil {
		fmt.Fprintf(stderr, "tolaria: --plot: %s rl-plot %s: %v\n", bench, dir, err)
	}
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

// DryRun prints what a Slurm dry run shows: the batch script, to be
// written to where, and the sbatch command that would submit it.
func DryRun(w io.Writer, where string) func(script string, command []string) error {
	return func(script string, command []string) error {
		_, err := fmt.Fprintf(w, "# the batch script (written to %s when submitted):\n%s\n# submitted with:\n%s\n", where, script, ShellCommand(command))
		return err
	}
}

// ShellCommand spells a command for a shell, quoting every word that
// holds anything but letters, digits and -_./=:,+@%: a list of what to
// quote would miss one (!, {}, ^, a character of another script).
func ShellCommand(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		plain := strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0
		if a == "" || !plain {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// Plural is n and noun, with an s unless n is 1.
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

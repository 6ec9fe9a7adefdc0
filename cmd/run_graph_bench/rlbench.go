package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tolaria-ml/tolaria/bench"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// rlOptions are run_graph_bench rl's flags.
type rlOptions struct {
	config, graphs, device, worker, output, plot string
	agents                                       []int
	repeats, totalSteps, learningStarts          int
	threads, maxLead                             int
	reportEvery                                  time.Duration
	quiet                                        bool
}

func newRLBenchCmd(shared *trainer.Shared, argv []string) *cobra.Command {
	var o rlOptions
	cmd := &cobra.Command{
		Use:   "rl",
		Short: "measure tolaria rl's actor and learner processes against the sequential loop",
		Long: `rl measures the speed-up of tolaria rl's runtime, in which each agent is an actor
process and a learner process meeting in the agent's memory file (started as
tolaria rl starts them), over the sequential loop, in which one goroutine of
this process steps every agent's actor and learner in turn. At each --agents
count and --graphs setting both modes run the same configuration for the same
steps, back to back, the one that goes first alternating; --repeats rounds of
that. Each run is measured over its steady window: from the first progress
reading at which every agent's learner has trained to the last before any agent
has taken all its steps (start-up, the buffer's filling and the end are left
out, in both modes alike). It reports environment steps/s and learner steps/s
of all agents together, the processes' over the sequential loop's round by
round, and graphs on over graphs off, as JSON, a table and a chart (PNG).

docs/bench.md explains every number.`,
		Example: `  run_graph_bench rl --output bench/results/rl-cpu.json --plot bench/results/rl-cpu.png
  run_graph_bench rl --agents 1,2 --repeats 1 --total-steps 1500 --graphs on`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("rl: unexpected argument %q: it takes flags only (see --help)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runRLBench(cmd, shared, o, argv) },
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.agents, "agents", bench.DefaultRLAgents, "agent counts to measure, in increasing order")
	f.StringVar(&o.graphs, "graphs", "both", "the runtime's graphs (the learner's training step and the actor's forward pass captured and replayed): on, off or both")
	f.IntVar(&o.repeats, "repeats", bench.DefaultRLRepeats, "rounds; each runs every point in both modes")
	f.StringVar(&o.config, "config", "", "tolaria rl's YAML configuration (docs/rl.md); default: tolaria rl's defaults, with no greedy evaluations and no stop when solved")
	f.IntVar(&o.totalSteps, "total-steps", bench.DefaultRLTotalSteps, "environment steps per agent and run (total_steps; with --config, the file's unless this flag is given)")
	f.IntVar(&o.learningStarts, "learning-starts", bench.DefaultRLLearningStarts, "environment steps before an agent's first training step (learning_starts; with --config, the file's unless this flag is given)")
	f.StringVar(&o.device, "device", "cpu", "cpu: both modes on the CPU device (the sequential loop runs in this process, which never links CUDA)")
	f.StringVar(&o.worker, "worker", os.Getenv("TOLARIA_WORKER"), "path of the tolaria-worker binary that runs the actors and learners (default: next to run_graph_bench)")
	f.IntVar(&o.threads, "threads", 1, "CPU device threads per worker process, and of the sequential loop's device")
	f.IntVar(&o.maxLead, "max-lead", 50, "training steps' worth of transitions an actor may run ahead of its learner in the processes' mode (0: no bound), as tolaria rl's --max-lead")
	f.DurationVar(&o.reportEvery, "report-interval", 100*time.Millisecond, "how often every actor and learner process reports its counters: the readings that bound the processes' steady window")
	f.StringVar(&o.output, "output", "", "write the JSON report to this file")
	f.StringVar(&o.plot, "plot", "", "write the chart (PNG) to this file")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

// rlConfig turns the flags into a measurement, reporting a bad flag by
// name.
func (o rlOptions) rlConfig(cmd *cobra.Command) (bench.RLConfig, error) {
	c := bench.RLConfig{Agents: o.agents, Repeats: o.repeats, DQN: bench.RLTrainingConfig(), Device: o.device,
		Threads: o.threads, MaxLead: o.maxLead}
	switch o.graphs {
	case "both":
		c.Graphs = []bool{true, false}
	case "on":
		c.Graphs = []bool{true}
	case "off":
		c.Graphs = []bool{false}
	default:
		return c, usagef("--graphs: must be on, off or both, got %q", o.graphs)
	}
	switch {
	case o.device == "cuda":
		return c, usagef("--device cuda: not measured yet: the sequential loop would have to run in a CUDA tolaria-worker, and run_graph_bench rl runs it in its own process, which never links CUDA; use --device cpu")
	case o.device != "cpu":
		return c, usagef("--device: must be cpu, got %q", o.device)
	case o.repeats < 1 || o.repeats > 100:
		return c, usagef("--repeats: must be in 1..100, got %d", o.repeats)
	case o.threads < 1:
		return c, usagef("--threads: must be at least 1, got %d", o.threads)
	case o.maxLead < 0:
		return c, usagef("--max-lead: must be 0 or more, got %d", o.maxLead)
	case o.reportEvery < time.Millisecond || o.reportEvery > time.Minute:
		return c, usagef("--report-interval: must be in 1ms..1m, got %v", o.reportEvery)
	}
	if o.config != "" {
		raw, err := os.ReadFile(o.config)
		if err != nil {
			return c, usagef("--config: %v", err)
		}
		if c.DQN, err = dqn.ParseConfig(raw); err != nil {
			return c, usagef("%s: %v", o.config, err)
		}
	}
	if o.config == "" || cmd.Flags().Changed("total-steps") {
		c.DQN.TotalSteps = o.totalSteps
	}
	if o.config == "" || cmd.Flags().Changed("learning-starts") {
		c.DQN.LearningStarts = o.learningStarts
	}
	path, err := findWorker(o.worker)
	if err != nil {
		return c, err
	}
	c.Processes = processRunner(path, o.threads, o.maxLead, o.reportEvery)
	c.Sequential = bench.SequentialRunner(openCPU(o.threads))
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return c, usagef("--%s", flagNames(err.Error()))
	}
	return c, nil
}

// flagNames renders a configuration error's keys that this command sets
// by flag as the flags; the others are the --config file's keys.
func flagNames(msg string) string {
	for key, flag := range map[string]string{"total_steps": "total-steps", "learning_starts": "learning-starts"} {
		if rest, ok := strings.CutPrefix(msg, key+":"); ok {
			return flag + ":" + rest
		}
	}
	if k, _, ok := strings.Cut(msg, ":"); ok && strings.ContainsAny(k, "_.") {
		return "config: " + msg // a key of the configuration, named as the file names it
	}
	return msg
}

func runRLBench(cmd *cobra.Command, _ *trainer.Shared, o rlOptions, argv []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	cfg, err := o.rlConfig(cmd)
	if err != nil {
		return err
	}
	if err := errors.Join(checkWritable("output", o.output), checkWritable("plot", o.plot)); err != nil {
		return err
	}
	if !o.quiet {
		cfg.Progress = func(msg string) { fmt.Fprintln(stderr, "run_graph_bench rl:", msg) }
	}
	rep, err := bench.RunRL(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	rep.Command = commandLine(argv)
	if err := writeOutputs(o.output, o.plot, func(w io.Writer) error { return bench.WriteRLJSON(w, rep) },
		func(w io.Writer) error { return writeRLChart(w, rep) }); err != nil {
		return err
	}
	return writeRLText(stdout, rep)
}

// findWorker locates the tolaria-worker that runs the actors and
// learners, as tolaria rl does.
func findWorker(path string) (string, error) {
	p, err := worker.Find(path)
	if err != nil {
		return "", usagef("--worker: %v", err)
	}
	return p, nil
}

// processRunner runs the agents as tolaria rl does: rl.Prepare
// and Run, each agent's actor and learner in worker processes, in a
// temporary run directory, measured from the agents' progress reports.
func processRunner(workerPath string, threads, maxLead int, every time.Duration) bench.RLRunner {
	return func(ctx context.Context, cfg dqn.Config, graphs bool) (bench.RLWindow, error) {
		dir, err := os.MkdirTemp("", "run_graph_bench-rl-")
		if err != nil {
			return bench.RLWindow{}, err
		}
		defer os.RemoveAll(dir)
		meter := bench.NewRLMeter(cfg.NumAgents, cfg.TotalSteps)
		req := rl.Request{Config: cfg, ConfigYAML: cfg.YAML(), Dir: filepath.Join(dir, "run"), Device: "cpu",
			Graphs: graphs, MaxLead: maxLead, Threads: threads, Worker: workerPath, ReportEvery: every,
			Report: func(st rl.AgentStatus) { meter.Observe(time.Now(), st.Agent, st.EnvSteps, st.LearnerSteps) }}
		start := time.Now()
		run, err := rl.Prepare(req, start)
		if err != nil {
			return bench.RLWindow{}, err
		}
		sum, err := run.Run(ctx)
		err = errors.Join(err, run.Close())
		wall := time.Since(start).Seconds()
		if err != nil {
			return bench.RLWindow{}, err
		}
		for _, a := range sum.Agents {
			switch {
			case a.State != rl.AgentSucceeded:
				return bench.RLWindow{}, fmt.Errorf("agent %d %s: %s", a.Agent, a.State, a.Reason)
			case a.Fallbacks > 0:
				return bench.RLWindow{}, fmt.Errorf("agent %d: %d learner steps ran eagerly although graphs were on", a.Agent, a.Fallbacks)
			}
		}
		w, err := meter.Window()
		w.WallSeconds = wall
		return w, err
	}
}

// writeRLText prints the report's points as a table.
func writeRLText(w io.Writer, rep *bench.RLReport) error {
	fmt.Fprintf(w, "%s, %s, %d steps per agent (%d before learning), %d round(s); all agents together, median over the rounds [min, max]\n",
		rep.Device, rep.Env, rep.Settings.TotalSteps, rep.Settings.LearningStarts, rep.Settings.Repeats)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "agents\tgraphs\tenv/s processes\tenv/s sequential\tspeed-up\tlearner/s processes\tlearner/s sequential\tspeed-up\t")
	for _, p := range rep.Points {
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.0f\t%s\t%.0f\t%.0f\t%s\t\n", p.Agents, onOff(p.Graphs),
			p.Processes.EnvStepsPerSec.Median, p.Sequential.EnvStepsPerSec.Median, spreadText(p.EnvSpeedup),
			p.Processes.LearnerStepsPerSec.Median, p.Sequential.LearnerStepsPerSec.Median, spreadText(p.LearnerSpeedup))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.GraphsGain) > 0 {
		fmt.Fprintln(w, "graphs on over off, learner steps/s (env steps/s):")
		for _, g := range rep.GraphsGain {
			fmt.Fprintf(w, "  agents %d, %s: %s (%s)\n", g.Agents, g.Mode, spreadText(g.LearnerGain), spreadText(g.EnvGain))
		}
	}
	_, err := fmt.Fprintf(w, "%d runs in %.0f s; load average %s at the start, %s at the end\n", len(rep.Runs), rep.WallSeconds, rep.Host.LoadAvg, rep.LoadAvgEnd)
	return err
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// spreadText is a ratio's median and its range over the rounds.
func spreadText(s bench.RLSpread) string {
	if s.N <= 1 {
		return fmt.Sprintf("%.2fx", s.Median)
	}
	return fmt.Sprintf("%.2fx [%.2f, %.2f]", s.Median, s.Min, s.Max)
}

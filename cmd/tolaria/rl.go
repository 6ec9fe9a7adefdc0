package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/docs/cli"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/internal/progress"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/telemetry"
)

func newRLCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rl [--config FILE] [--agents N]",
		Short: "train reinforcement-learning agents (Double DQN), each an actor process and a learner process",
		Long:  cli.Help("rl"),
		Args:  cobra.NoArgs,
	}
	var f rlFlags
	fs := cmd.Flags()
	fs.StringVar(&f.config, "config", "", "YAML configuration file (see docs/rl.md); default: the defaults of docs/rl.md")
	def := dqn.DefaultConfig()
	fs.IntVar(&f.cfg.NumAgents, "agents", def.NumAgents, "independent agents, each an actor and a learner process")
	fs.IntVar(&f.cfg.TotalSteps, "total-steps", def.TotalSteps, "environment steps per agent")
	fs.Uint64Var(&f.cfg.Seed, "seed", def.Seed, "seed; agent i uses seed+i")
	fs.BoolVar(&f.cfg.StopWhenSolved, "stop-when-solved", def.StopWhenSolved, "stop an agent once a greedy evaluation (eval_interval) solves the environment: a mean return over 100 or more episodes of 475 on CartPole-v1, -100 on Acrobot-v1, -110 on MountainCar-v0 (its actor and learner stop within half a second, the learner checkpointing); false trains every total_steps")
	fs.BoolVar(&f.cfg.Lockstep, "lockstep", def.Lockstep, "each agent's actor and learner take turns: collect lockstep_collect transitions (default 10), train lockstep_train steps (default 10), publish, sync; slower, and repeatable: the same configuration gives the same weights, returns and buffers, bit for bit, as a finished agent's kept replay.buf shows")
	fs.StringVar(&f.cfg.Actor, "actor", "", "how the agents act: per-agent (an actor process per agent, stepping environments of its own: the default for CartPole-v1, Acrobot-v1, MountainCar-v0) or shared (one actor process stepping one world that every agent acts in: the default, and the only mode, for Forage); see docs/rl.md")
	for flag, key := range map[string]field.Name{"agents": "num_agents", "total-steps": "total_steps", "seed": "seed", "stop-when-solved": "stop_when_solved", "lockstep": "lockstep", "actor": "actor"} {
		setsKey(fs, flag, key, true)
		fs.Lookup(flag).Usage += " (" + string(key) + ")"
	}
	fs.StringVar(&f.req.Dir, "run-dir", "", "run directory, new (default runs/rl-<time>); with --resume, the run to continue")
	fs.BoolVar(&f.req.Resume, "resume", false, "continue the interrupted run in --run-dir: each learner from its checkpoint, each buffer as saved")
	registerDevice(fs, &f.req.Device, "; each worker opens its own")
	f.place.registerDevices(fs, "to place the agents on, agent i's learner and its actor on the (i mod N)-th of N")
	fs.BoolVar(&f.req.Graphs, "enable-graphs", true, "actors and learners capture their step once and replay it")
	fs.IntVar(&f.req.MaxLead, "max-lead", 50, "training steps' worth of transitions an actor may run ahead of its learner (0: no bound)")
	fs.IntVar(&f.req.Threads, "threads", 1, "CPU device threads per worker process")
	fs.IntVar(&f.req.ActorRestarts, "actor-restarts", 3, "start a failed actor again up to N times before its agent fails")
	f.memory.register(fs, "agents'", "an agent's actor and learner ask for theirs together before they allocate; ")
	f.worker.register(fs, "an actor or learner")
	f.metrics.register(fs, ": returns, steps/s, weight lag, publishes, syncs and restarts per agent")
	fs.BoolVar(&f.plot, "plot", false, "draw every agent's return curve into the run directory's "+progress.PlotFile+" at the end (with run_graph_bench rl-plot, next to tolaria or on the PATH)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runRL(cmd.Context(), cmd, &f) }
	return cmd
}

// rlFlags are tolaria rl's flags: the file's keys that flags override,
// and the run's own settings.
type rlFlags struct {
	config  string
	cfg     dqn.Config // only the fields of flags given are used
	req     rl.Request
	worker  workerFlags
	metrics metricsFlags
	place   placementFlags
	plot    bool
	memory  memoryFlag
}

// request checks the flags and resolves the run's configuration: the
// file's (or, to resume, the run's), the flags given over it
// (rl.Request.Resolve).
func (f *rlFlags) request(fs *pflag.FlagSet) (rl.Request, error) {
	req := f.req
	var err error
	if err = errors.Join(checkDevice(req.Device), f.worker.check(), f.metrics.check()); err != nil {
		return req, err
	}
	if req.DeviceMemory, err = f.memory.bytes(); err != nil {
		return req, err
	}
	req.Worker, req.WorkerStart, req.HeartbeatTimeout = f.worker.path, f.worker.start, f.worker.heartbeat
	return req, req.Resolve(f.config, fileKeys(fs))
}

func runRL(ctx context.Context, cmd *cobra.Command, f *rlFlags) error {
	req, err := f.request(cmd.Flags())
	if err != nil {
		return err
	}
	out := progress.Streams{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	return rl.Execute(ctx, req, rl.Options{
		View:    func(agents, totalSteps int) rl.View { return progress.NewRLView(out, agents, totalSteps) },
		Devices: f.place.chooser(f.worker),
		Serve: func(log *slog.Logger, families func() (*telemetry.Metrics, error)) (rl.Served, error) {
			return train.ServeFamilies(ctx, f.metrics.addr, log, families)
		},
		Version: version(), Linger: f.metrics.linger, LinksCUDA: train.LinksCUDA(), Plot: f.plot,
	})
}

package main

import (
	"errors"
	"log/slog"

	"github.com/spf13/cobra"

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
	var cfg dqn.Config // only the fields of flags given are used
	var req rl.Request
	var config string
	var workers workerFlags
	var metrics metricsFlags
	var place placementFlags
	var memory memoryFlag
	var plot bool
	fs := cmd.Flags()
	fs.StringVar(&config, "config", "", "YAML configuration file (see docs/rl.md); default: the defaults of docs/rl.md")
	def := dqn.DefaultConfig()
	fs.IntVar(&cfg.NumAgents, "agents", def.NumAgents, "independent agents, each an actor and a learner process")
	fs.IntVar(&cfg.TotalSteps, "total-steps", def.TotalSteps, "environment steps per agent")
	fs.Uint64Var(&cfg.Seed, "seed", def.Seed, "seed; agent i uses seed+i")
	fs.BoolVar(&cfg.StopWhenSolved, "stop-when-solved", def.StopWhenSolved, "stop an agent once a greedy evaluation (eval_interval) solves the environment: a mean return over 100 or more episodes of 475 on CartPole-v1, -100 on Acrobot-v1, -110 on MountainCar-v0 (its actor and learner stop within half a second, the learner checkpointing); false trains every total_steps")
	fs.BoolVar(&cfg.Lockstep, "lockstep", def.Lockstep, "each agent's actor and learner take turns: collect lockstep_collect transitions (default 10), train lockstep_train steps (default 10), publish, sync; slower, and repeatable: the same configuration gives the same weights, returns and buffers, bit for bit, as a finished agent's kept replay.buf shows")
	fs.StringVar(&cfg.Actor, "actor", "", "how the agents act: per-agent (an actor process per agent, stepping environments of its own: the default for CartPole-v1, Acrobot-v1, MountainCar-v0) or shared (one actor process stepping one world that every agent acts in: the default, and the only mode, for Forage); see docs/rl.md")
	for flag, key := range map[string]field.Name{"agents": "num_agents", "total-steps": "total_steps", "seed": "seed", "stop-when-solved": "stop_when_solved", "lockstep": "lockstep", "actor": "actor"} {
		setsKey(fs, flag, key, true)
		fs.Lookup(flag).Usage += " (" + string(key) + ")"
	}
	fs.StringVar(&req.Dir, "run-dir", "", "run directory, new (default runs/rl-<time>); with --resume, the run to continue")
	fs.BoolVar(&req.Resume, "resume", false, "continue the interrupted run in --run-dir: each learner from its checkpoint, each buffer as saved")
	registerDevice(fs, &req.Device, "; each worker opens its own")
	place.registerDevices(fs, "to place the agents on, agent i's learner and its actor on the (i mod N)-th of N")
	fs.BoolVar(&req.Graphs, "enable-graphs", true, "actors and learners capture their step once and replay it")
	fs.IntVar(&req.MaxLead, "max-lead", 50, "training steps' worth of transitions an actor may run ahead of its learner (0: no bound)")
	fs.IntVar(&req.Threads, "threads", 1, "CPU device threads per worker process")
	fs.IntVar(&req.ActorRestarts, "actor-restarts", 3, "start a failed actor again up to N times before its agent fails")
	memory.register(fs, "agents'", "an agent's actor and learner ask for theirs together before they allocate; ")
	workers.register(fs, "an actor or learner")
	metrics.register(fs, ": returns, steps/s, weight lag, publishes, syncs and restarts per agent")
	fs.BoolVar(&plot, "plot", false, "draw every agent's return curve into the run directory's "+progress.PlotFile+" at the end (with run_graph_bench rl-plot, next to tolaria or on the PATH)")
	// RunE checks the flags, resolves the run's configuration (the file's
	// or, to resume, the run's, with the flags given over it:
	// rl.Request.Resolve) and runs it.
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		var err error
		if err = errors.Join(checkDevice(req.Device), workers.check(), metrics.check()); err != nil {
			return err
		}
		if req.DeviceMemory, err = memory.bytes(); err != nil {
			return err
		}
		var plotter string
		if plot {
			if plotter, err = progress.Plotter(); err != nil {
				return usagef("--plot: %v", err)
			}
		}
		req.Worker, req.WorkerStart, req.HeartbeatTimeout = workers.path, workers.start, workers.heartbeat
		if err = req.Resolve(config, fileKeys(fs)); err != nil {
			return err
		}
		out := progress.Streams{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
		return rl.Execute(ctx, req, rl.Options{
			View:    func(agents, totalSteps int) rl.View { return progress.NewRL(out, agents, totalSteps, plotter) },
			Devices: place.chooser(workers),
			Serve: func(log *slog.Logger, families func() (*telemetry.Metrics, error)) (rl.Served, error) {
				return train.ServeFamilies(ctx, metrics.addr, log, families)
			},
			Version: version(), Linger: metrics.linger, LinksCUDA: train.LinksCUDA(), Plot: plot,
		})
	}
	return cmd
}

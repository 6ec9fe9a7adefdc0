package rl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/telemetry"
)

// View shows an RL run to its user: a row per agent as it trains, the
// agents' summary at the end and what is said last. Package progress
// draws one.
type View interface {
	Logs() io.Writer // the log's lines, drawn above the rows
	Start()          // the rows appear
	Update(AgentStatus)
	Close() // the rows stop; later lines go below them
	Summary(Summary)
	Plot(ctx context.Context, runDir string) // every agent's return curve
	Note(msg string)                         // the last thing said
}

// Served is where a run's metrics are served for Prometheus.
type Served interface {
	Linger(ctx context.Context, d time.Duration)
	Close() error
}

// Options are how Execute shows a run, where it places the agents and
// how it serves their metrics.
type Options struct {
	// View draws a run of agents, each of totalSteps.
	View func(agents, totalSteps int) View
	// Devices resolves the request's device on this machine (the GPUs
	// named and checked, or those a worker finds), as every activity does.
	Devices func(ctx context.Context, device string, log *slog.Logger) (string, []int, error)
	// Serve serves the metrics families makes (called at most once) until
	// Close, logging to log; the coordinator's one metrics server.
	Serve     func(log *slog.Logger, families func() (*telemetry.Metrics, error)) (Served, error)
	Version   string        // the tolaria version the metrics carry
	Linger    time.Duration // /metrics is served this long after the end
	LinksCUDA bool          // whether this binary links CUDA, for the log
	Plot      bool          // draw the return curves at the end
}

// Execute places and runs the agents req asks for from start to end,
// shows their summary and keeps their metrics served for opt.Linger. It
// returns nil when every agent succeeded; a rundir.Ending, already
// reported, when some or all failed or ctx stopped the run; the setup
// error that failed the agents; or any other error before anything ran.
func Execute(ctx context.Context, req Request, opt Options) error {
	view := opt.View(req.Config.NumAgents, req.Config.TotalSteps)
	defer view.Close()
	log := slog.New(slog.NewTextHandler(view.Logs(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	if req.Device, req.GPUs, err = opt.Devices(ctx, req.Device, log); err != nil {
		return err
	}
	var rlm *telemetry.RLMetrics
	metrics, err := opt.Serve(log, func() (m *telemetry.Metrics, err error) {
		m, rlm, err = NewMetrics(opt.Version)
		return m, err
	})
	if err != nil {
		return err
	}
	defer metrics.Close()
	req.Logger, req.Report, req.Metrics = log, view.Update, rlm
	run, err := Prepare(req, time.Now())
	if err != nil {
		return err
	}
	defer run.Close()
	log.Info(fmt.Sprintf("CUDA initialized in coordinator: %v", opt.LinksCUDA))
	goal := req.Config.Goal()
	goalText := fmt.Sprintf("a greedy mean return of %g over %d episodes", goal.Return, goal.Episodes)
	if goal.Episodes == 0 {
		goalText = "none: beat the scripted baseline"
	}
	log.Info("rl", "agents", req.Config.NumAgents, "env", req.Config.Env.String(), "actor", req.Config.ActorMode(),
		"goal", goalText, "total_steps", req.Config.TotalSteps,
		"resume", req.Resume, "graphs", req.Graphs, "run_dir", run.Dir())
	view.Start()
	sum, runErr := run.Run(ctx)
	view.Close()
	view.Summary(sum)
	if opt.Plot {
		view.Plot(ctx, run.Dir())
	}
	defer metrics.Linger(ctx, opt.Linger)
	ok := 0
	for _, a := range sum.Agents {
		if a.State == AgentSucceeded {
			ok++
		}
	}
	switch {
	case ctx.Err() != nil:
		view.Note(interruptedNote(sum))
		return &rundir.Ending{Kind: rundir.Interrupted}
	case ok < len(sum.Agents) && errors.Is(runErr, refusal.ErrSetup):
		return runErr
	}
	note, end := rundir.Outcome(ok, len(sum.Agents), "agent", filepath.Join(run.Dir(), rundir.SummaryFile))
	if end != nil {
		view.Note(note)
	}
	return end
}

// interruptedNote says what an interrupted run saved, as its agents read
// it from their directories when they ended: which learners checkpointed,
// which buffers were saved, what --resume does with those that were not,
// and whether the shared world was saved.
func interruptedNote(sum Summary) string {
	// Agents that saved the same are named together, in order.
	var groups []*agentGroup
	group := func(i int, said string) {
		for _, g := range groups {
			if g.said == said {
				g.agents = append(g.agents, strconv.Itoa(i))
				return
			}
		}
		groups = append(groups, &agentGroup{agents: []string{strconv.Itoa(i)}, said: said})
	}
	var saved []string
	complete := true
	for _, a := range sum.Agents {
		switch {
		case a.State == AgentSucceeded:
			group(a.Agent, finishedBefore)
		case a.Saved == nil:
			complete = false
			group(a.Agent, a.State)
		case a.State == AgentFailed:
			// Its reason, in the summary above, says why.
			complete = false
			group(a.Agent, "failed; "+a.Saved.String())
		default:
			complete = complete && a.Saved.complete()
			saved = append(saved, strconv.Itoa(a.Agent))
			group(a.Agent, a.Saved.String())
		}
	}
	var parts []string
	if complete && len(saved) > 0 {
		if len(saved) == 1 {
			parts = append(parts, fmt.Sprintf("the learner of agent %s checkpointed and its replay buffer was saved", saved[0]))
		} else {
			parts = append(parts, fmt.Sprintf("the learners of agents %s checkpointed and their replay buffers were saved", strings.Join(saved, ", ")))
		}
	}
	for _, g := range groups {
		if !complete || g.said == finishedBefore {
			parts = append(parts, g.String())
		}
	}
	said := strings.Join(parts, "; ")
	if w := sum.WorldSaved; w != nil {
		switch _, err := os.Stat(filepath.Join(sum.Dir, WorldFile)); {
		case *w:
			said += "; the shared world was saved"
		case err == nil:
			said += fmt.Sprintf("; the shared world was not saved as it stopped: --resume goes on from its last periodic save (%s)", WorldFile)
		default:
			said += "; the shared world was never saved: --resume starts it afresh"
		}
	}
	return fmt.Sprintf("interrupted: %s; continue with tolaria rl --resume --run-dir %s", said, shellword.Quote(sum.Dir))
}

// finishedBefore marks, in interruptedNote, the agents that had finished.
const finishedBefore = "had finished"

// agentGroup is agents that saved the same, and what that is.
type agentGroup struct {
	agents []string
	said   string
}

func (g *agentGroup) String() string {
	who := "agent " + g.agents[0]
	if len(g.agents) > 1 {
		who = "agents " + strings.Join(g.agents, ", ")
	}
	if g.said == finishedBefore {
		return who + " " + g.said
	}
	return who + ": " + g.said
}

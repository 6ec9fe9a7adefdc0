package progress

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
)

// rlLineEvery is how often a piped run prints each running agent's line.
const rlLineEvery = 5 * time.Second

// RL shows a reinforcement-learning run (rl.View): on a terminal a row per agent
// (episodes, mean return over the last 100, epsilon, learner and actor
// steps/s, weight version lag, the last greedy evaluation); elsewhere that
// line every few seconds per agent, and a line when an agent's state
// changes or its actor is started again.
type RL struct {
	Streams
	table   *Table
	total   int    // environment steps per agent
	plotter string // draws the return curves (Plot)

	mu    sync.Mutex
	st    []rl.AgentStatus
	shown []time.Time // when each agent's line was last printed (piped)
	seen  []bool      // whether each agent has sent a status yet
}

// NewRL draws agents, each of totalSteps environment steps, on s.Stderr
// and their summary on s.Stdout; plotter (see Plotter) draws their return
// curves at the end when asked.
func NewRL(s Streams, agents, totalSteps int, plotter string) *RL {
	v := &RL{Streams: s, table: NewTable(s.Stderr, false), total: totalSteps, plotter: plotter,
		st: make([]rl.AgentStatus, agents), shown: make([]time.Time, agents), seen: make([]bool, agents)}
	for i := range v.st {
		v.st[i] = rl.AgentStatus{Agent: i, State: rl.AgentStarting, SolvedAt: -1}
	}
	return v
}

// Logs is where log lines go: above the table on a terminal.
func (v *RL) Logs() io.Writer { return v.table.Logs() }

// Start draws the table: its header and a row per agent.
func (v *RL) Start() {
	if !v.table.Live() {
		return
	}
	v.table.Printf("%-5s  %-11s  %8s  %8s  %7s  %10s  %9s  %4s  %6s\n", "agent", "state", "episodes", "mean-100", "epsilon", "learn st/s", "act st/s", "lag", "greedy")
	for i := range v.st {
		v.table.AddRow(func() string {
			v.mu.Lock()
			s := v.st[i]
			v.mu.Unlock()
			return fmt.Sprintf("%-5d  %-11s  %8d  %8.1f  %7.3f  %10.0f  %9.0f  %4d  %6s ", s.Agent, s.State, s.Episodes, s.MeanReturn,
				s.Epsilon, s.LearnerStepsPerSec, s.ActorStepsPerSec, s.Lag, greedyText(s))
		})
	}
}

// Update takes one change of an agent (rl.Request.Report).
func (v *RL) Update(s rl.AgentStatus) {
	v.mu.Lock()
	prev := v.st[s.Agent]
	v.st[s.Agent] = s
	// A resumed agent's first status already counts the restarts of the
	// runs before: only a count that goes up after it is a restart now.
	restarted := v.seen[s.Agent] && s.ActorRestarts > prev.ActorRestarts
	v.seen[s.Agent] = true
	due := s.State != prev.State || restarted || time.Since(v.shown[s.Agent]) >= rlLineEvery
	if due {
		v.shown[s.Agent] = time.Now()
	}
	v.mu.Unlock()
	if v.table.Live() {
		v.drawRow(s, prev, restarted)
		return
	}
	if !due {
		return
	}
	switch {
	case restarted:
		v.table.Printf("agent %d: actor failed; started again (restart %d)\n", s.Agent, s.ActorRestarts)
	case s.State == rl.AgentSucceeded && s.SolvedAt >= 0:
		v.table.Printf("agent %d: finished: solved at env step %d (a greedy mean of %.1f); %d episodes, mean return of the last 100 %.1f, %d env steps, %d learner steps\n",
			s.Agent, s.SolvedAt, s.BestEvalMeanReturn, s.Episodes, s.MeanReturn, s.EnvSteps, s.LearnerSteps)
	case s.State == rl.AgentSucceeded:
		best := "" // none before a full window of episodes
		if s.Episodes >= rl.MeanEpisodes {
			best = fmt.Sprintf(" (best %.1f)", s.BestMeanReturn)
		}
		v.table.Printf("agent %d: finished: %d episodes, mean return of the last %d %.1f%s, %d env steps, %d learner steps\n",
			s.Agent, s.Episodes, min(s.Episodes, rl.MeanEpisodes), s.MeanReturn, best, s.EnvSteps, s.LearnerSteps)
	case s.State == rl.AgentFailed || s.State == rl.AgentInterrupted:
		v.table.Printf("agent %d: %s: %s\n", s.Agent, s.State, OneLine(s.Reason))
	case s.State != prev.State && s.Episodes > 0:
		v.table.Printf("agent %d: %s: resumed after %d episodes (mean-100 %.1f)\n", s.Agent, s.State, s.Episodes, s.MeanReturn)
	case s.State != prev.State:
		v.table.Printf("agent %d: %s: actor and learner starting%s\n", s.Agent, s.State, on(s.Device))
	default:
		v.table.Printf("agent %d%s: %s: %d episodes, mean-100 %.1f, epsilon %.3f, learner %.0f steps/s, actor %.0f steps/s, lag %d, env steps %d, greedy %s\n",
			s.Agent, on(s.Device), s.State, s.Episodes, s.MeanReturn, s.Epsilon, s.LearnerStepsPerSec, s.ActorStepsPerSec, s.Lag, s.EnvSteps, greedyText(s))
	}
}

func (v *RL) drawRow(s, prev rl.AgentStatus, restarted bool) {
	switch s.State {
	case rl.AgentSucceeded:
		v.table.Done(s.Agent)
	case rl.AgentFailed, rl.AgentInterrupted:
		if s.State != prev.State {
			v.table.Printf("agent %d: %s: %s\n", s.Agent, s.State, FirstLine(s.Reason, 200))
		}
		v.table.Stop(s.Agent)
	default:
		if restarted {
			v.table.Printf("agent %d: actor failed; started again (restart %d)\n", s.Agent, s.ActorRestarts)
		}
		v.table.Set(s.Agent, int64(s.EnvSteps), int64(v.total))
	}
}

// greedyText is the last greedy evaluation's mean return, "-" before one.
func greedyText(s rl.AgentStatus) string {
	if s.Evaluations == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", s.EvalMeanReturn)
}

// Summary prints an RL run's agents, one row each, on standard output.
func (v *RL) Summary(s rl.Summary) {
	w := v.Stdout
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

// Plot has the plotter (Plotter) draw every agent's return curve into
// dir's PlotFile. A failure is said on standard error.
func (v *RL) Plot(ctx context.Context, dir string) {
	draw := exec.CommandContext(context.WithoutCancel(ctx), v.plotter, "rl-plot", dir, "--output", filepath.Join(dir, PlotFile))
	draw.Stdout, draw.Stderr = v.Stdout, v.Stderr
	if err := draw.Run(); err != nil {
		fmt.Fprintf(v.Stderr, "tolaria: --plot: %s rl-plot %s: %v\n", v.plotter, dir, err)
	}
}

// Close ends the table: the last state is drawn.
func (v *RL) Close() { v.table.Close() }

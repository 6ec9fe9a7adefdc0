package main

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/tolaria-ml/tolaria/coordinator"
)

// rlLineEvery is how often a piped run prints each running agent's line.
const rlLineEvery = 5 * time.Second

// rlView shows a reinforcement-learning run: on a terminal a live line per
// agent (episodes, mean return over the last 100, epsilon, learner and
// actor steps/s, weight version lag) drawn by mpb; otherwise that line
// every few seconds per agent, and a line when an agent's state changes.
type rlView struct {
	w     io.Writer
	mu    sync.Mutex
	st    []coordinator.AgentStatus
	total int
	shown []time.Time // when each agent's line was last printed (piped)
	seen  []bool      // whether each agent has sent a status yet

	table *mpb.Progress
	bars  []*mpb.Bar
}

func newRLView(w io.Writer, agents int) *rlView {
	v := &rlView{w: w, st: make([]coordinator.AgentStatus, agents), shown: make([]time.Time, agents), seen: make([]bool, agents)}
	for i := range v.st {
		v.st[i] = coordinator.AgentStatus{Agent: i, State: coordinator.AgentStarting, SolvedAt: -1}
	}
	v.table = liveTable(w)
	return v
}

func (v *rlView) logs() io.Writer {
	if v.table != nil {
		return v.table
	}
	return v.w
}

func (v *rlView) start() {
	if v.table == nil {
		return
	}
	fmt.Fprintf(v.table, "%-5s  %-11s  %8s  %8s  %7s  %10s  %9s  %4s  %6s\n", "agent", "state", "episodes", "mean-100", "epsilon", "learn st/s", "act st/s", "lag", "greedy")
	for i := range v.st {
		bar := v.table.New(0, mpb.BarStyle().Lbound("[").Rbound("]"), mpb.BarWidth(20),
			mpb.PrependDecorators(decor.Any(func(decor.Statistics) string { return v.text(i) })))
		v.bars = append(v.bars, bar)
	}
}

// text is agent i's line.
func (v *rlView) text(i int) string {
	v.mu.Lock()
	s := v.st[i]
	v.mu.Unlock()
	return rlLine(s)
}

func rlLine(s coordinator.AgentStatus) string {
	return fmt.Sprintf("%-5d  %-11s  %8d  %8.1f  %7.3f  %10.0f  %9.0f  %4d  %6s ", s.Agent, s.State, s.Episodes, s.MeanReturn,
		s.Epsilon, s.LearnerStepsPerSec, s.ActorStepsPerSec, s.Lag, greedyText(s))
}

// update takes one change of an agent (coordinator.RLRequest.Report).
func (v *rlView) update(s coordinator.AgentStatus) {
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
	if v.table != nil {
		v.drawBar(s, prev, restarted)
		return
	}
	if !due {
		return
	}
	switch {
	case restarted:
		fmt.Fprintf(v.w, "agent %d: actor failed; started again (restart %d)\n", s.Agent, s.ActorRestarts)
	case s.State == coordinator.AgentSucceeded && s.SolvedAt >= 0:
		fmt.Fprintf(v.w, "agent %d: finished: solved at env step %d (a greedy mean of %.1f); %d episodes, mean return of the last 100 %.1f, %d env steps, %d learner steps\n",
			s.Agent, s.SolvedAt, s.BestEvalMeanReturn, s.Episodes, s.MeanReturn, s.EnvSteps, s.LearnerSteps)
	case s.State == coordinator.AgentSucceeded:
		fmt.Fprintf(v.w, "agent %d: finished: %d episodes, mean return of the last 100 %.1f (best %.1f), %d env steps, %d learner steps\n",
			s.Agent, s.Episodes, s.MeanReturn, s.BestMeanReturn, s.EnvSteps, s.LearnerSteps)
	case s.State == coordinator.AgentFailed || s.State == coordinator.AgentInterrupted:
		fmt.Fprintf(v.w, "agent %d: %s: %s\n", s.Agent, s.State, oneLine(s.Reason))
	case s.State != prev.State && s.Episodes > 0:
		fmt.Fprintf(v.w, "agent %d: %s: resumed after %d episodes (mean-100 %.1f)\n", s.Agent, s.State, s.Episodes, s.MeanReturn)
	case s.State != prev.State:
		fmt.Fprintf(v.w, "agent %d: %s: actor and learner starting\n", s.Agent, s.State)
	default:
		fmt.Fprintf(v.w, "agent %d: %s: %d episodes, mean-100 %.1f, epsilon %.3f, learner %.0f steps/s, actor %.0f steps/s, lag %d, env steps %d, greedy %s\n",
			s.Agent, s.State, s.Episodes, s.MeanReturn, s.Epsilon, s.LearnerStepsPerSec, s.ActorStepsPerSec, s.Lag, s.EnvSteps, greedyText(s))
	}
}

func (v *rlView) drawBar(s, prev coordinator.AgentStatus, restarted bool) {
	bar := v.bars[s.Agent]
	switch s.State {
	case coordinator.AgentSucceeded:
		bar.SetTotal(-1, true)
	case coordinator.AgentFailed, coordinator.AgentInterrupted:
		if s.State != prev.State {
			fmt.Fprintf(v.table, "agent %d: %s: %s\n", s.Agent, s.State, firstLine(s.Reason, 200))
		}
		bar.Abort(false)
	default:
		if restarted {
			fmt.Fprintf(v.table, "agent %d: actor failed; started again (restart %d)\n", s.Agent, s.ActorRestarts)
		}
		bar.SetTotal(int64(v.totalSteps()), false)
		bar.SetCurrent(int64(s.EnvSteps))
	}
}

func (v *rlView) totalSteps() int { return max(v.total, 1) }

func (v *rlView) close() {
	if v.table == nil {
		return
	}
	for _, b := range v.bars {
		if !b.AbortedOrCompleted() {
			b.Abort(false)
		}
	}
	v.table.Wait()
}

// greedyText is the last greedy evaluation's mean return, "-" before one.
func greedyText(s coordinator.AgentStatus) string {
	if s.Evaluations == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", s.EvalMeanReturn)
}

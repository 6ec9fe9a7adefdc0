package coordinator

import (
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/rl/dqn"
)

// Reinforcement learning lives in package rl; these names keep the
// coordinator's callers working.

// Files of a reinforcement-learning run (see package rl).
const (
	ReplayFile   = rl.ReplayFile
	ActorLog     = rl.ActorLog
	LearnerLog   = rl.LearnerLog
	MeanEpisodes = rl.MeanEpisodes
)

// Event kinds of an agent's events.jsonl (see package rl).
const (
	EventAgentStart   = rl.EventAgentStart
	EventWorker       = rl.EventWorker
	EventEpisode      = rl.EventEpisode
	EventEval         = rl.EventEval
	EventActorRestart = rl.EventActorRestart
	EventAgentEnd     = rl.EventAgentEnd
)

// Agent states (see package rl).
const (
	AgentStarting    = rl.AgentStarting
	AgentRunning     = rl.AgentRunning
	AgentSucceeded   = rl.AgentSucceeded
	AgentFailed      = rl.AgentFailed
	AgentInterrupted = rl.AgentInterrupted
)

type (
	RLRequest   = rl.Request
	AgentStatus = rl.AgentStatus
	RLSummary   = rl.Summary
	RLRun       = rl.Run
)

// AgentDir is agent i's directory in a run directory.
func AgentDir(runDir string, i int) string { return rl.AgentDir(runDir, i) }

// PrepareRL checks the request and claims the run directory (see
// rl.Prepare).
func PrepareRL(req RLRequest, now time.Time) (*RLRun, error) { return rl.Prepare(req, now) }

// ReadRLConfig reads the configuration a run began with (see
// rl.ReadConfig).
func ReadRLConfig(runDir string) (dqn.Config, error) { return rl.ReadConfig(runDir) }

// ReadRLEpisodes reads agent i's episodes from its events.
func ReadRLEpisodes(runDir string, i int) ([]dqn.EpisodeRecord, error) {
	return rl.ReadEpisodes(runDir, i)
}

// ReadRLEvals reads agent i's greedy evaluations from its events.
func ReadRLEvals(runDir string, i int) ([]jobserver.RLEval, error) { return rl.ReadEvals(runDir, i) }

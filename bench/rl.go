package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/rl/dqn"
)

// Modes of a reinforcement-learning measurement.
const (
	// RLProcesses is tolaria rl's runtime: each agent an actor process and
	// a learner process meeting in the agent's memory file.
	RLProcesses = "processes"
	// RLSequential is the same agents stepped one after another in one
	// goroutine of one process (dqn.RunSequential).
	RLSequential = "sequential"
)

// Defaults of an RL measurement: short runs, repeated, so that a change
// in the machine's load falls on both modes alike.
var DefaultRLAgents = []int{1, 2, 4, 8}

// Defaults for the zero numeric fields of RLConfig.
const (
	DefaultRLRepeats        = 3
	DefaultRLTotalSteps     = 4000
	DefaultRLLearningStarts = 1000
	// MaxRLAgents bounds an agent count: each agent of the processes'
	// mode is two worker processes.
	MaxRLAgents = 64
)

// RLConfig is a measurement of the multi-process runtime against the
// sequential loop: at every agent count and graphs setting, each mode runs
// the same agents for the same steps, once per round, the two back to
// back in an order that alternates from point to point and round to
// round.
type RLConfig struct {
	// Agents are the agent counts measured.
	Agents []int
	// Graphs are the settings of the runtime's graphs switch measured
	// (the learner's training step and the actor's forward pass captured
	// and replayed, or both eager): true, false or both.
	Graphs []bool
	// Repeats is the number of rounds.
	Repeats int
	// DQN is every run's configuration; NumAgents is set per point. Its
	// TotalSteps (environment steps per agent) must leave room past
	// LearningStarts for a steady window (see RLMeter).
	DQN dqn.Config
	// Device names the device both modes run on, for the report.
	Device string
	// Threads is the CPU device's threads per process (each worker's, and
	// the sequential loop's); MaxLead the actor's lead over its learner in
	// the processes' mode (dqn.ActorOptions.MaxLead). For the report.
	Threads, MaxLead int
	// Processes and Sequential run one measurement of their mode.
	Processes, Sequential RLRunner `json:"-"`
	// Progress, when set, receives one line per measurement.
	Progress func(msg string) `json:"-"`
}

// RLRunner runs cfg.NumAgents agents for cfg.TotalSteps environment
// steps each, graphs on or off, and returns what its RLMeter measured.
type RLRunner func(ctx context.Context, cfg dqn.Config, graphs bool) (RLWindow, error)

// RLTrainingConfig is the configuration an RL measurement starts from:
// tolaria rl's defaults with DefaultRLTotalSteps steps per agent, of
// which DefaultRLLearningStarts fill the buffer, and neither greedy
// evaluations nor a stop when solved, so that every run does the same
// work.
func RLTrainingConfig() dqn.Config {
	c := dqn.DefaultConfig()
	c.TotalSteps, c.LearningStarts = DefaultRLTotalSteps, DefaultRLLearningStarts
	c.EvalInterval, c.StopWhenSolved = 0, false
	return c
}

// WithDefaults fills in the zero fields.
func (c RLConfig) WithDefaults() RLConfig {
	if len(c.Agents) == 0 {
		c.Agents = slices.Clone(DefaultRLAgents)
	}
	if len(c.Graphs) == 0 {
		c.Graphs = []bool{true, false}
	}
	if c.Repeats == 0 {
		c.Repeats = DefaultRLRepeats
	}
	if c.DQN.TotalSteps == 0 {
		c.DQN = RLTrainingConfig()
	}
	if c.Device == "" {
		c.Device = "cpu"
	}
	return c
}

// Validate reports the first invalid field by its flag name.
func (c RLConfig) Validate() error {
	for i, n := range c.Agents {
		switch {
		case n < 1 || n > MaxRLAgents:
			return fmt.Errorf("agents: each count must be in 1..%d, got %d", MaxRLAgents, n)
		case i > 0 && n <= c.Agents[i-1]:
			return fmt.Errorf("agents: give the counts once each, in increasing order, got %v", c.Agents)
		}
	}
	switch {
	case len(c.Agents) == 0:
		return errors.New("agents: give at least one agent count")
	case len(c.Graphs) == 0 || len(c.Graphs) > 2 || len(c.Graphs) == 2 && c.Graphs[0] == c.Graphs[1]:
		return fmt.Errorf("graphs: give on, off or both, got %v", c.Graphs)
	case c.Repeats < 1 || c.Repeats > 100:
		return fmt.Errorf("repeats: must be in 1..100, got %d", c.Repeats)
	case c.Processes == nil || c.Sequential == nil:
		return errors.New("rl: both modes need a runner")
	}
	d := c.DQN
	d.NumAgents = c.Agents[len(c.Agents)-1]
	if err := d.Validate(); err != nil {
		return err
	}
	if d.TotalSteps < d.LearningStarts+MinRLWindowSteps {
		return fmt.Errorf("total-steps: %d leaves %d steps per agent past learning_starts %d; give at least %d, so that both modes train long enough to be measured",
			d.TotalSteps, d.TotalSteps-d.LearningStarts, d.LearningStarts, d.LearningStarts+MinRLWindowSteps)
	}
	return nil
}

// MinRLWindowSteps is the fewest environment steps per agent that a run
// must take past LearningStarts.
const MinRLWindowSteps = 100

// RLReport is the outcome of an RL measurement.
type RLReport struct {
	Device string `json:"device"`
	// Env is the environment, as the configuration gives it.
	Env      string     `json:"env"`
	Settings RLSettings `json:"settings"`
	// Points hold, per agent count and graphs setting, both modes' rates
	// over the rounds and the ratios of the processes' to the
	// sequential loop's.
	Points []RLPoint `json:"points"`
	// GraphsGain holds, per agent count and mode, the rates with graphs
	// on over those with graphs off (when both were measured).
	GraphsGain []RLGraphsGain `json:"graphs_gain,omitempty"`
	// Runs are every measurement, in the order they ran.
	Runs        []RLRun   `json:"runs"`
	Host        Host      `json:"host"`
	LoadAvgEnd  string    `json:"loadavg_end,omitempty"`
	Command     string    `json:"command,omitempty"`
	Started     time.Time `json:"started"`
	WallSeconds float64   `json:"wall_seconds"`
}

// RLSettings are the measurement's parameters after defaults.
type RLSettings struct {
	Agents          []int  `json:"agents"`
	Graphs          []bool `json:"graphs"`
	Repeats         int    `json:"repeats"`
	TotalSteps      int    `json:"total_steps"` // environment steps per agent and run
	LearningStarts  int    `json:"learning_starts"`
	NumEnvs         int    `json:"num_envs"`
	Hidden          []int  `json:"hidden"`
	BatchSize       int    `json:"batch_size"`
	TrainEvery      int    `json:"train_every"`
	PublishInterval int    `json:"publish_interval"`
	SyncInterval    int    `json:"sync_interval"`
	// Lockstep is whether the processes run the lockstep schedule too
	// (the configuration's lockstep); the sequential loop always does, in
	// rounds of LockstepCollect transitions and LockstepTrain training
	// steps.
	Lockstep        bool   `json:"lockstep"`
	LockstepCollect int    `json:"lockstep_collect"`
	LockstepTrain   int    `json:"lockstep_train"`
	Threads         int    `json:"threads"`
	MaxLead         int    `json:"max_lead"`
	Seed            uint64 `json:"seed"`
}

// RLWindow is what one run measured: the steps every agent together took
// in the run's training window, its length, how it was taken, and the
// whole run's wall time, start-up and shut-down included.
type RLWindow struct {
	EnvSteps      int     `json:"env_steps"`
	LearnerSteps  int     `json:"learner_steps"`
	WindowSeconds float64 `json:"window_seconds"`
	// Window is how the window was taken: RLWindowReadings or
	// RLWindowDifference.
	Window string `json:"window"`
	// Marks are the progress readings the window spans (RLWindowReadings).
	Marks       int     `json:"marks,omitempty"`
	WallSeconds float64 `json:"wall_seconds"`
}

// How a run's training window is taken.
const (
	// RLWindowReadings: from the agents' progress readings (RLMeter).
	RLWindowReadings = "readings"
	// RLWindowDifference: a whole run less a run of the same agents that
	// stops when their buffers are filled (TotalSteps = LearningStarts),
	// steps and seconds alike, for a loop that reports no progress as it
	// goes; start-up and filling cancel out.
	RLWindowDifference = "difference"
)

// EnvStepsPerSec is the agents' environment steps per second, together.
func (w RLWindow) EnvStepsPerSec() float64 { return perSec(w.EnvSteps, w.WindowSeconds) }

// LearnerStepsPerSec is the agents' training steps per second, together.
func (w RLWindow) LearnerStepsPerSec() float64 { return perSec(w.LearnerSteps, w.WindowSeconds) }

func perSec(n int, s float64) float64 {
	if s <= 0 {
		return 0
	}
	return float64(n) / s
}

// RLRun is one measurement.
type RLRun struct {
	Round  int    `json:"round"`
	Mode   string `json:"mode"`
	Agents int    `json:"agents"`
	Graphs bool   `json:"graphs"`
	RLWindow
	EnvStepsPerSec     float64 `json:"env_steps_per_second"`
	LearnerStepsPerSec float64 `json:"learner_steps_per_second"`
	// LoadAvg is /proc/loadavg as the run started.
	LoadAvg string `json:"loadavg,omitempty"`
}

// RLSpread summarises one figure over the rounds.
type RLSpread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func spread(xs []float64) RLSpread {
	if len(xs) == 0 {
		return RLSpread{}
	}
	return RLSpread{Median: Median(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// RLRates are a mode's rates at a point, over the rounds: every agent's
// steps together, per second.
type RLRates struct {
	EnvStepsPerSec     RLSpread `json:"env_steps_per_second"`
	LearnerStepsPerSec RLSpread `json:"learner_steps_per_second"`
}

// RLPoint is one agent count and graphs setting. EnvSpeedup and
// LearnerSpeedup are the processes' rate over the sequential loop's in
// each round (the two ran back to back), summarised over the rounds.
type RLPoint struct {
	Agents         int      `json:"agents"`
	Graphs         bool     `json:"graphs"`
	Processes      RLRates  `json:"processes"`
	Sequential     RLRates  `json:"sequential"`
	EnvSpeedup     RLSpread `json:"env_speedup"`
	LearnerSpeedup RLSpread `json:"learner_speedup"`
}

// RLGraphsGain is one agent count and mode: its rates with graphs on over
// its rates with graphs off, round by round, summarised.
type RLGraphsGain struct {
	Agents      int      `json:"agents"`
	Mode        string   `json:"mode"`
	EnvGain     RLSpread `json:"env_gain"`
	LearnerGain RLSpread `json:"learner_gain"`
}

// RunRL measures cfg: every round, every agent count and graphs setting,
// both modes back to back, the mode that goes first alternating.
func RunRL(ctx context.Context, cfg RLConfig) (*RLReport, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := cfg.DQN
	rep := &RLReport{Device: cfg.Device, Env: d.Env.String(), Host: hostInfo(), Started: time.Now(),
		Settings: RLSettings{Agents: slices.Clone(cfg.Agents), Graphs: slices.Clone(cfg.Graphs), Repeats: cfg.Repeats,
			TotalSteps: d.TotalSteps, LearningStarts: d.LearningStarts, NumEnvs: d.NumEnvs, Hidden: slices.Clone(d.Hidden),
			BatchSize: d.BatchSize, TrainEvery: d.TrainEvery, PublishInterval: d.PublishInterval, SyncInterval: d.SyncInterval,
			Lockstep: d.Lockstep, LockstepCollect: d.LockstepCollect, LockstepTrain: d.LockstepTrain,
			Threads: cfg.Threads, MaxLead: cfg.MaxLead, Seed: d.Seed}}
	if rep.Settings.Hidden == nil {
		rep.Settings.Hidden = []int{}
	}
	modes := []struct {
		name string
		run  RLRunner
	}{{RLProcesses, cfg.Processes}, {RLSequential, cfg.Sequential}}
	order := 0
	for round := range cfg.Repeats {
		for _, n := range cfg.Agents {
			for _, g := range cfg.Graphs {
				first := order % 2
				order++
				for k := range 2 {
					m := modes[(first+k)%2]
					run, err := measureRL(ctx, m.run, d, n, g)
					if err != nil {
						return nil, fmt.Errorf("round %d, agents %d, graphs %s, %s: %w", round+1, n, onOff(g), m.name, err)
					}
					run.Round, run.Mode = round+1, m.name
					rep.Runs = append(rep.Runs, run)
					if cfg.Progress != nil {
						cfg.Progress(fmt.Sprintf("round %d/%d, agents %d, graphs %s, %s: %.0f env steps/s, %.0f learner steps/s over %.2f s (%.2f s in all)",
							round+1, cfg.Repeats, n, onOff(g), m.name, run.EnvStepsPerSec, run.LearnerStepsPerSec, run.WindowSeconds, run.WallSeconds))
					}
				}
			}
		}
	}
	rep.Points, rep.GraphsGain = summariseRL(rep.Runs, cfg.Agents, cfg.Graphs)
	rep.WallSeconds = time.Since(rep.Started).Seconds()
	rep.LoadAvgEnd = loadAvg()
	return rep, nil
}

// measureRL runs one measurement of n agents and checks that it measured
// something.
func measureRL(ctx context.Context, run RLRunner, d dqn.Config, n int, g bool) (RLRun, error) {
	d.NumAgents = n
	r := RLRun{Agents: n, Graphs: g, LoadAvg: loadAvg()}
	w, err := run(ctx, d, g)
	if err != nil {
		return r, err
	}
	if w.EnvSteps <= 0 || w.LearnerSteps <= 0 || w.WindowSeconds <= 0 {
		return r, fmt.Errorf("%w: %d environment steps and %d learner steps in %g s", ErrRLNoWindow, w.EnvSteps, w.LearnerSteps, w.WindowSeconds)
	}
	r.RLWindow, r.EnvStepsPerSec, r.LearnerStepsPerSec = w, w.EnvStepsPerSec(), w.LearnerStepsPerSec()
	return r, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// summariseRL pairs each round's runs: processes with sequential at each
// point, graphs on with graphs off in each mode.
func summariseRL(runs []RLRun, agents []int, graphs []bool) ([]RLPoint, []RLGraphsGain) {
	type key struct {
		round, agents int
		graphs        bool
		mode          string
	}
	by := map[key]RLRun{}
	rounds := 0
	for _, r := range runs {
		by[key{r.Round, r.Agents, r.Graphs, r.Mode}] = r
		rounds = max(rounds, r.Round)
	}
	// ratios gathers f of a's run over f of b's, round by round, over the
	// rounds in which both ran.
	ratios := func(a, b key, f func(RLRun) float64) []float64 {
		var xs []float64
		for round := 1; round <= rounds; round++ {
			a.round, b.round = round, round
			ra, okA := by[a]
			rb, okB := by[b]
			if okA && okB {
				if x := ratio(f(ra), f(rb)); x > 0 {
					xs = append(xs, x)
				}
			}
		}
		return xs
	}
	rates := func(k key) RLRates {
		var env, learn []float64
		for round := 1; round <= rounds; round++ {
			k.round = round
			if r, ok := by[k]; ok {
				env, learn = append(env, r.EnvStepsPerSec), append(learn, r.LearnerStepsPerSec)
			}
		}
		return RLRates{EnvStepsPerSec: spread(env), LearnerStepsPerSec: spread(learn)}
	}
	envRate := func(r RLRun) float64 { return r.EnvStepsPerSec }
	learnRate := func(r RLRun) float64 { return r.LearnerStepsPerSec }
	var pts []RLPoint
	var gains []RLGraphsGain
	for _, n := range agents {
		for _, g := range graphs {
			p, s := key{agents: n, graphs: g, mode: RLProcesses}, key{agents: n, graphs: g, mode: RLSequential}
			pts = append(pts, RLPoint{Agents: n, Graphs: g, Processes: rates(p), Sequential: rates(s),
				EnvSpeedup: spread(ratios(p, s, envRate)), LearnerSpeedup: spread(ratios(p, s, learnRate))})
		}
		if len(graphs) < 2 {
			continue
		}
		for _, m := range []string{RLProcesses, RLSequential} {
			on, off := key{agents: n, graphs: true, mode: m}, key{agents: n, graphs: false, mode: m}
			gains = append(gains, RLGraphsGain{Agents: n, Mode: m,
				EnvGain: spread(ratios(on, off, envRate)), LearnerGain: spread(ratios(on, off, learnRate))})
		}
	}
	return pts, gains
}

// ErrRLNoWindow is a run too short to measure: no agent's progress was
// read twice while every learner trained and no agent had finished.
var ErrRLNoWindow = errors.New("no steady window to measure: raise --total-steps so that every agent trains for a few seconds")

// RLMeter measures a run's steady rates from its agents' progress: from
// the first reading at which every agent's learner has trained to the
// last one before any agent has taken all its steps. Start-up (worker
// processes, devices, captures), the buffer's filling before
// LearningStarts and the end, where fewer agents share the machine, fall
// outside the window, in both modes alike. It is safe for concurrent
// use.
type RLMeter struct {
	mu           sync.Mutex
	total        int
	env, learner []int
	started      bool
	ended        bool
	first, last  rlMark
	marks        int
}

type rlMark struct {
	at           time.Time
	env, learner int
}

// NewRLMeter measures agents agents of totalSteps environment steps each.
func NewRLMeter(agents, totalSteps int) *RLMeter {
	return &RLMeter{total: totalSteps, env: make([]int, agents), learner: make([]int, agents)}
}

// Observe takes in agent's counters as read at at: its environment steps
// and its learner's steps. Counters only grow; an older, smaller reading
// changes nothing.
func (m *RLMeter) Observe(at time.Time, agent, envSteps, learnerSteps int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if agent < 0 || agent >= len(m.env) || m.ended {
		return
	}
	m.env[agent], m.learner[agent] = max(m.env[agent], envSteps), max(m.learner[agent], learnerSteps)
	if m.env[agent] >= m.total {
		// This agent is done: from here on fewer agents share the machine.
		m.ended = true
		return
	}
	if !m.started && slices.Min(m.learner) == 0 {
		return
	}
	mark := rlMark{at: at}
	for i := range m.env {
		mark.env += m.env[i]
		mark.learner += m.learner[i]
	}
	if !m.started {
		m.started, m.first = true, mark
	}
	m.last = mark
	m.marks++
}

// Window is what the meter measured; ErrRLNoWindow when the window is
// empty.
func (m *RLMeter) Window() (RLWindow, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := RLWindow{EnvSteps: m.last.env - m.first.env, LearnerSteps: m.last.learner - m.first.learner,
		WindowSeconds: m.last.at.Sub(m.first.at).Seconds(), Window: RLWindowReadings, Marks: m.marks}
	if !m.started || w.WindowSeconds <= 0 || w.EnvSteps <= 0 || w.LearnerSteps <= 0 {
		return w, fmt.Errorf("%w (%d readings in the window)", ErrRLNoWindow, m.marks)
	}
	return w, nil
}

// WriteRLJSON writes an RL report the way WriteJSON writes a report.
func WriteRLJSON(w io.Writer, rep *RLReport) error { return writeRounded(w, rep) }

package telemetry

import (
	"errors"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tolaria-ml/tolaria/trainer"
)

// A reinforcement-learning run's families, each with an agent label
// (LabelAgent, the agent's index) except the agents by state. The agent
// state family has both: 1 for the state an agent is in, 0 for the others,
// so that a rule can ask whether one agent is running.
const (
	LabelAgent = "agent"
	LabelEnv   = "env" // the run's environment, on its goal

	MetricRLGoalReturn            = "tolaria_rl_goal_return"
	MetricRLAgents                = "tolaria_rl_agents"
	MetricRLEpisodesTotal         = "tolaria_rl_episodes_total"
	MetricRLEpisodeReturn         = "tolaria_rl_episode_return"
	MetricRLMeanReturn            = "tolaria_rl_mean_return_100"
	MetricRLGreedyMeanReturn      = "tolaria_rl_greedy_mean_return"
	MetricRLEnvSteps              = "tolaria_rl_env_steps"
	MetricRLLearnerSteps          = "tolaria_rl_learner_steps"
	MetricRLActorStepsPerSecond   = "tolaria_rl_actor_steps_per_second"
	MetricRLLearnerStepsPerSecond = "tolaria_rl_learner_steps_per_second"
	MetricRLWeightLag             = "tolaria_rl_weight_version_lag"
	MetricRLEpsilon               = "tolaria_rl_epsilon"
	MetricRLLoss                  = "tolaria_rl_learner_loss"
	MetricRLPublishesTotal        = "tolaria_rl_publishes_total"
	MetricRLSyncsTotal            = "tolaria_rl_syncs_total"
	MetricRLActorRestartsTotal    = "tolaria_rl_actor_restarts_total"
	MetricRLAgentState            = "tolaria_rl_agent_state"
)

// RLStateRunning is the state of an agent whose actor and learner are at
// work; the stalled-learner alert watches agents in it.
const RLStateRunning = "running"

// RLReturnBuckets are the episode-return histogram's buckets: one set
// for every environment, from Acrobot-v1's and MountainCar-v0's -500 and
// -200 (every step -1) through their goals (-100, -110) to CartPole-v1's
// 500 and its goal of 475.
var RLReturnBuckets = []float64{-500, -400, -300, -200, -150, -110, -100, -75, -50, -25, 0,
	10, 25, 50, 100, 200, 300, 400, 475, 500}

// RLMetricNames are the families of a reinforcement-learning run.
func RLMetricNames() []string {
	return []string{MetricRLAgents, MetricRLAgentState, MetricRLGoalReturn, MetricRLEpisodesTotal, MetricRLEpisodeReturn, MetricRLMeanReturn,
		MetricRLGreedyMeanReturn,
		MetricRLEnvSteps, MetricRLLearnerSteps, MetricRLActorStepsPerSecond, MetricRLLearnerStepsPerSecond,
		MetricRLWeightLag, MetricRLEpsilon, MetricRLLoss, MetricRLPublishesTotal, MetricRLSyncsTotal,
		MetricRLActorRestartsTotal}
}

// RLAgent is what RLMetrics is told of an agent.
type RLAgent struct {
	Agent      int
	State      string
	MeanReturn float64
	// EvalMeanReturn is the last greedy evaluation's mean return, when
	// Evaluated (there has been one).
	EvalMeanReturn     float64
	Evaluated          bool
	EnvSteps           int
	LearnerSteps       int
	ActorStepsPerSec   float64
	LearnerStepsPerSec float64
	Lag                uint64
	Epsilon            float64
	Loss               float64
	// Publishes and Syncs are the counts of the agent's current learner
	// and actor processes: they start again from 0 when one is started
	// again, and the counters here go on from where they were.
	Publishes, Syncs int64
}

// RLMetrics are a reinforcement-learning run's families, and through
// Observer the graph families of its agents' halves.
type RLMetrics struct {
	m                             *Metrics
	agents, agentState, goal      *prometheus.GaugeVec
	episodes, restarts            *prometheus.CounterVec
	publishes, syncs              *prometheus.CounterVec
	returns                       *prometheus.HistogramVec
	mean, greedy, env, learn      *prometheus.GaugeVec
	actRate                       *prometheus.GaugeVec
	learnRate, lag, epsilon, loss *prometheus.GaugeVec

	stateNames []string // the states RL was given

	mu     sync.Mutex
	states map[int]string
	last   map[int][2]int64 // publishes, syncs as last told
}

// errNotAgentMetrics refuses RL on metrics whose graph families have no
// agent label, where two agents' captures would add up in one series.
var errNotAgentMetrics = errors.New("telemetry: a reinforcement-learning run's metrics are made with NewAgentMetrics")

// RL registers a reinforcement-learning run's families on m's registry,
// with every state in states at 0. Call it once per Metrics, made with
// NewAgentMetrics.
func (m *Metrics) RL(states []string) (*RLMetrics, error) {
	if !m.perAgent {
		return nil, errNotAgentMetrics
	}
	agent := []string{LabelAgent}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, agent)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, agent)
	}
	r := &RLMetrics{
		m: m,
		agents: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRLAgents,
			Help: "Agents of the run by state (starting, running, succeeded, failed, interrupted)."}, []string{LabelState}),
		agentState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRLAgentState,
			Help: "1 for the agent's state now, 0 for its other states."}, []string{LabelAgent, LabelState}),
		goal: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRLGoalReturn,
			Help: "The mean greedy return over 100 episodes that solves the run's environment (475 on CartPole-v1, -100 on Acrobot-v1, -110 on MountainCar-v0)."}, []string{LabelEnv}),
		episodes: counter(MetricRLEpisodesTotal, "Episodes the agent's actor finished."),
		restarts: counter(MetricRLActorRestartsTotal, "Times the agent's actor failed and was started again."),
		publishes: counter(MetricRLPublishesTotal,
			"Weight publishes by the agent's learner into its shared memory."),
		syncs: counter(MetricRLSyncsTotal,
			"Reads of newer published weights by the agent's actor."),
		returns: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricRLEpisodeReturn,
			Help:    "Returns of the agent's finished episodes.",
			Buckets: RLReturnBuckets}, agent),
		mean:       gauge(MetricRLMeanReturn, "Mean return of the agent's last 100 episodes (all of them while fewer)."),
		greedy:     gauge(MetricRLGreedyMeanReturn, "Mean return of the agent's last greedy evaluation (eval_episodes episodes without exploration); absent before the first."),
		env:        gauge(MetricRLEnvSteps, "Environment steps the agent's actors took, earlier runs' included."),
		learn:      gauge(MetricRLLearnerSteps, "Training steps the agent's learner took, earlier runs' included."),
		actRate:    gauge(MetricRLActorStepsPerSecond, "Environment steps per second of the agent's actor, over its last report."),
		learnRate:  gauge(MetricRLLearnerStepsPerSecond, "Training steps per second of the agent's learner, over its last report."),
		lag:        gauge(MetricRLWeightLag, "Weight versions the actor's copy is behind the learner's last publish."),
		epsilon:    gauge(MetricRLEpsilon, "The actor's exploration rate now."),
		loss:       gauge(MetricRLLoss, "The learner's mean Huber loss over its last publish interval."),
		stateNames: states,
		states:     map[int]string{},
		last:       map[int][2]int64{},
	}
	for _, s := range states {
		r.agents.WithLabelValues(s).Set(0)
	}
	for _, c := range []prometheus.Collector{r.agents, r.agentState, r.goal, r.episodes, r.restarts, r.publishes, r.syncs, r.returns,
		r.mean, r.greedy, r.env, r.learn, r.actRate, r.learnRate, r.lag, r.epsilon, r.loss} {
		if err := m.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Goal sets the run's goal: the mean return that solves env.
func (r *RLMetrics) Goal(env string, ret float64) {
	r.goal.Reset()
	r.goal.WithLabelValues(env).Set(ret)
}

// Episode counts a finished episode of agent and its return.
func (r *RLMetrics) Episode(agent int, ret float64) {
	a := strconv.Itoa(agent)
	r.episodes.WithLabelValues(a).Inc()
	r.returns.WithLabelValues(a).Observe(ret)
}

// ActorRestarted counts a restart of agent's actor.
func (r *RLMetrics) ActorRestarted(agent int) {
	r.restarts.WithLabelValues(strconv.Itoa(agent)).Inc()
}

// Set takes in an agent's status.
func (r *RLMetrics) Set(s RLAgent) {
	a := strconv.Itoa(s.Agent)
	r.mu.Lock()
	if old, ok := r.states[s.Agent]; ok {
		r.agents.WithLabelValues(old).Dec()
	}
	r.states[s.Agent] = s.State
	r.agents.WithLabelValues(s.State).Inc()
	last := r.last[s.Agent]
	r.last[s.Agent] = [2]int64{s.Publishes, s.Syncs}
	r.agentState.WithLabelValues(a, s.State).Set(1)
	for _, st := range r.stateNames {
		if st != s.State {
			r.agentState.WithLabelValues(a, st).Set(0)
		}
	}
	r.mu.Unlock()
	// The counters start at 0 with the agent, so that increase() sees
	// their first step.
	r.episodes.WithLabelValues(a)
	r.restarts.WithLabelValues(a)
	for k, c := range []*prometheus.CounterVec{r.publishes, r.syncs} {
		now := []int64{s.Publishes, s.Syncs}[k]
		delta := now - last[k]
		if delta < 0 { // a new process counts from 0
			delta = now
		}
		c.WithLabelValues(a).Add(float64(delta))
	}
	r.mean.WithLabelValues(a).Set(s.MeanReturn)
	if s.Evaluated {
		r.greedy.WithLabelValues(a).Set(s.EvalMeanReturn)
	}
	r.env.WithLabelValues(a).Set(float64(s.EnvSteps))
	r.learn.WithLabelValues(a).Set(float64(s.LearnerSteps))
	r.actRate.WithLabelValues(a).Set(s.ActorStepsPerSec)
	r.learnRate.WithLabelValues(a).Set(s.LearnerStepsPerSec)
	r.lag.WithLabelValues(a).Set(float64(s.Lag))
	r.epsilon.WithLabelValues(a).Set(s.Epsilon)
	r.loss.WithLabelValues(a).Set(s.Loss)
}

// Observer returns the observer of agent's half (RLActor or RLLearner) on
// device: its captures, replays and fallbacks go to the graph families
// (tolaria_graph_*) under the agent's labels, as a training job's do under
// its own (see Metrics.SeriesObserver). Observers of the same half share
// their series, so a half started again counts on.
func (r *RLMetrics) Observer(agent int, half, device string) trainer.Observer {
	return r.m.SeriesObserver(Series{Device: device, Worker: half, Agent: strconv.Itoa(agent)})
}

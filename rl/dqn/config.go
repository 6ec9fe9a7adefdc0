// Package dqn is tolaria's Double DQN agent on the device contract: a
// learner whose whole training step (online and target forward passes,
// Double DQN targets, Huber loss, backward, clipping, optimizer update) is
// captured once and replayed, and an actor whose batched forward pass
// (greedy action selection for its vector of environments, with the
// observation copy in and the actions copy out) is captured too, with
// epsilon-greedy exploration on the host. The two meet only in the agent's
// shared memory (rl/shm): the actor appends transitions to the replay
// buffer and reads the weights the learner publishes.
package dqn

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// Config is one run of agents. The keys in the field errors are those of
// the configuration file.
type Config struct {
	Env       env.Spec // the environment of every agent: its name and parameters (env)
	NumAgents int      // independent agents, each with its own actor, learner, buffer and weights (num_agents)
	NumEnvs   int      // environments each actor steps at once (num_envs)
	// Actor is how the agents act (actor): ActorPerAgent, an actor per
	// agent stepping environments of its own; ActorShared, one actor
	// stepping one world that every agent acts in. "" is the
	// environment's default (ActorMode).
	Actor string
	Seed  uint64 // agent i uses Seed+i (seed)

	Hidden     []int             // hidden layer widths (model.hidden)
	Activation device.Activation // hidden activation (model.activation)
	Optimizer  nn.Optimizer      // the learner's optimizer; ClipNorm clips the gradient's global norm

	Gamma          float64 // discount (gamma)
	HuberDelta     float64 // the Huber loss's threshold (huber_delta)
	BatchSize      int     // minibatch size (batch_size)
	BufferCapacity int     // replay buffer transitions (buffer_capacity)
	LearningStarts int     // environment steps before the first training step (learning_starts)
	TrainEvery     int     // environment steps per training step (train_every)
	TargetUpdate   int     // training steps between updates of the target network (target_update)
	// TargetTau, when positive, makes each target update a soft one,
	// target = (1-tau)*target + tau*online; 0 copies the online network.
	TargetTau float64 // (target_tau)

	PublishInterval int // training steps between weight publishes (publish_interval)
	SyncInterval    int // actor vector steps between reads of the published weights (sync_interval)

	EpsilonStart      float64 // exploration at the first step (epsilon_start)
	EpsilonEnd        float64 // exploration after the decay (epsilon_end)
	EpsilonDecaySteps int     // environment steps of the linear decay (epsilon_decay_steps)

	TotalSteps int // environment steps per agent (total_steps)

	// EvalInterval is the environment steps between greedy evaluations of
	// the actor's weights; 0 turns evaluation off (eval_interval).
	EvalInterval int
	// EvalEpisodes is the episodes of one evaluation, each in its own
	// environment, all batched through one forward pass (eval_episodes).
	EvalEpisodes int
	// EvalEpsilon is the exploration of a greedy evaluation: 0, greedy,
	// by default; DQN's evaluations (Mnih et al. 2015) use 0.05, which
	// keeps a memoryless policy from stalling in a world it sees only a
	// window of (Forage). Every evaluation draws the same random numbers,
	// so it still depends on the weights alone (eval_epsilon).
	EvalEpsilon float64
	// StopWhenSolved asks whoever runs the agents to stop one at its
	// first greedy evaluation that solves the environment (Goal): at
	// least Goal().Episodes episodes whose mean return reaches
	// Goal().Return, 475 over 100 on CartPole-v1 (stop_when_solved).
	StopWhenSolved bool

	// Lockstep makes each agent's actor and learner take turns in a
	// fixed schedule rather than run freely (lockstep): the actor
	// collects LockstepCollect transitions, the learner takes
	// LockstepTrain training steps and publishes, the actor reads the
	// weights, and again; a run is then repeatable, bit for bit (see
	// lockstep.go). train_every, publish_interval, sync_interval and
	// the actor's lead are the schedule's then.
	Lockstep        bool
	LockstepCollect int // transitions per round, a multiple of NumEnvs (lockstep_collect)
	LockstepTrain   int // training steps per round (lockstep_train)
}

// DefaultConfig is a setting that solves CartPole-v1 as greedy evaluation
// measures it (a mean of 475 over 100 episodes): docs/rl.md has the
// environment steps it took on each seed measured.
func DefaultConfig() Config {
	opt := nn.DefaultOptimizer()
	opt.LR, opt.WeightDecay, opt.ClipNorm, opt.MinLRRatio = 5e-4, 0, 10, 1
	return Config{
		Env: env.Spec{Name: env.CartPoleName}, NumAgents: 1, NumEnvs: 1, Seed: 1,
		Hidden: []int{128, 128}, Activation: device.ActReLU, Optimizer: opt,
		Gamma: 0.99, HuberDelta: 1, BatchSize: 64, BufferCapacity: 50000, LearningStarts: 1000,
		TrainEvery: 1, TargetUpdate: 500, PublishInterval: 10, SyncInterval: 10,
		EpsilonStart: 1, EpsilonEnd: 0.01, EpsilonDecaySteps: 20000, TotalSteps: 150000,
		EvalInterval: 5000, EvalEpisodes: 100, StopWhenSolved: true,
		LockstepCollect: DefaultLockstepCollect, LockstepTrain: DefaultLockstepTrain,
	}
}

// Validate reports the first bad setting.
func (c Config) Validate() error {
	if err := c.checkActor(); err != nil {
		return err // it names the key: env.name, env.max_steps, actor, ...
	}
	switch {
	case c.NumAgents < 1 || c.NumAgents > 1024:
		return field.Errorf("num_agents", "must be 1..1024, got %d", c.NumAgents)
	case c.NumEnvs < 1 || c.NumEnvs > 4096:
		return field.Errorf("num_envs", "must be 1..4096, got %d", c.NumEnvs)
	case len(c.Hidden) == 0:
		return field.Errorf("model.hidden", "needs at least one hidden layer")
	case !(c.Gamma >= 0 && c.Gamma <= 1):
		return field.Errorf("gamma", "must be in [0, 1], got %g", c.Gamma)
	case !(c.HuberDelta > 0 && c.HuberDelta < 1e6):
		return field.Errorf("huber_delta", "must be in (0, 1e6), got %g", c.HuberDelta)
	case c.BatchSize < 1 || c.BatchSize > 1<<16:
		return field.Errorf("batch_size", "must be 1..65536, got %d", c.BatchSize)
	case c.BufferCapacity < c.BatchSize:
		return field.Errorf("buffer_capacity", "must hold at least one batch (%s %d), got %d", field.Name("batch_size"), c.BatchSize, c.BufferCapacity)
	case c.LearningStarts < c.BatchSize:
		return field.Errorf("learning_starts", "must be at least %s (%d) so that the first batch can be drawn, got %d", field.Name("batch_size"), c.BatchSize, c.LearningStarts)
	case c.TrainEvery < 1:
		return field.Errorf("train_every", "must be at least 1 environment step per training step, got %d", c.TrainEvery)
	case c.TargetUpdate < 1:
		return field.Errorf("target_update", "must be at least 1 training step, got %d", c.TargetUpdate)
	case !(c.TargetTau >= 0 && c.TargetTau <= 1):
		return field.Errorf("target_tau", "must be in [0, 1] (0: hard copies), got %g", c.TargetTau)
	case c.PublishInterval < 1:
		return field.Errorf("publish_interval", "must be at least 1 training step, got %d", c.PublishInterval)
	case c.SyncInterval < 1:
		return field.Errorf("sync_interval", "must be at least 1 actor step, got %d", c.SyncInterval)
	case !(c.EpsilonStart >= 0 && c.EpsilonStart <= 1):
		return field.Errorf("epsilon_start", "must be in [0, 1], got %g", c.EpsilonStart)
	case !(c.EpsilonEnd >= 0 && c.EpsilonEnd <= 1):
		return field.Errorf("epsilon_end", "must be in [0, 1], got %g", c.EpsilonEnd)
	case c.EpsilonDecaySteps < 0:
		return field.Errorf("epsilon_decay_steps", "must be >= 0, got %d", c.EpsilonDecaySteps)
	case c.TotalSteps < c.LearningStarts:
		return field.Errorf("total_steps", "must be at least %s (%d), got %d", field.Name("learning_starts"), c.LearningStarts, c.TotalSteps)
	case c.EvalInterval < 0:
		return field.Errorf("eval_interval", "must be >= 0 environment steps (0: no evaluation), got %d", c.EvalInterval)
	case c.EvalInterval > 0 && (c.EvalEpisodes < 1 || c.EvalEpisodes > 4096):
		return field.Errorf("eval_episodes", "must be 1..4096 when %s is on, got %d", field.Name("eval_interval"), c.EvalEpisodes)
	case !(c.EvalEpsilon >= 0 && c.EvalEpsilon <= 1):
		return field.Errorf("eval_epsilon", "must be in [0, 1] (0: greedy), got %g", c.EvalEpsilon)
	}
	if err := c.checkLockstep(); err != nil {
		return err
	}
	if err := c.Optimizer.Validate(); err != nil {
		return err
	}
	spec, err := c.Spec()
	if err != nil {
		return err
	}
	return c.Layout(spec).Validate()
}

// Task is the environment's task (its goal) and a maker of instances of
// it, as every process of an agent builds them from Env.
func (c Config) Task() (env.Task, env.Factory, error) { return c.Env.Env() }

// Goal is what solves the environment (env.Task's Goal): CartPole-v1 a
// mean return of 475, Acrobot-v1 -100 and MountainCar-v0 -110, each over
// 100 episodes; a world's is zero (its agents must beat its scripted
// baseline). It is zero for a configuration that does not validate.
func (c Config) Goal() env.Goal {
	t, _, err := c.World()
	if err != nil {
		return env.Goal{}
	}
	return t.Goal
}

// Spec is the Q-network: the environment's observations in, one value per
// action out.
func (c Config) Spec() (nn.Spec, error) {
	_, f, err := c.World()
	if err != nil {
		return nn.Spec{}, err
	}
	e := f()
	s := nn.Spec{Inputs: e.ObsSize(), Hidden: c.Hidden, Outputs: e.NumActions(), Act: c.Activation, Loss: nn.LossMSE}
	if err := s.Validate(); err != nil {
		return nn.Spec{}, err
	}
	return s, nil
}

// Layout is the shared memory of one agent.
func (c Config) Layout(spec nn.Spec) shm.Layout {
	return shm.Layout{Params: spec.ParamCount(), ObsSize: spec.Inputs, Capacity: c.BufferCapacity}
}

// Epsilon is the exploration rate after step environment steps: linear
// from EpsilonStart to EpsilonEnd over EpsilonDecaySteps, then constant.
func (c Config) Epsilon(step int) float64 {
	if step >= c.EpsilonDecaySteps {
		return c.EpsilonEnd
	}
	return c.EpsilonStart + (c.EpsilonEnd-c.EpsilonStart)*float64(step)/float64(c.EpsilonDecaySteps)
}

// AgentSeed is agent i's seed.
func (c Config) AgentSeed(agent int) uint64 { return c.Seed + uint64(agent) }

func (c Config) String() string {
	return fmt.Sprintf("%s %v agents=%d envs=%d batch=%d lr=%g", c.Env.String(), c.Hidden, c.NumAgents, c.NumEnvs, c.BatchSize, c.Optimizer.LR)
}

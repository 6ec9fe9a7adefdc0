// Package env holds the reinforcement-learning environments tolaria trains
// on: an Env interface for one episodic environment with a discrete action
// space, the classic-control tasks CartPole-v1, Acrobot-v1 and
// MountainCar-v0, the multi-agent world Forage (MultiEnv), a registry that
// builds any of them from a configuration's env: key (Spec, Tasks), and
// Vec, which steps several instances at once and starts a new episode in
// each as soon as its last one ends. Everything is seeded: the same seed
// gives the same episodes on every run.
package env

import (
	"errors"
)

// ErrEpisodeOver is returned by Step on an environment whose episode has
// ended (terminated or truncated): call Reset first.
var ErrEpisodeOver = errors.New("env: step after the episode ended; call Reset first")

// ErrNotReset is returned by Step on an environment never reset.
var ErrNotReset = errors.New("env: step before the first Reset")

// Env is one episodic environment with a discrete action space and a
// float32 observation vector. An Env is used from one goroutine.
type Env interface {
	// Name identifies the environment, e.g. "CartPole-v1".
	Name() string
	// ObsSize is the length of an observation.
	ObsSize() int
	// NumActions is the number of discrete actions, 0..NumActions()-1.
	NumActions() int
	// Reset starts an episode whose random start is drawn from seed (the
	// same seed gives the same episode for the same actions) and writes the
	// first observation into obs (ObsSize values).
	Reset(seed uint64, obs []float32)
	// Step applies action, writes the next observation into obs and
	// returns the reward, whether the episode terminated (a terminal state
	// of the task: its value is 0) and whether it was truncated (cut by a
	// time limit: its value is not 0). An action outside 0..NumActions()-1
	// is an error; so is a step after the episode ended (ErrEpisodeOver).
	Step(action int, obs []float32) (reward float32, terminated, truncated bool, err error)
}

// Factory makes a fresh environment, for Vec.
type Factory func() Env

// New returns a factory for the single-agent task named name, with its
// default parameters (Spec.Env).
func New(name string) (Factory, error) {
	_, f, err := Spec{Name: name}.Env()
	return f, err
}

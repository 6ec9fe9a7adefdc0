package env

import (
	"math"
	"math/rand/v2"
)

// MountainCarName is the name of MountainCar-v0.
const MountainCarName = "MountainCar-v0"

// The MountainCar-v0 constants of the classic-control reference (Moore's
// mountain car as Sutton and Barto state it, with the Gym/Gymnasium
// MountainCar-v0 limits).
const (
	mcMinPosition  = -1.2
	mcMaxPosition  = 0.6
	mcMaxSpeed     = 0.07
	mcGoalPosition = 0.5
	mcForce        = 0.001
	mcGravity      = 0.0025
	// MountainCarMaxSteps is the time limit of MountainCar-v0: the 200th
	// step truncates the episode.
	MountainCarMaxSteps = 200
)

// MountainCar is MountainCar-v0: an under-powered car in a valley between
// two hills (the height at position x is sin(3x)) must reach the flag at
// x >= 0.5 on the right by swinging back and forth. The observation is
// (position, velocity); the actions push left (0), not at all (1) or right
// (2); the reward is -1 for every step, the one reaching the flag included.
// An episode starts at rest at a position drawn uniformly from
// [-0.6, -0.4), terminates at the flag and is truncated at 200 steps. The
// velocity is kept in [-0.07, 0.07] and the position in [-1.2, 0.6]; at the
// left wall a leftward velocity stops. State in float64, observations its
// float32 rounding.
type MountainCar struct {
	state [2]float64
	episode
}

// NewMountainCar returns a MountainCar; Reset it before the first Step.
func NewMountainCar() *MountainCar { return &MountainCar{episode: episode{limit: MountainCarMaxSteps}} }

// Name is "MountainCar-v0".
func (m *MountainCar) Name() string { return MountainCarName }

// ObsSize is 2.
func (m *MountainCar) ObsSize() int { return 2 }

// NumActions is 3.
func (m *MountainCar) NumActions() int { return 3 }

// Reset places the car at rest at a position uniform in [-0.6, -0.4).
func (m *MountainCar) Reset(seed uint64, obs []float32) {
	rng := rand.New(rand.NewPCG(seed, 0x6d6f756e7461696e)) // "mountain"
	m.state = [2]float64{-0.6 + 0.2*rng.Float64(), 0}
	m.start()
	m.observe(obs)
}

// SetState starts an episode at a given (position, velocity).
func (m *MountainCar) SetState(s [2]float64, obs []float32) {
	m.state = s
	m.start()
	m.observe(obs)
}

// State returns the float64 state (position, velocity).
func (m *MountainCar) State() [2]float64 { return m.state }

func (m *MountainCar) observe(obs []float32) {
	obs[0], obs[1] = float32(m.state[0]), float32(m.state[1])
}

// Step pushes the car with action and moves it one step.
func (m *MountainCar) Step(action int, obs []float32) (float32, bool, bool, error) {
	if err := m.check(MountainCarName, action, 3); err != nil {
		return 0, false, false, err
	}
	m.state = mountainCarNext(m.state, action)
	terminated := m.state[0] >= mcGoalPosition
	truncated := m.end(terminated)
	m.observe(obs)
	return -1, terminated, truncated, nil
}

// mountainCarNext is the reference's update: the velocity changes by the
// push and the slope's pull (-gravity·cos 3x) and is clipped, then the
// position moves by the new velocity and is clipped; at the left wall a
// leftward velocity becomes 0.
func mountainCarNext(s [2]float64, action int) [2]float64 {
	pos, vel := s[0], s[1]
	vel += float64(action-1)*mcForce - math.Cos(3*pos)*mcGravity
	vel = math.Max(-mcMaxSpeed, math.Min(mcMaxSpeed, vel))
	pos += vel
	pos = math.Max(mcMinPosition, math.Min(mcMaxPosition, pos))
	if pos == mcMinPosition && vel < 0 {
		vel = 0
	}
	return [2]float64{pos, vel}
}

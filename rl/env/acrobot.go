package env

import (
	"math"
	"math/rand/v2"
)

// AcrobotName is the name of Acrobot-v1.
const AcrobotName = "Acrobot-v1"

// The Acrobot-v1 constants of the classic-control reference (Sutton's
// acrobot, the dynamics of Sutton and Barto's book, with the Gym/Gymnasium
// Acrobot-v1 limits): two links of length 1 and mass 1, each with its
// centre of mass at its middle and a moment of inertia of 1, the elbow
// driven by a torque of -1, 0 or +1, 0.2 s a step.
const (
	acDt        = 0.2
	acL1        = 1.0 // the first link's length
	acM1        = 1.0
	acM2        = 1.0
	acLC1       = 0.5 // the links' centres of mass
	acLC2       = 0.5
	acI1        = 1.0 // the links' moments of inertia
	acI2        = 1.0
	acGravity   = 9.8
	acMaxVel1   = 4 * math.Pi
	acMaxVel2   = 9 * math.Pi
	acResetHalf = 0.1
	// AcrobotMaxSteps is the time limit of Acrobot-v1: the 500th step
	// truncates the episode.
	AcrobotMaxSteps = 500
)

// Acrobot is Acrobot-v1: a two-link pendulum hanging from a fixed pivot,
// driven only at the elbow, must swing its tip above a line one link's
// length over the pivot. The state is (theta1, theta2, theta1', theta2'):
// theta1 is the first link's angle from hanging straight down, theta2 the
// second's relative to the first. The observation is (cos theta1,
// sin theta1, cos theta2, sin theta2, theta1', theta2'); the actions apply
// a torque of -1 (0), 0 (1) or +1 (2) at the elbow; the reward is -1 for
// every step that does not reach the line and 0 for the one that does. An
// episode starts with each state variable uniform in [-0.1, 0.1),
// terminates when -cos theta1 - cos(theta1 + theta2) > 1 and is truncated
// at 500 steps. A step integrates the equations of motion over 0.2 s with
// one classical fourth-order Runge-Kutta step, then wraps the angles into
// [-pi, pi) and clips the velocities to 4pi and 9pi. State in float64,
// observations its float32 rounding.
type Acrobot struct {
	state [4]float64
	episode
}

// NewAcrobot returns an Acrobot; Reset it before the first Step.
func NewAcrobot() *Acrobot { return &Acrobot{episode: episode{limit: AcrobotMaxSteps}} }

// Name is "Acrobot-v1".
func (a *Acrobot) Name() string { return AcrobotName }

// ObsSize is 6.
func (a *Acrobot) ObsSize() int { return 6 }

// NumActions is 3.
func (a *Acrobot) NumActions() int { return 3 }

// Reset draws each state variable uniformly from [-0.1, 0.1).
func (a *Acrobot) Reset(seed uint64, obs []float32) {
	rng := rand.New(rand.NewPCG(seed, 0x6163726f626f74)) // "acrobot"
	for i := range a.state {
		a.state[i] = -acResetHalf + 2*acResetHalf*rng.Float64()
	}
	a.start()
	a.observe(obs)
}

// SetState starts an episode at a given state.
func (a *Acrobot) SetState(s [4]float64, obs []float32) {
	a.state = s
	a.start()
	a.observe(obs)
}

// State returns the float64 state (theta1, theta2, theta1', theta2').
func (a *Acrobot) State() [4]float64 { return a.state }

func (a *Acrobot) observe(obs []float32) {
	t1, t2 := a.state[0], a.state[1]
	obs[0], obs[1] = float32(math.Cos(t1)), float32(math.Sin(t1))
	obs[2], obs[3] = float32(math.Cos(t2)), float32(math.Sin(t2))
	obs[4], obs[5] = float32(a.state[2]), float32(a.state[3])
}

// Step applies the elbow torque of action for 0.2 s.
func (a *Acrobot) Step(action int, obs []float32) (float32, bool, bool, error) {
	if err := a.check(AcrobotName, action, 3); err != nil {
		return 0, false, false, err
	}
	a.state = acrobotNext(a.state, float64(action-1))
	terminated := acrobotReached(a.state)
	truncated := a.end(terminated)
	a.observe(obs)
	var reward float32 = -1
	if terminated {
		reward = 0
	}
	return reward, terminated, truncated, nil
}

// acrobotReached says whether the tip is more than one link's length above
// the pivot.
func acrobotReached(s [4]float64) bool { return -math.Cos(s[0])-math.Cos(s[0]+s[1]) > 1 }

// acrobotNext integrates one step of dt with torque at the elbow (one
// Runge-Kutta step of order 4, the torque held), wraps the angles and clips
// the velocities.
func acrobotNext(s [4]float64, torque float64) [4]float64 {
	add := func(y, k [4]float64, h float64) [4]float64 {
		for i := range y {
			y[i] += h * k[i]
		}
		return y
	}
	k1 := acrobotDeriv(s, torque)
	k2 := acrobotDeriv(add(s, k1, acDt/2), torque)
	k3 := acrobotDeriv(add(s, k2, acDt/2), torque)
	k4 := acrobotDeriv(add(s, k3, acDt), torque)
	var n [4]float64
	for i := range n {
		n[i] = s[i] + acDt/6*(k1[i]+2*k2[i]+2*k3[i]+k4[i])
	}
	n[0], n[1] = wrapAngle(n[0]), wrapAngle(n[1])
	n[2] = math.Max(-acMaxVel1, math.Min(acMaxVel1, n[2]))
	n[3] = math.Max(-acMaxVel2, math.Min(acMaxVel2, n[3]))
	return n
}

// acrobotDeriv is the state's time derivative under the book's equations
// of motion, with a1 and a2 the links' angular accelerations: d1·a1 +
// d2·a2 + phi1 = 0 and d2·a1 + (m2·lc2² + I2)·a2 + m2·l1·lc2·theta1'²·sin
// theta2 + phi2 = torque, solved for a1 and a2 (phi1 and phi2 the gravity
// and Coriolis terms, theta measured from hanging down).
func acrobotDeriv(s [4]float64, torque float64) [4]float64 {
	t1, t2, dt1, dt2 := s[0], s[1], s[2], s[3]
	d1 := acM1*acLC1*acLC1 + acM2*(acL1*acL1+acLC2*acLC2+2*acL1*acLC2*math.Cos(t2)) + acI1 + acI2
	d2 := acM2*(acLC2*acLC2+acL1*acLC2*math.Cos(t2)) + acI2
	phi2 := acM2 * acLC2 * acGravity * math.Cos(t1+t2-math.Pi/2)
	phi1 := -acM2*acL1*acLC2*dt2*dt2*math.Sin(t2) - 2*acM2*acL1*acLC2*dt2*dt1*math.Sin(t2) +
		(acM1*acLC1+acM2*acL1)*acGravity*math.Cos(t1-math.Pi/2) + phi2
	ddt2 := (torque + d2/d1*phi1 - acM2*acL1*acLC2*dt1*dt1*math.Sin(t2) - phi2) / (acM2*acLC2*acLC2 + acI2 - d2*d2/d1)
	ddt1 := -(d2*ddt2 + phi1) / d1
	return [4]float64{dt1, dt2, ddt1, ddt2}
}

// wrapAngle maps x into [-pi, pi).
func wrapAngle(x float64) float64 {
	const full = 2 * math.Pi
	for x >= math.Pi {
		x -= full
	}
	for x < -math.Pi {
		x += full
	}
	return x
}

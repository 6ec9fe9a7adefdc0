package env

import (
	"math"
	"math/rand/v2"
)

// CartPoleName is the name of CartPole-v1.
const CartPoleName = "CartPole-v1"

// The CartPole-v1 constants of the classic-control reference (Barto,
// Sutton and Anderson's cart-pole, as the Gym/Gymnasium CartPole-v1
// defines it).
const (
	cpGravity    = 9.8
	cpMassCart   = 1.0
	cpMassPole   = 0.1
	cpTotalMass  = cpMassCart + cpMassPole
	cpLength     = 0.5 // half the pole's length
	cpPoleMassL  = cpMassPole * cpLength
	cpForceMag   = 10.0
	cpTau        = 0.02 // seconds between state updates
	cpThetaLimit = 12 * 2 * math.Pi / 360
	cpXLimit     = 2.4
	cpResetBound = 0.05
	// CartPoleMaxSteps is the time limit of CartPole-v1: the 500th step
	// truncates the episode.
	CartPoleMaxSteps = 500
)

// CartPole is CartPole-v1: push a cart left (action 0) or right (action 1)
// to keep a pole upright. The observation is (x, x', theta, theta'); the
// reward is 1 for every step, including the one that ends the episode. An
// episode terminates when |theta| exceeds 12 degrees or |x| exceeds 2.4 and
// is truncated at 500 steps. The state is kept in float64 and integrated
// with the explicit Euler rule, as in the reference; observations are its
// float32 rounding.
type CartPole struct {
	state [4]float64
	episode
}

// NewCartPole returns a CartPole; Reset it before the first Step.
func NewCartPole() *CartPole { return &CartPole{episode: episode{limit: CartPoleMaxSteps}} }

// Name is "CartPole-v1".
func (c *CartPole) Name() string { return CartPoleName }

// ObsSize is 4.
func (c *CartPole) ObsSize() int { return 4 }

// NumActions is 2.
func (c *CartPole) NumActions() int { return 2 }

// Reset draws each state variable uniformly from [-0.05, 0.05).
func (c *CartPole) Reset(seed uint64, obs []float32) {
	rng := rand.New(rand.NewPCG(seed, 0x63617274706f6c65)) // "cartpole"
	for i := range c.state {
		c.state[i] = -cpResetBound + 2*cpResetBound*rng.Float64()
	}
	c.start()
	c.observe(obs)
}

// SetState places the cart in a given state and starts an episode there,
// as a test or a replay of a recorded episode needs.
func (c *CartPole) SetState(s [4]float64, obs []float32) {
	c.state = s
	c.start()
	c.observe(obs)
}

// State returns the float64 state (x, x', theta, theta').
func (c *CartPole) State() [4]float64 { return c.state }

func (c *CartPole) observe(obs []float32) {
	for i, v := range c.state {
		obs[i] = float32(v)
	}
}

// Step advances the cart by one Euler step of tau = 0.02 s.
func (c *CartPole) Step(action int, obs []float32) (float32, bool, bool, error) {
	if err := c.check(CartPoleName, action, 2); err != nil {
		return 0, false, false, err
	}
	c.state = cartPoleNext(c.state, action)
	x, theta := c.state[0], c.state[2]
	terminated := x < -cpXLimit || x > cpXLimit || theta < -cpThetaLimit || theta > cpThetaLimit
	truncated := c.end(terminated)
	c.observe(obs)
	return 1, terminated, truncated, nil
}

// cartPoleNext is the reference's equations of motion with the Euler rule:
// the positions move with the old velocities, the velocities with the
// accelerations computed from the old state.
func cartPoleNext(s [4]float64, action int) [4]float64 {
	x, xDot, theta, thetaDot := s[0], s[1], s[2], s[3]
	force := -cpForceMag
	if action == 1 {
		force = cpForceMag
	}
	cos, sin := math.Cos(theta), math.Sin(theta)
	temp := (force + cpPoleMassL*thetaDot*thetaDot*sin) / cpTotalMass
	thetaAcc := (cpGravity*sin - cos*temp) / (cpLength * (4.0/3.0 - cpMassPole*cos*cos/cpTotalMass))
	xAcc := temp - cpPoleMassL*thetaAcc*cos/cpTotalMass
	return [4]float64{
		x + cpTau*xDot,
		xDot + cpTau*xAcc,
		theta + cpTau*thetaDot,
		thetaDot + cpTau*thetaAcc,
	}
}

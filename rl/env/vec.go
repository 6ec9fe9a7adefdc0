package env

import (
	"fmt"
	"math/rand/v2"
)

// Vec steps n instances of one environment together. Each instance starts
// a new episode as soon as its last one ends, so the vector always has n
// live observations to act on. Episode seeds are drawn from one generator
// seeded at construction, so a Vec made with the same seed and given the
// same actions produces the same transitions.
type Vec struct {
	envs    []Env
	obsSize int
	actions int
	rng     *rand.Rand
	obs     []float32 // n×obsSize, the observations to act on
	ret     []float64 // each instance's return so far in its episode
	length  []int     // each instance's steps so far in its episode
}

// Transition is what one instance did in a Vec step. NextObs is the
// observation the action led to, even when the episode ended there (the
// vector's Obs already holds the next episode's first observation).
type Transition struct {
	Reward     float32
	Terminated bool
	Truncated  bool
}

// Episode is a finished episode: its instance, return and length.
type Episode struct {
	Env    int
	Return float64
	Length int
}

// NewVec makes n instances with newEnv, seeds the episode generator with
// seed and resets every instance.
func NewVec(newEnv Factory, n int, seed uint64) (*Vec, error) {
	if n <= 0 {
		return nil, fmt.Errorf("env: a vector needs at least one environment, got %d", n)
	}
	v := &Vec{rng: rand.New(rand.NewPCG(seed, 0x766563)), ret: make([]float64, n), length: make([]int, n)}
	for range n {
		v.envs = append(v.envs, newEnv())
	}
	v.obsSize, v.actions = v.envs[0].ObsSize(), v.envs[0].NumActions()
	v.obs = make([]float32, n*v.obsSize)
	for i, e := range v.envs {
		e.Reset(v.rng.Uint64(), v.obs[i*v.obsSize:(i+1)*v.obsSize])
	}
	return v, nil
}

// Len is the number of instances.
func (v *Vec) Len() int { return len(v.envs) }

// ObsSize is the length of one observation.
func (v *Vec) ObsSize() int { return v.obsSize }

// NumActions is the number of discrete actions.
func (v *Vec) NumActions() int { return v.actions }

// Obs is the n×ObsSize observations to act on. It is the Vec's own
// memory: Step overwrites it.
func (v *Vec) Obs() []float32 { return v.obs }

// Step applies actions[i] to instance i. It writes each instance's next
// observation into nextObs (n×ObsSize) and its reward and end flags into
// out (n values), resets the instances whose episode ended and appends
// those episodes to done, which it returns.
func (v *Vec) Step(actions []int, nextObs []float32, out []Transition, done []Episode) ([]Episode, error) {
	n := len(v.envs)
	if len(actions) != n || len(out) != n || len(nextObs) != n*v.obsSize {
		return done, fmt.Errorf("env: vector of %d needs %d actions, %d transitions and %d next-observation values, got %d, %d and %d",
			n, n, n, n*v.obsSize, len(actions), len(out), len(nextObs))
	}
	for i, e := range v.envs {
		next := nextObs[i*v.obsSize : (i+1)*v.obsSize]
		r, term, trunc, err := e.Step(actions[i], next)
		if err != nil {
			return done, fmt.Errorf("env: instance %d: %w", i, err)
		}
		out[i] = Transition{Reward: r, Terminated: term, Truncated: trunc}
		v.ret[i] += float64(r)
		v.length[i]++
		obs := v.obs[i*v.obsSize : (i+1)*v.obsSize]
		if term || trunc {
			done = append(done, Episode{Env: i, Return: v.ret[i], Length: v.length[i]})
			v.ret[i], v.length[i] = 0, 0
			e.Reset(v.rng.Uint64(), obs)
			continue
		}
		copy(obs, next)
	}
	return done, nil
}

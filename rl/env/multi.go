package env

// MultiEnv is an episodic world that several agents act in at once. Each
// agent has its own observation (its own point of view) and reward, and
// they share one action space; an episode ends for all of them together.
// A single-agent Env is a MultiEnv of one agent through Single, so an
// environment with one agent is still written as an Env.
type MultiEnv interface {
	// Name identifies the world, e.g. "Forage".
	Name() string
	// Agents is the number of agents acting in the world.
	Agents() int
	// ObsSize is the length of one agent's observation.
	ObsSize() int
	// NumActions is the number of discrete actions of each agent.
	NumActions() int
	// Reset starts an episode drawn from seed and writes each agent's
	// first observation into obs[i] (ObsSize values each).
	Reset(seed uint64, obs [][]float32)
	// Step applies every agent's action at once, writes each agent's next
	// observation into obs[i] and its reward into rewards[i], and returns
	// whether the episode terminated or was truncated (see Env.Step).
	Step(actions []int, obs [][]float32, rewards []float32) (terminated, truncated bool, err error)
}

// Single is e as a world of one agent.
func Single(e Env) MultiEnv { return single{e} }

type single struct{ e Env }

func (s single) Name() string                       { return s.e.Name() }
func (s single) Agents() int                        { return 1 }
func (s single) ObsSize() int                       { return s.e.ObsSize() }
func (s single) NumActions() int                    { return s.e.NumActions() }
func (s single) Reset(seed uint64, obs [][]float32) { s.e.Reset(seed, obs[0]) }

func (s single) Step(actions []int, obs [][]float32, rewards []float32) (bool, bool, error) {
	r, term, trunc, err := s.e.Step(actions[0], obs[0])
	rewards[0] = r
	return term, trunc, err
}

package env

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// ForageName is the name of the multi-agent foraging world.
const ForageName = "Forage"

// ForageConfig sizes a Forage world. The zero value of a field takes its
// default (Walls's is 0: no wall inside the border).
type ForageConfig struct {
	Width, Height int // the grid, walls on its border included (default 11×11)
	Agents        int // agents in the world (default 2)
	Food          int // food items on the ground at any time (default 6)
	Walls         int // wall cells inside the border, placed at random each episode (default 0)
	View          int // an agent sees the cells within View steps in x and y (default 2: a 5×5 window)
	MaxSteps      int // the time limit (default 200)
	// LastMove adds to each agent's observation its last action (one-hot,
	// stay at an episode's start) and whether that move was blocked: a
	// memory of one step, which a policy of the observation alone needs
	// to keep a heading, as ForageScripted does, rather than stall.
	LastMove bool
}

// WithDefaults fills in the zero fields.
func (c ForageConfig) WithDefaults() ForageConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Width, 11)
	def(&c.Height, 11)
	def(&c.Agents, 2)
	def(&c.Food, 6)
	def(&c.View, 2)
	def(&c.MaxSteps, 200)
	return c
}

// Validate checks the sizes: a grid of at least 3×3 with room inside its
// border for every agent, food item and wall.
func (c ForageConfig) Validate() error {
	switch {
	case c.Width < 3 || c.Height < 3 || c.Width > 256 || c.Height > 256:
		return fmt.Errorf("forage: width and height must be 3..256 (the border is wall), got %d×%d", c.Width, c.Height)
	case c.Agents < 1 || c.Food < 1 || c.Walls < 0 || c.View < 1 || c.View > 16 || c.MaxSteps < 1:
		return fmt.Errorf("forage: agents %d, food %d, walls %d, view %d, max_steps %d: need agents, food and max_steps >= 1, walls >= 0, view 1..16",
			c.Agents, c.Food, c.Walls, c.View, c.MaxSteps)
	case c.Agents+c.Food+c.Walls > (c.Width-2)*(c.Height-2):
		return fmt.Errorf("forage: %d agents, %d food and %d walls do not fit the %d free cells of a %d×%d grid",
			c.Agents, c.Food, c.Walls, (c.Width-2)*(c.Height-2), c.Width, c.Height)
	}
	return nil
}

// Forage actions.
const (
	ForageStay = iota
	ForageUp
	ForageDown
	ForageLeft
	ForageRight
	forageActions
)

// Forage is a grid world shared by several agents that collect food.
//
// The grid has walls on its border and Walls more cells of wall inside,
// placed with the agents and the food at random at each Reset. Each step
// every agent stays or moves one cell up, down, left or right (actions
// 0..4), all at once: a move into a wall fails; agents never share a cell
// or pass through each other, so when several agents move into one cell,
// or two agents swap cells, or an agent moves into the cell of one that
// stays, none of those agents moves (an agent may follow another that
// moves away). An agent that ends its step on food collects it for a
// reward of 1 (0 otherwise), and a new item appears on a random free cell,
// so there are always Food items. Episodes are truncated at MaxSteps and
// never terminate.
//
// An agent observes the (2·View+1)² cells around it, row by row from the
// top left, three values a cell: wall (cells beyond the grid are wall),
// food, another agent; each 0 or 1. Everything random comes from the Reset
// seed: the same seed and actions give the same episode.
type Forage struct {
	cfg  ForageConfig
	cell []uint8   // width·height cells: forageWall, forageFood or 0
	pos  []int     // each agent's cell
	at   []int     // the agent on each cell, or -1
	src  *rand.PCG // rng's state, which a saved world keeps (MarshalBinary)
	rng  *rand.Rand
	episode
	last   []int  // each agent's last action (LastMove)
	bumped []bool // whether it was a move that failed (LastMove)
	// Step's scratch, made once.
	target        []int
	blocked, fail []bool
}

const (
	forageWall = 1
	forageFood = 2
)

// NewForage makes a world of cfg (its zero fields defaulted).
func NewForage(cfg ForageConfig) (*Forage, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := cfg.Width * cfg.Height
	f := &Forage{cfg: cfg, episode: episode{limit: cfg.MaxSteps}, cell: make([]uint8, n), pos: make([]int, cfg.Agents), at: make([]int, n),
		target: make([]int, cfg.Agents), blocked: make([]bool, cfg.Agents), fail: make([]bool, cfg.Agents),
		last: make([]int, cfg.Agents), bumped: make([]bool, cfg.Agents)}
	return f, nil
}

// Config is the world's configuration, defaults filled in.
func (f *Forage) Config() ForageConfig { return f.cfg }

// Name is "Forage".
func (f *Forage) Name() string { return ForageName }

// Agents is the number of agents.
func (f *Forage) Agents() int { return f.cfg.Agents }

// ObsSize is 3·(2·View+1)², and 6 more with LastMove.
func (f *Forage) ObsSize() int { return f.cfg.obsSize() }

func (c ForageConfig) obsSize() int {
	w := 2*c.View + 1
	if c.LastMove {
		return 3*w*w + forageActions + 1
	}
	return 3 * w * w
}

// NumActions is 5: stay, up, down, left, right.
func (f *Forage) NumActions() int { return forageActions }

// Reset builds the grid: border walls, then the inner walls, the agents
// and the food on distinct random free cells.
func (f *Forage) Reset(seed uint64, obs [][]float32) {
	f.src = rand.NewPCG(seed, 0x666f72616765) // "forage"
	f.rng = rand.New(f.src)
	w, h := f.cfg.Width, f.cfg.Height
	for i := range f.cell {
		x, y := i%w, i/w
		f.cell[i] = 0
		if x == 0 || y == 0 || x == w-1 || y == h-1 {
			f.cell[i] = forageWall
		}
		f.at[i] = -1
	}
	for range f.cfg.Walls {
		f.cell[f.freeCell()] = forageWall
	}
	for a := range f.pos {
		c := f.freeCell()
		f.pos[a], f.at[c] = c, a
	}
	for range f.cfg.Food {
		f.cell[f.freeCell()] = forageFood
	}
	for a := range f.last {
		f.last[a], f.bumped[a] = ForageStay, false
	}
	f.start()
	f.observe(obs)
}

// freeCell draws a cell holding no wall, food or agent, uniformly: the
// config guarantees one exists.
func (f *Forage) freeCell() int {
	for {
		c := f.rng.IntN(len(f.cell))
		if f.cell[c] == 0 && f.at[c] < 0 {
			return c
		}
	}
}

// Step moves the agents at once, pays for the food they land on and
// replaces it.
func (f *Forage) Step(actions []int, obs [][]float32, rewards []float32) (bool, bool, error) {
	if err := f.ready(); err != nil {
		return false, false, err
	}
	if len(actions) != f.cfg.Agents {
		return false, false, fmt.Errorf("env: %s needs %d actions, one per agent, got %d", ForageName, f.cfg.Agents, len(actions))
	}
	for a, act := range actions {
		if act < 0 || act >= forageActions {
			return false, false, fmt.Errorf("env: %s agent %d's action must be 0..%d, got %d", ForageName, a, forageActions-1, act)
		}
	}
	f.move(actions)
	for a, act := range actions {
		// move leaves blocked set for every agent that stayed.
		f.last[a], f.bumped[a] = act, act != ForageStay && f.blocked[a]
	}
	for a, c := range f.pos {
		rewards[a] = 0
		if f.cell[c] == forageFood {
			rewards[a] = 1
			f.cell[c] = 0
			f.cell[f.freeCell()] = forageFood
		}
	}
	truncated := f.end(false)
	f.observe(obs)
	return false, truncated, nil
}

// move resolves the simultaneous moves: a move into a wall fails; then,
// until nothing changes, a move fails when another agent targets the same
// cell, when the target's agent does not leave it, or when two agents
// would swap. The outcome does not depend on the agents' order.
func (f *Forage) move(actions []int) {
	w := f.cfg.Width
	delta := [forageActions]int{0, -w, w, -1, 1}
	for a, act := range actions {
		t := f.pos[a] + delta[act]
		f.blocked[a] = act == ForageStay || f.cell[t] == forageWall
		if f.blocked[a] {
			t = f.pos[a]
		}
		f.target[a] = t
	}
	// Each pass judges every move against the same targets, then stops
	// the failed ones, so no agent's number decides a conflict.
	for changed := true; changed; {
		changed = false
		for a := range actions {
			f.fail[a] = false
			if f.blocked[a] {
				continue
			}
			t := f.target[a]
			if b := f.at[t]; b >= 0 && (f.blocked[b] || f.target[b] == f.pos[a]) {
				f.fail[a] = true // into an agent that stays, or a swap
			}
			for b := range actions {
				if b != a && f.target[b] == t {
					f.fail[a] = true // two agents into one cell
				}
			}
		}
		for a := range actions {
			if f.fail[a] {
				f.blocked[a], f.target[a], changed = true, f.pos[a], true
			}
		}
	}
	for a := range actions {
		f.at[f.pos[a]] = -1
	}
	for a := range actions {
		f.pos[a] = f.target[a]
		f.at[f.pos[a]] = a
	}
}

// observe writes every agent's window.
func (f *Forage) observe(obs [][]float32) {
	w, h, v := f.cfg.Width, f.cfg.Height, f.cfg.View
	for a, p := range f.pos {
		o := obs[a][:f.ObsSize()]
		px, py := p%w, p/w
		i := 0
		for dy := -v; dy <= v; dy++ {
			for dx := -v; dx <= v; dx++ {
				x, y := px+dx, py+dy
				wall, food, other := float32(1), float32(0), float32(0)
				if x >= 0 && y >= 0 && x < w && y < h {
					c := y*w + x
					wall = 0
					switch f.cell[c] {
					case forageWall:
						wall = 1
					case forageFood:
						food = 1
					}
					if b := f.at[c]; b >= 0 && b != a {
						other = 1
					}
				}
				o[i], o[i+1], o[i+2] = wall, food, other
				i += 3
			}
		}
		if f.cfg.LastMove {
			for act := range forageActions {
				o[i+act] = 0
			}
			o[i+f.last[a]] = 1
			o[i+forageActions] = 0
			if f.bumped[a] {
				o[i+forageActions] = 1
			}
		}
	}
}

// Positions returns each agent's cell as (x, y).
func (f *Forage) Positions() [][2]int {
	out := make([][2]int, len(f.pos))
	for a, p := range f.pos {
		out[a] = [2]int{p % f.cfg.Width, p / f.cfg.Width}
	}
	return out
}

// ForageScripted is the world's scripted baseline policy, for one agent:
// step toward the nearest food it sees (fewest moves; ties to the first in
// its window's row-by-row order; the longer axis first), and when it sees
// none keep heading one way, turning to a random open direction when a
// wall or agent is in the way. Its randomness is seeded, so a scripted
// agent is reproducible.
type ForageScripted struct {
	view    int
	heading int
	rng     *rand.Rand
}

// NewForageScripted makes the scripted policy for a world of cfg.
func NewForageScripted(cfg ForageConfig, seed uint64) *ForageScripted {
	cfg = cfg.WithDefaults()
	return &ForageScripted{view: cfg.View, heading: ForageUp, rng: rand.New(rand.NewPCG(seed, 0x736372697074))} // "script"
}

// Act chooses an action from an agent's observation.
func (s *ForageScripted) Act(obs []float32) (int, error) {
	w := 2*s.view + 1
	if len(obs) != 3*w*w && len(obs) != 3*w*w+forageActions+1 {
		return 0, errors.New("env: the scripted forager's observation does not match its world's view")
	}
	best, bx, by := -1, 0, 0
	for i := range w * w {
		if obs[3*i+1] == 0 {
			continue
		}
		dx, dy := i%w-s.view, i/w-s.view
		if d := abs(dx) + abs(dy); best < 0 || d < best {
			best, bx, by = d, dx, dy
		}
	}
	free := func(act int) bool {
		dx, dy := [forageActions]int{0, 0, 0, -1, 1}[act], [forageActions]int{0, -1, 1, 0, 0}[act]
		c := (s.view+dy)*w + s.view + dx
		return obs[3*c] == 0 && obs[3*c+2] == 0
	}
	if best > 0 {
		horiz, vert := ForageRight, ForageDown
		if bx < 0 {
			horiz = ForageLeft
		}
		if by < 0 {
			vert = ForageUp
		}
		first, second := horiz, vert
		if abs(by) > abs(bx) {
			first, second = vert, horiz
		}
		if (first == horiz && bx != 0 || first == vert && by != 0) && free(first) {
			return first, nil
		}
		if (second == horiz && bx != 0 || second == vert && by != 0) && free(second) {
			return second, nil
		}
	}
	if !free(s.heading) {
		var open [forageActions]int
		n := 0
		for act := ForageUp; act < forageActions; act++ {
			if free(act) {
				open[n], n = act, n+1
			}
		}
		if n == 0 {
			return ForageStay, nil
		}
		s.heading = open[s.rng.IntN(n)]
	}
	return s.heading, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

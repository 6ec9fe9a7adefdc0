package env

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
)

// ErrState is what UnmarshalBinary refuses a saved world with: damaged,
// or the state of a world of another configuration.
var ErrState = errors.New("not a saved state of this world")

// forageState is a Forage world between two steps, as MarshalBinary writes
// it: enough to go on exactly as the world would have.
type forageState struct {
	Config ForageConfig `json:"config"`
	Steps  int          `json:"steps"` // of the episode so far
	Over   bool         `json:"over"`
	Reset  bool         `json:"reset"`
	Cells  []uint8      `json:"cells"`
	Pos    []int        `json:"pos"`
	RNG    []byte       `json:"rng"` // the generator's state (rand.PCG's MarshalBinary)
	Last   []int        `json:"last"`
	Bumped []bool       `json:"bumped"`
}

// MarshalBinary saves the world: its grid, its agents, its episode's
// step count and its random generator's state, so that a world restored
// from it (UnmarshalBinary) steps on exactly as this one would. A world
// never reset is saved as such.
func (f *Forage) MarshalBinary() ([]byte, error) {
	s := forageState{Config: f.cfg, Steps: f.steps, Over: f.over, Reset: f.reset, Cells: f.cell, Pos: f.pos, Last: f.last, Bumped: f.bumped}
	if f.src != nil {
		var err error
		if s.RNG, err = f.src.MarshalBinary(); err != nil {
			return nil, err
		}
	}
	return json.Marshal(s)
}

// UnmarshalBinary restores a world saved by MarshalBinary from a world of
// the same configuration; anything else is refused with ErrState and
// leaves f as it was. Observations are not part of the state: Observe
// writes them again.
func (f *Forage) UnmarshalBinary(b []byte) error {
	var s forageState
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("env: %s: %w: %v", ForageName, ErrState, err)
	}
	n := f.cfg.Width * f.cfg.Height
	switch {
	case s.Config != f.cfg:
		return fmt.Errorf("env: %s: %w: it was saved from a world of %+v, this one is %+v", ForageName, ErrState, s.Config, f.cfg)
	case len(s.Cells) != n || len(s.Pos) != f.cfg.Agents || len(s.Last) != f.cfg.Agents || len(s.Bumped) != f.cfg.Agents || s.Steps < 0 || s.Steps > f.cfg.MaxSteps:
		return fmt.Errorf("env: %s: %w: %d cells, %d agents and step %d for a %d×%d world of %d agents and %d steps",
			ForageName, ErrState, len(s.Cells), len(s.Pos), s.Steps, f.cfg.Width, f.cfg.Height, f.cfg.Agents, f.cfg.MaxSteps)
	case s.Reset != (s.RNG != nil):
		return fmt.Errorf("env: %s: %w: a reset world has a generator state and only it", ForageName, ErrState)
	}
	for a, act := range s.Last {
		if act < 0 || act >= forageActions {
			return fmt.Errorf("env: %s: %w: agent %d's last action %d", ForageName, ErrState, a, act)
		}
	}
	at := make([]int, n)
	for i := range at {
		at[i] = -1
	}
	food := 0
	for c, v := range s.Cells {
		if v > forageFood {
			return fmt.Errorf("env: %s: %w: cell %d holds %d", ForageName, ErrState, c, v)
		}
		if v == forageFood {
			food++
		}
	}
	for a, c := range s.Pos {
		if c < 0 || c >= n || at[c] >= 0 || s.Cells[c] == forageWall {
			return fmt.Errorf("env: %s: %w: agent %d on cell %d, out of the grid, in a wall or on another agent", ForageName, ErrState, a, c)
		}
		at[c] = a
	}
	if s.Reset && food != f.cfg.Food {
		return fmt.Errorf("env: %s: %w: %d food items, the world keeps %d", ForageName, ErrState, food, f.cfg.Food)
	}
	var src *rand.PCG
	if s.Reset {
		src = new(rand.PCG)
		if err := src.UnmarshalBinary(s.RNG); err != nil {
			return fmt.Errorf("env: %s: %w: its generator: %v", ForageName, ErrState, err)
		}
	}
	copy(f.cell, s.Cells)
	copy(f.pos, s.Pos)
	copy(f.last, s.Last)
	copy(f.bumped, s.Bumped)
	f.at = at
	f.steps, f.over, f.reset = s.Steps, s.Over, s.Reset
	f.src, f.rng = src, nil
	if src != nil {
		f.rng = rand.New(src)
	}
	return nil
}

// Observe writes every agent's observation of the world as it is now,
// as Reset and Step do: for a world restored by UnmarshalBinary.
func (f *Forage) Observe(obs [][]float32) { f.observe(obs) }

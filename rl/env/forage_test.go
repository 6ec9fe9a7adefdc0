package env

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// layout places walls, food and agents on an empty 7×7 world (border walls
// only) for a rules test.
func layout(t *testing.T, agents [][2]int, walls, food [][2]int) (*Forage, [][]float32) {
	t.Helper()
	f, err := NewForage(ForageConfig{Width: 7, Height: 7, Agents: len(agents), Food: 1, Walls: 0, View: 1, MaxSteps: 50})
	if err != nil {
		t.Fatal(err)
	}
	obs := make([][]float32, len(agents))
	for i := range obs {
		obs[i] = make([]float32, f.ObsSize())
	}
	f.Reset(1, obs)
	w := f.cfg.Width
	for i := range f.cell {
		if f.cell[i] != forageWall {
			f.cell[i] = 0
		}
		f.at[i] = -1
	}
	for _, c := range walls {
		f.cell[c[1]*w+c[0]] = forageWall
	}
	for _, c := range food {
		f.cell[c[1]*w+c[0]] = forageFood
	}
	for a, c := range agents {
		f.pos[a] = c[1]*w + c[0]
		f.at[f.pos[a]] = a
	}
	f.observe(obs)
	return f, obs
}

// TestForageMoves checks the simultaneous-move rules.
func TestForageMoves(t *testing.T) {
	cases := []struct {
		name    string
		agents  [][2]int
		walls   [][2]int
		actions []int
		want    [][2]int
	}{
		{"moves", [][2]int{{2, 2}}, nil, []int{ForageRight}, [][2]int{{3, 2}}},
		{"into the border", [][2]int{{1, 1}}, nil, []int{ForageUp}, [][2]int{{1, 1}}},
		{"into an inner wall", [][2]int{{2, 2}}, [][2]int{{2, 3}}, []int{ForageDown}, [][2]int{{2, 2}}},
		{"two into one cell", [][2]int{{2, 2}, {4, 2}}, nil, []int{ForageRight, ForageLeft}, [][2]int{{2, 2}, {4, 2}}},
		{"a swap", [][2]int{{2, 2}, {3, 2}}, nil, []int{ForageRight, ForageLeft}, [][2]int{{2, 2}, {3, 2}}},
		{"into one that stays", [][2]int{{2, 2}, {3, 2}}, nil, []int{ForageRight, ForageStay}, [][2]int{{2, 2}, {3, 2}}},
		{"following one that leaves", [][2]int{{2, 2}, {3, 2}}, nil, []int{ForageRight, ForageRight}, [][2]int{{3, 2}, {4, 2}}},
		{"a chain stopped at its head", [][2]int{{2, 2}, {3, 2}, {4, 2}}, [][2]int{{5, 2}}, []int{ForageRight, ForageRight, ForageRight},
			[][2]int{{2, 2}, {3, 2}, {4, 2}}},
		{"a square turning", [][2]int{{2, 2}, {3, 2}, {3, 3}, {2, 3}}, nil, []int{ForageRight, ForageDown, ForageLeft, ForageUp},
			[][2]int{{3, 2}, {3, 3}, {2, 3}, {2, 2}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, obs := layout(t, c.agents, c.walls, nil)
			rewards := make([]float32, len(c.agents))
			if _, _, err := f.Step(c.actions, obs, rewards); err != nil {
				t.Fatal(err)
			}
			if got := f.Positions(); !slices.Equal(got, c.want) {
				t.Errorf("positions %v, want %v", got, c.want)
			}
		})
	}
}

// TestForageMovesIgnoreAgentOrder: numbering the agents another way moves
// them to the same cells.
func TestForageMovesIgnoreAgentOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for trial := range 300 {
		f, err := NewForage(ForageConfig{Width: 6, Height: 6, Agents: 8, Food: 2, Walls: 2, View: 1})
		if err != nil {
			t.Fatal(err)
		}
		obs := make([][]float32, 8)
		for i := range obs {
			obs[i] = make([]float32, f.ObsSize())
		}
		f.Reset(uint64(trial), obs)
		g, _ := NewForage(f.cfg)
		g.Reset(uint64(trial), obs)
		perm := rng.Perm(8)
		actions, permuted := make([]int, 8), make([]int, 8)
		for a := range actions {
			actions[a] = rng.IntN(forageActions)
		}
		// g's agent i is f's agent perm[i].
		for i, a := range perm {
			g.pos[i] = f.pos[a]
			g.at[g.pos[i]] = i
			permuted[i] = actions[a]
		}
		f.move(actions)
		g.move(permuted)
		for i, a := range perm {
			if g.pos[i] != f.pos[a] {
				t.Fatalf("trial %d: agent %d ends on %d, renumbered %d on %d", trial, a, f.pos[a], i, g.pos[i])
			}
		}
		seen := map[int]bool{}
		for _, p := range f.pos {
			if seen[p] || f.cell[p] == forageWall {
				t.Fatalf("trial %d: agents on %v share a cell or stand in a wall", trial, f.pos)
			}
			seen[p] = true
		}
	}
}

// TestForageFood: landing on food pays 1 and a new item appears on a free
// cell, so the count stays.
func TestForageFood(t *testing.T) {
	f, obs := layout(t, [][2]int{{2, 2}, {4, 4}}, nil, [][2]int{{3, 2}, {1, 5}})
	rewards := make([]float32, 2)
	if _, _, err := f.Step([]int{ForageRight, ForageStay}, obs, rewards); err != nil {
		t.Fatal(err)
	}
	if rewards[0] != 1 || rewards[1] != 0 {
		t.Fatalf("rewards %v, want [1 0]", rewards)
	}
	food := 0
	for c, v := range f.cell {
		if v == forageFood {
			food++
			if f.at[c] >= 0 {
				t.Errorf("new food under agent %d", f.at[c])
			}
		}
	}
	if food != 2 {
		t.Errorf("%d food items after one was eaten, want 2", food)
	}
}

// TestForageObservation: the window's three channels, walls beyond the
// grid's edge, another agent seen and oneself not.
func TestForageObservation(t *testing.T) {
	_, obs := layout(t, [][2]int{{1, 1}, {2, 2}}, nil, [][2]int{{2, 1}})
	// Agent 0 at (1,1) with view 1: rows y=0..2, columns x=0..2.
	want := []float32{
		1, 0, 0, 1, 0, 0, 1, 0, 0, // y=0: border
		1, 0, 0, 0, 0, 0, 0, 1, 0, // y=1: border, itself, food
		1, 0, 0, 0, 0, 0, 0, 0, 1, // y=2: border, empty, agent 1
	}
	if !slices.Equal(obs[0], want) {
		t.Fatalf("agent 0 sees %v, want %v", obs[0], want)
	}
	// Agent 1 at (2,2) sees agent 0 at its top left, the food above it.
	if obs[1][2] != 1 || obs[1][3*1+1] != 1 || obs[1][3*4+2] != 0 {
		t.Fatalf("agent 1 sees %v", obs[1])
	}
	// A window reaching past the grid's edge sees wall there.
	g, err := NewForage(ForageConfig{Width: 5, Height: 5, Agents: 1, Food: 1, Walls: 0, View: 3})
	if err != nil {
		t.Fatal(err)
	}
	o := [][]float32{make([]float32, g.ObsSize())}
	g.Reset(5, o)
	walls := 0
	for i := 0; i < len(o[0]); i += 3 {
		walls += int(o[0][i])
	}
	// A 7×7 window over a 5×5 grid: 49 cells, of which 9 are the free
	// inside: 40 are wall, outside the grid or on its border.
	if walls != 40 {
		t.Errorf("%d wall cells in the window, want 40", walls)
	}
}

// TestForageEpisode: seeded and reproducible, truncated at MaxSteps,
// refusing bad actions and steps after the end.
func TestForageEpisode(t *testing.T) {
	cfg := ForageConfig{MaxSteps: 30}
	run := func(seed uint64) ([]float32, []float32) {
		f, err := NewForage(cfg)
		if err != nil {
			t.Fatal(err)
		}
		obs := [][]float32{make([]float32, f.ObsSize()), make([]float32, f.ObsSize())}
		f.Reset(seed, obs)
		rng := rand.New(rand.NewPCG(seed, 1))
		rewards, all := make([]float32, 2), []float32{}
		for i := 1; i <= 30; i++ {
			term, trunc, err := f.Step([]int{rng.IntN(5), rng.IntN(5)}, obs, rewards)
			if err != nil || term || trunc != (i == 30) {
				t.Fatalf("step %d: %v, %v, %v", i, term, trunc, err)
			}
			all = append(append(all, rewards...), obs[0]...)
		}
		if _, _, err := f.Step([]int{0, 0}, obs, rewards); !errors.Is(err, ErrEpisodeOver) {
			t.Fatalf("step after the time limit: %v", err)
		}
		return all, obs[1]
	}
	a, a1 := run(7)
	b, b1 := run(7)
	c, _ := run(8)
	if !slices.Equal(a, b) || !slices.Equal(a1, b1) {
		t.Fatal("one seed gave two episodes")
	}
	if slices.Equal(a, c) {
		t.Fatal("two seeds gave one episode")
	}
	f, _ := NewForage(cfg)
	obs := [][]float32{make([]float32, f.ObsSize()), make([]float32, f.ObsSize())}
	if _, _, err := f.Step([]int{0, 0}, obs, make([]float32, 2)); !errors.Is(err, ErrNotReset) {
		t.Fatalf("step before reset: %v", err)
	}
	f.Reset(1, obs)
	for _, actions := range [][]int{{0}, {0, 5}, {-1, 0}} {
		if _, _, err := f.Step(actions, obs, make([]float32, 2)); err == nil {
			t.Errorf("actions %v accepted", actions)
		}
	}
}

func TestForageConfigRefused(t *testing.T) {
	for _, c := range []struct {
		cfg  ForageConfig
		want string
	}{
		{ForageConfig{Width: 2}, "3..256"},
		{ForageConfig{Width: 4, Height: 4, Agents: 3, Food: 2}, "do not fit"},
		{ForageConfig{View: 17}, "view 1..16"},
		{ForageConfig{Walls: -1}, "walls >= 0"},
	} {
		if _, err := NewForage(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.cfg, err, c.want)
		}
	}
}

// TestForageScriptedBeatsRandom: the scripted baseline collects more food
// than agents acting at random, over the same episodes.
func TestForageScriptedBeatsRandom(t *testing.T) {
	cfg := ForageConfig{}.WithDefaults()
	mean := func(scripted bool) float64 {
		var total float64
		const episodes = 20
		for ep := range uint64(episodes) {
			f, _ := NewForage(cfg)
			obs := make([][]float32, cfg.Agents)
			for i := range obs {
				obs[i] = make([]float32, f.ObsSize())
			}
			f.Reset(ep, obs)
			policies := make([]*ForageScripted, cfg.Agents)
			for i := range policies {
				policies[i] = NewForageScripted(cfg, ep*16+uint64(i))
			}
			rng := rand.New(rand.NewPCG(ep, 2))
			actions, rewards := make([]int, cfg.Agents), make([]float32, cfg.Agents)
			for {
				for i := range actions {
					if scripted {
						a, err := policies[i].Act(obs[i])
						if err != nil {
							t.Fatal(err)
						}
						actions[i] = a
					} else {
						actions[i] = rng.IntN(forageActions)
					}
				}
				_, trunc, err := f.Step(actions, obs, rewards)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rewards {
					total += float64(r)
				}
				if trunc {
					break
				}
			}
		}
		return total / episodes / float64(cfg.Agents)
	}
	s, r := mean(true), mean(false)
	t.Logf("food per agent per episode: scripted %.2f, random %.2f", s, r)
	if s <= r {
		t.Errorf("scripted %.2f, random %.2f: the baseline is no better than chance", s, r)
	}
}

// TestSingleIsOneAgent: an Env through Single steps as itself.
func TestSingleIsOneAgent(t *testing.T) {
	m := Single(NewCartPole())
	if m.Agents() != 1 || m.ObsSize() != 4 || m.NumActions() != 2 || m.Name() != CartPoleName {
		t.Fatalf("Single(CartPole): %d agents, obs %d, actions %d, %q", m.Agents(), m.ObsSize(), m.NumActions(), m.Name())
	}
	c := NewCartPole()
	obs, direct := [][]float32{make([]float32, 4)}, make([]float32, 4)
	m.Reset(9, obs)
	c.Reset(9, direct)
	rewards := make([]float32, 1)
	for i := range 20 {
		term, trunc, err := m.Step([]int{i % 2}, obs, rewards)
		r, dterm, dtrunc, derr := c.Step(i%2, direct)
		if err != nil || derr != nil || term != dterm || trunc != dtrunc || rewards[0] != r || !slices.Equal(obs[0], direct) {
			t.Fatalf("step %d: Single gave %v %v %v %v %v, the Env %v %v %v %v %v", i, obs[0], rewards[0], term, trunc, err, direct, r, dterm, dtrunc, derr)
		}
		if term {
			break
		}
	}
}

// TestForageLastMove: with LastMove each agent also sees its last action,
// one-hot (stay after a reset), and whether that move was blocked, by a
// wall or by another agent; the scripted baseline reads such
// observations too.
func TestForageLastMove(t *testing.T) {
	f, err := NewForage(ForageConfig{Width: 7, Height: 7, Agents: 3, Food: 1, View: 1, LastMove: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.ObsSize() != 27+6 {
		t.Fatalf("ObsSize %d, want 27 window values and 6 of the last move", f.ObsSize())
	}
	obs := [][]float32{make([]float32, 33), make([]float32, 33), make([]float32, 33)}
	f.Reset(1, obs)
	for a := range obs {
		if got := obs[a][27:]; !slices.Equal(got, []float32{1, 0, 0, 0, 0, 0}) {
			t.Fatalf("agent %d after a reset: last move %v, want stay, not blocked", a, got)
		}
	}
	// Agent 0 at (2,2) moves right; agent 1 at (1,1) up into the border;
	// agent 2 at (4,4) left into (3,4), where nobody is.
	w := f.cfg.Width
	for i := range f.at {
		f.at[i] = -1
	}
	for a, c := range [][2]int{{2, 2}, {1, 1}, {4, 4}} {
		f.pos[a] = c[1]*w + c[0]
		f.at[f.pos[a]] = a
	}
	for i := range f.cell {
		if f.cell[i] == forageFood {
			f.cell[i] = 0
		}
	}
	f.cell[5*w+5] = forageFood
	if _, _, err := f.Step([]int{ForageRight, ForageUp, ForageLeft}, obs, make([]float32, 3)); err != nil {
		t.Fatal(err)
	}
	for a, want := range [][]float32{{0, 0, 0, 0, 1, 0}, {0, 1, 0, 0, 0, 1}, {0, 0, 0, 1, 0, 0}} {
		if got := obs[a][27:]; !slices.Equal(got, want) {
			t.Errorf("agent %d: last move %v, want %v", a, got, want)
		}
	}
	// Agents 0 (now at (3,2)) and 2 (now at (3,4)) both move into (3,3):
	// both are blocked.
	if _, _, err := f.Step([]int{ForageDown, ForageStay, ForageUp}, obs, make([]float32, 3)); err != nil {
		t.Fatal(err)
	}
	for a, want := range [][]float32{{0, 0, 1, 0, 0, 1}, {1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 1}} {
		if got := obs[a][27:]; !slices.Equal(got, want) {
			t.Errorf("after the conflict, agent %d: last move %v, want %v", a, got, want)
		}
	}
	if _, err := NewForageScripted(f.cfg, 1).Act(obs[0]); err != nil {
		t.Errorf("the scripted baseline refuses an observation with the last move: %v", err)
	}
}

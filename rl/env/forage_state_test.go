package env

import (
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestForageStateRestores: a world restored from a saved state, mid-episode,
// steps on exactly as the world it was saved from, through the end of the
// episode and the food it replaces at random.
func TestForageStateRestores(t *testing.T) {
	cfg := ForageConfig{Agents: 3, Walls: 4, MaxSteps: 60, LastMove: true}
	f, err := NewForage(cfg)
	if err != nil {
		t.Fatal(err)
	}
	newObs := func() [][]float32 {
		obs := make([][]float32, 3)
		for i := range obs {
			obs[i] = make([]float32, f.ObsSize())
		}
		return obs
	}
	obs, rewards := newObs(), make([]float32, 3)
	f.Reset(11, obs)
	rng := rand.New(rand.NewPCG(4, 4))
	actions := func() []int { return []int{rng.IntN(5), rng.IntN(5), rng.IntN(5)} }
	for range 25 {
		if _, _, err := f.Step(actions(), obs, rewards); err != nil {
			t.Fatal(err)
		}
	}
	saved, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	g, _ := NewForage(cfg)
	gObs, gRewards := newObs(), make([]float32, 3)
	if err := g.UnmarshalBinary(saved); err != nil {
		t.Fatal(err)
	}
	g.Observe(gObs)
	for i := range obs {
		if !slices.Equal(obs[i], gObs[i]) {
			t.Fatalf("agent %d sees %v in the restored world, %v in the saved one", i, gObs[i], obs[i])
		}
	}
	eaten := 0
	for step := 26; step <= 60; step++ {
		acts := actions()
		_, trunc, err := f.Step(acts, obs, rewards)
		_, gTrunc, gErr := g.Step(acts, gObs, gRewards)
		if err != nil || gErr != nil || trunc != gTrunc || trunc != (step == 60) || !slices.Equal(rewards, gRewards) {
			t.Fatalf("step %d: the world gave %v %v %v, the restored one %v %v %v", step, rewards, trunc, err, gRewards, gTrunc, gErr)
		}
		for i := range obs {
			if !slices.Equal(obs[i], gObs[i]) {
				t.Fatalf("step %d: agent %d's observations differ", step, i)
			}
		}
		for _, r := range rewards {
			eaten += int(r)
		}
	}
	if eaten == 0 {
		t.Fatal("no food was eaten after the restore: the replaced food's draws were not compared")
	}
	if !slices.Equal(f.Positions(), g.Positions()) {
		t.Fatalf("positions %v and %v", f.Positions(), g.Positions())
	}
}

// TestForageStateRefused: a state of another world, or damaged, is refused
// and leaves the world as it was.
func TestForageStateRefused(t *testing.T) {
	f, _ := NewForage(ForageConfig{})
	obs := [][]float32{make([]float32, f.ObsSize()), make([]float32, f.ObsSize())}
	f.Reset(3, obs)
	saved, _ := f.MarshalBinary()
	other, _ := NewForage(ForageConfig{Width: 9})
	before, _ := other.MarshalBinary()
	g, _ := NewForage(ForageConfig{})
	g.Reset(5, obs)
	gBefore, _ := g.MarshalBinary()
	for name, c := range map[string]struct {
		f   *Forage
		raw []byte
	}{
		"another size":  {other, saved},
		"not a state":   {g, []byte("{")},
		"agent in wall": {g, []byte(`{"config":{"Width":11,"Height":11,"Agents":2,"Food":6,"Walls":0,"View":2,"MaxSteps":200},"cells":"` + wallCells() + `","pos":[0,1]}`)},
	} {
		if err := c.f.UnmarshalBinary(c.raw); !errors.Is(err, ErrState) {
			t.Errorf("%s: %v, want ErrState", name, err)
		}
	}
	if after, _ := other.MarshalBinary(); !slices.Equal(before, after) {
		t.Error("a refused state changed the world")
	}
	if after, _ := g.MarshalBinary(); !slices.Equal(gBefore, after) {
		t.Error("a refused state changed the world")
	}
}

// wallCells is 121 cells of wall, base64 as JSON writes bytes.
func wallCells() string {
	raw := make([]byte, 121)
	for i := range raw {
		raw[i] = forageWall
	}
	return base64.StdEncoding.EncodeToString(raw)
}

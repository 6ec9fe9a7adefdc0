package env

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-15*math.Max(1, math.Abs(b)) }

// TestCartPoleDynamics checks one Euler step against values worked out by
// hand. From rest, pushing right: temp = F/(mc+mp) = 100/11, the angular
// acceleration is -temp/(l(4/3 - mp/(mc+mp))) = -(100/11)/(41/66) = -600/41
// and the cart's is temp - mp*l*thetaAcc/(mc+mp) = 4400/451, so the
// velocities become tau times those. The other rows are the reference's
// equations evaluated in float64 outside Go.
func TestCartPoleDynamics(t *testing.T) {
	cases := []struct {
		name   string
		state  [4]float64
		action int
		want   [4]float64
	}{
		{"rest, push right", [4]float64{0, 0, 0, 0}, 1, [4]float64{0, 0.02 * 4400 / 451, 0, -0.02 * 600 / 41}},
		{"rest, push left", [4]float64{0, 0, 0, 0}, 0, [4]float64{0, -0.02 * 4400 / 451, 0, 0.02 * 600 / 41}},
		{"tilted right, push left", [4]float64{0.1, 0.2, 0.05, -0.3}, 0,
			[4]float64{0.10400000000000001, 0.004202345356037418, 0.044000000000000004, 0.008023313606151494}},
		{"tilted left, push right", [4]float64{-0.01, 0.4, -0.15, 0.5}, 1,
			[4]float64{-0.002, 0.5968828862935187, -0.13999999999999999, 0.1640570334913592}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := NewCartPole()
			obs := make([]float32, 4)
			cp.SetState(c.state, obs)
			r, term, trunc, err := cp.Step(c.action, obs)
			if err != nil || r != 1 || term || trunc {
				t.Fatalf("Step = %v, %v, %v, %v; want 1, false, false, nil", r, term, trunc, err)
			}
			got := cp.State()
			for i := range got {
				if !near(got[i], c.want[i]) {
					t.Errorf("state[%d] = %.17g, want %.17g", i, got[i], c.want[i])
				}
				if obs[i] != float32(got[i]) {
					t.Errorf("obs[%d] = %v, want the state's float32 %v", i, obs[i], float32(got[i]))
				}
			}
		})
	}
}

func TestCartPoleTermination(t *testing.T) {
	limit := 12 * 2 * math.Pi / 360
	cases := []struct {
		name  string
		state [4]float64
		term  bool
	}{
		{"pole falls right", [4]float64{0, 0, limit - 0.001, 1}, true},
		{"pole falls left", [4]float64{0, 0, -limit + 0.001, -1}, true},
		{"cart leaves right", [4]float64{2.39, 1, 0, 0}, true},
		{"cart leaves left", [4]float64{-2.39, -1, 0, 0}, true},
		{"pole at the limit stays", [4]float64{0, 0, limit - 0.001, 0}, false},
		{"cart at the limit stays", [4]float64{2.4, 0, 0, 0}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := NewCartPole()
			obs := make([]float32, 4)
			cp.SetState(c.state, obs)
			r, term, trunc, err := cp.Step(0, obs)
			if err != nil || term != c.term || trunc {
				t.Fatalf("Step = %v, %v, %v, %v; want terminated=%v", r, term, trunc, err, c.term)
			}
			if r != 1 {
				t.Errorf("reward %v, want 1 (the last step is rewarded too)", r)
			}
			if !term {
				return
			}
			if _, _, _, err := cp.Step(0, obs); !errors.Is(err, ErrEpisodeOver) {
				t.Errorf("step after termination: %v, want ErrEpisodeOver", err)
			}
		})
	}
}

// balance is a controller that keeps the pole up for 500 steps from the
// starts used below: push towards the side the pole is falling to.
func balance(s [4]float64) int {
	if s[2]+0.5*s[3]+0.01*s[0]+0.1*s[1] > 0 {
		return 1
	}
	return 0
}

func TestCartPoleTruncation(t *testing.T) {
	cp := NewCartPole()
	obs := make([]float32, 4)
	for seed := range uint64(5) {
		cp.Reset(seed, obs)
		for step := 1; ; step++ {
			r, term, trunc, err := cp.Step(balance(cp.State()), obs)
			if err != nil || r != 1 {
				t.Fatalf("seed %d step %d: reward %v, err %v", seed, step, r, err)
			}
			if term {
				t.Fatalf("seed %d: the controller dropped the pole at step %d", seed, step)
			}
			if trunc {
				if step != 500 {
					t.Fatalf("seed %d: truncated at step %d, want 500", seed, step)
				}
				break
			}
			if step > CartPoleMaxSteps {
				t.Fatalf("seed %d: no truncation after %d steps", seed, step)
			}
		}
		if _, _, _, err := cp.Step(0, obs); !errors.Is(err, ErrEpisodeOver) {
			t.Errorf("step after truncation: %v, want ErrEpisodeOver", err)
		}
	}
}

func TestCartPoleReset(t *testing.T) {
	cp := NewCartPole()
	obs := make([]float32, 4)
	if _, _, _, err := cp.Step(0, obs); !errors.Is(err, ErrNotReset) {
		t.Fatalf("step before reset: %v, want ErrNotReset", err)
	}
	seen := map[[4]float64]bool{}
	for seed := range uint64(200) {
		cp.Reset(seed, obs)
		s := cp.State()
		for i, v := range s {
			if v < -0.05 || v >= 0.05 {
				t.Fatalf("seed %d: state[%d] = %v, outside [-0.05, 0.05)", seed, i, v)
			}
		}
		seen[s] = true
		again := NewCartPole()
		again.Reset(seed, make([]float32, 4))
		if again.State() != s {
			t.Fatalf("seed %d: reset gives %v and then %v", seed, s, again.State())
		}
	}
	if len(seen) != 200 {
		t.Errorf("200 seeds gave %d distinct starts", len(seen))
	}
	if _, _, _, err := cp.Step(2, obs); err == nil {
		t.Error("action 2 accepted")
	}
}

func TestNew(t *testing.T) {
	f, err := New("CartPole-v1")
	if err != nil || f().Name() != CartPoleName {
		t.Fatalf("New(CartPole-v1) = %v", err)
	}
	if _, err := New("Pong"); err == nil {
		t.Error("unknown environment accepted")
	}
}

func TestVecDeterministic(t *testing.T) {
	run := func(seed uint64) ([]float32, []Episode) {
		v, err := NewVec(func() Env { return NewCartPole() }, 3, seed)
		if err != nil {
			t.Fatal(err)
		}
		var trace []float32
		var eps []Episode
		next := make([]float32, 3*4)
		out := make([]Transition, 3)
		actions := make([]int, 3)
		for step := range 300 {
			for i := range actions {
				actions[i] = (step*7 + i*3) % 5 % 2
			}
			if eps, err = v.Step(actions, next, out, eps); err != nil {
				t.Fatal(err)
			}
			trace = append(trace, next...)
			trace = append(trace, v.Obs()...)
		}
		return trace, eps
	}
	a, ea := run(1)
	b, eb := run(1)
	if !slices.Equal(a, b) || !slices.Equal(ea, eb) {
		t.Fatal("the same seed and actions gave different transitions")
	}
	c, _ := run(2)
	if slices.Equal(a, c) {
		t.Fatal("seeds 1 and 2 gave the same transitions")
	}
	if len(ea) == 0 {
		t.Fatal("no episode ended in 300 steps of a poor policy")
	}
}

func TestVecAutoReset(t *testing.T) {
	v, err := NewVec(func() Env { return NewCartPole() }, 2, 7)
	if err != nil {
		t.Fatal(err)
	}
	next := make([]float32, 8)
	out := make([]Transition, 2)
	var eps []Episode
	lengths := [2]int{}
	for step := 0; len(eps) < 4; step++ {
		if step > 1000 {
			t.Fatal("always pushing right ended fewer than 4 episodes in 1000 steps")
		}
		n := len(eps)
		if eps, err = v.Step([]int{1, 1}, next, out, eps); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			lengths[i]++
			o := next[i*4 : i*4+4]
			if out[i].Terminated {
				if math.Abs(float64(o[2])) <= 12*2*math.Pi/360 && math.Abs(float64(o[0])) <= 2.4 {
					t.Fatalf("instance %d terminated but its next observation %v is inside the limits", i, o)
				}
				for _, x := range v.Obs()[i*4 : i*4+4] {
					if x < -0.05 || x > 0.05 {
						t.Fatalf("instance %d was not reset: %v", i, v.Obs()[i*4:i*4+4])
					}
				}
				if got := eps[len(eps)-1]; len(eps) == n || got.Env != i && eps[n].Env != i {
					t.Fatalf("instance %d terminated but no episode was reported: %v", i, eps[n:])
				}
				lengths[i] = 0
			} else if !slices.Equal(o, v.Obs()[i*4:i*4+4]) {
				t.Fatalf("instance %d: live next observation %v differs from Obs %v", i, o, v.Obs()[i*4:i*4+4])
			}
		}
	}
	for _, e := range eps {
		if e.Return != float64(e.Length) || e.Length < 5 || e.Length > 50 {
			t.Errorf("episode %+v: return must equal length, and pushing right ends an episode in 5..50 steps", e)
		}
	}
	if _, err := v.Step([]int{1}, next, out, nil); err == nil {
		t.Error("one action for two instances accepted")
	}
	if _, err := NewVec(func() Env { return NewCartPole() }, 0, 1); err == nil {
		t.Error("empty vector accepted")
	}
}

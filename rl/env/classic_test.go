package env

import (
	"errors"
	"math"
	"testing"
)

// TestMountainCarDynamics checks one step against the reference's update
// evaluated in float64 outside Go: a push from the valley, a car rolling
// left, a coast, the left wall stopping a leftward car, and the speed
// limit.
func TestMountainCarDynamics(t *testing.T) {
	cases := []struct {
		name   string
		state  [2]float64
		action int
		want   [2]float64
	}{
		{"push right from rest", [2]float64{-0.5, 0}, 2, [2]float64{-0.49917684300416926, 0.0008231569958307428}},
		{"push left rolling left", [2]float64{-0.3, -0.02}, 0, [2]float64{-0.32255402492067664, -0.022554024920676662}},
		{"coast", [2]float64{0.2, 0.01}, 1, [2]float64{0.2079366609627258, 0.007936660962725805}},
		{"left wall", [2]float64{-1.19, -0.05}, 0, [2]float64{-1.2, 0}},
		{"speed limit", [2]float64{-0.6, 0.0699}, 2, [2]float64{-0.53, 0.07}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := NewMountainCar()
			obs := make([]float32, 2)
			m.SetState(c.state, obs)
			r, term, trunc, err := m.Step(c.action, obs)
			if err != nil || r != -1 || term || trunc {
				t.Fatalf("Step = %v, %v, %v, %v; want -1, false, false, nil", r, term, trunc, err)
			}
			got := m.State()
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

// TestMountainCarEpisode: the flag terminates (reward -1 still), the 200th
// step truncates, a step after either is refused, and the starts are at
// rest in [-0.6, -0.4) and the same for a seed.
func TestMountainCarEpisode(t *testing.T) {
	m := NewMountainCar()
	obs := make([]float32, 2)
	if _, _, _, err := m.Step(1, obs); !errors.Is(err, ErrNotReset) {
		t.Fatalf("step before reset: %v", err)
	}
	m.SetState([2]float64{0.49, 0.02}, obs)
	if r, term, trunc, err := m.Step(2, obs); err != nil || r != -1 || !term || trunc {
		t.Fatalf("reaching the flag: %v, %v, %v, %v; want -1, true, false, nil", r, term, trunc, err)
	}
	if _, _, _, err := m.Step(1, obs); !errors.Is(err, ErrEpisodeOver) {
		t.Fatalf("step after the flag: %v", err)
	}
	if _, _, _, err := m.Step(3, obs); err == nil {
		t.Fatal("action 3 accepted")
	}
	// At the valley's bottom, coasting, the car never leaves.
	m.SetState([2]float64{-math.Pi / 6, 0}, obs)
	for i := 1; i <= MountainCarMaxSteps; i++ {
		_, term, trunc, err := m.Step(1, obs)
		if err != nil || term || trunc != (i == MountainCarMaxSteps) {
			t.Fatalf("step %d: terminated %v, truncated %v, %v", i, term, trunc, err)
		}
	}
	a, b := NewMountainCar(), NewMountainCar()
	oa, ob := make([]float32, 2), make([]float32, 2)
	for seed := range uint64(200) {
		a.Reset(seed, oa)
		b.Reset(seed, ob)
		s := a.State()
		if s != b.State() || s[1] != 0 || s[0] < -0.6 || s[0] >= -0.4 {
			t.Fatalf("seed %d: start %v (again %v); want the same, at rest in [-0.6, -0.4)", seed, s, b.State())
		}
	}
}

// TestMountainCarPumpingReachesTheFlag: pushing the way the car moves
// pumps energy into its swing; from every start that reaches the flag well
// inside the time limit, as the task's physics promises.
func TestMountainCarPumpingReachesTheFlag(t *testing.T) {
	m := NewMountainCar()
	obs := make([]float32, 2)
	worst := 0
	for seed := range uint64(100) {
		m.Reset(seed, obs)
		for step := 1; ; step++ {
			action := 0
			if m.State()[1] >= 0 {
				action = 2
			}
			_, term, trunc, err := m.Step(action, obs)
			if err != nil || trunc {
				t.Fatalf("seed %d: not at the flag after %d steps (%v)", seed, step, err)
			}
			if term {
				worst = max(worst, step)
				break
			}
		}
	}
	t.Logf("every start reached the flag, the slowest in %d steps", worst)
}

// TestAcrobotDynamics checks the equations of motion and one Runge-Kutta
// step against the book's equations evaluated in float64 outside Go.
func TestAcrobotDynamics(t *testing.T) {
	cases := []struct {
		state  [4]float64
		torque float64
		deriv  [4]float64
		next   [4]float64
	}{
		{[4]float64{0.05, -0.03, 0.02, 0.01}, 1,
			[4]float64{0.02, 0.01, -1.0220322138930504, 2.152271173290957},
			[4]float64{0.03396426807716706, 0.014028356136744108, -0.175464650251537, 0.4197156022652691}},
		{[4]float64{1, 0.5, -0.3, 0.8}, -1,
			[4]float64{-0.3, 0.8, -4.406235295996595, 1.2255297328599406},
			[4]float64{0.8543267699666162, 0.6787419093920728, -1.1368267847625546, 0.9452219596451784}},
		{[4]float64{-2, 2.5, 3, -5}, 0,
			[4]float64{3, -5, 6.102735947240952, -8.180916600743329},
			[4]float64{-1.2631360921186183, 1.2828922360878483, 4.457532168883387, -7.481808966662252}},
	}
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-13*math.Max(1, math.Abs(b)) }
	for _, c := range cases {
		d := acrobotDeriv(c.state, c.torque)
		n := acrobotNext(c.state, c.torque)
		for i := range d {
			if !close(d[i], c.deriv[i]) {
				t.Errorf("%v, torque %v: derivative[%d] = %.17g, want %.17g", c.state, c.torque, i, d[i], c.deriv[i])
			}
			if !close(n[i], c.next[i]) {
				t.Errorf("%v, torque %v: next[%d] = %.17g, want %.17g", c.state, c.torque, i, n[i], c.next[i])
			}
		}
	}
}

// acrobotEnergy is the pendulum's kinetic plus potential energy, from the
// links' geometry directly (heights measured up from the pivot, theta from
// hanging down), not from the equations of motion.
func acrobotEnergy(s [4]float64) float64 {
	t1, t2, w1, w2 := s[0], s[1], s[2], s[3]
	kin := 0.5*(acM1*acLC1*acLC1+acI1)*w1*w1 +
		0.5*acM2*(acL1*acL1*w1*w1+acLC2*acLC2*(w1+w2)*(w1+w2)+2*acL1*acLC2*w1*(w1+w2)*math.Cos(t2)) +
		0.5*acI2*(w1+w2)*(w1+w2)
	pot := -acM1*acGravity*acLC1*math.Cos(t1) - acM2*acGravity*(acL1*math.Cos(t1)+acLC2*math.Cos(t1+t2))
	return kin + pot
}

// TestAcrobotConservesEnergy: with no torque the equations of motion keep
// the energy the geometry gives, up to the integrator's error; a wrong sign
// or factor in any term breaks this by orders of magnitude more.
func TestAcrobotConservesEnergy(t *testing.T) {
	for _, s := range [][4]float64{{0.3, -0.2, 0, 0}, {1.2, 0.8, -0.5, 0.4}, {2.5, -1, 0.2, -0.3}} {
		e0 := acrobotEnergy(s)
		// Without the wrap, so the energy's angles stay continuous; the
		// velocities stay far below their limits at these energies.
		deriv := func(y [4]float64) [4]float64 { return acrobotDeriv(y, 0) }
		y := s
		const h = 0.01
		for range 2000 {
			k1 := deriv(y)
			k2 := deriv(addScaled(y, k1, h/2))
			k3 := deriv(addScaled(y, k2, h/2))
			k4 := deriv(addScaled(y, k3, h))
			for i := range y {
				y[i] += h / 6 * (k1[i] + 2*k2[i] + 2*k3[i] + k4[i])
			}
		}
		if drift := math.Abs(acrobotEnergy(y) - e0); drift > 1e-6*math.Max(1, math.Abs(e0)) {
			t.Errorf("from %v: energy %.9g after 20 s, %.9g at the start", s, acrobotEnergy(y), e0)
		}
		// The environment's own 0.2 s step keeps it within a few per cent
		// over a few seconds.
		y = s
		for range 20 {
			y = acrobotNext(y, 0)
		}
		if drift := math.Abs(acrobotEnergy(y) - e0); drift > 0.05*math.Max(1, math.Abs(e0)) {
			t.Errorf("from %v: energy %.6g after 20 steps of 0.2 s, %.6g at the start", s, acrobotEnergy(y), e0)
		}
	}
}

func addScaled(y, k [4]float64, h float64) [4]float64 {
	for i := range y {
		y[i] += h * k[i]
	}
	return y
}

// TestAcrobotEpisode: the observation, the goal line, the limits on the
// angles and velocities, truncation at 500 steps and seeded starts.
func TestAcrobotEpisode(t *testing.T) {
	a := NewAcrobot()
	obs := make([]float32, 6)
	a.SetState([4]float64{0.3, -0.7, 1.5, -2}, obs)
	want := []float32{float32(math.Cos(0.3)), float32(math.Sin(0.3)), float32(math.Cos(-0.7)), float32(math.Sin(-0.7)), 1.5, -2}
	for i := range want {
		if obs[i] != want[i] {
			t.Fatalf("obs %v, want %v", obs, want)
		}
	}
	// Straight up is past the line; level with the pivot is not.
	if !acrobotReached([4]float64{math.Pi, 0, 0, 0}) || acrobotReached([4]float64{math.Pi / 2, 0, 0, 0}) ||
		acrobotReached([4]float64{0, 0, 0, 0}) {
		t.Fatal("the goal line is misplaced")
	}
	// Nearly straight up, still rising: the step crosses the line.
	a.SetState([4]float64{2.9, 0, 0.5, 0}, obs)
	if r, term, trunc, err := a.Step(1, obs); err != nil || r != 0 || !term || trunc {
		t.Fatalf("over the line: %v, %v, %v, %v; want 0, true, false, nil", r, term, trunc, err)
	}
	if _, _, _, err := a.Step(1, obs); !errors.Is(err, ErrEpisodeOver) {
		t.Fatalf("step after the goal: %v", err)
	}
	// Fast spins: angles wrap into [-pi, pi), velocities clip.
	n := acrobotNext([4]float64{3.1, -3.1, 30, -40}, 1)
	if n[0] < -math.Pi || n[0] >= math.Pi || n[1] < -math.Pi || n[1] >= math.Pi || n[2] != acMaxVel1 || math.Abs(n[3]) > acMaxVel2 {
		t.Fatalf("after a fast spin: %v", n)
	}
	if n := acrobotNext([4]float64{0, 0, 0, 60}, 2); n[3] != acMaxVel2 {
		t.Fatalf("the elbow at 60 rad/s: %v; want its velocity clipped to 9pi", n)
	}
	// Hanging at rest with no torque it stays down until truncated.
	a.SetState([4]float64{}, obs)
	for i := 1; i <= AcrobotMaxSteps; i++ {
		r, term, trunc, err := a.Step(1, obs)
		if err != nil || r != -1 || term || trunc != (i == AcrobotMaxSteps) {
			t.Fatalf("step %d: %v, %v, %v, %v", i, r, term, trunc, err)
		}
	}
	if s := a.State(); math.Abs(s[0])+math.Abs(s[1]) > 1e-12 {
		t.Fatalf("at rest, it moved to %v", s)
	}
	b := NewAcrobot()
	ob := make([]float32, 6)
	for seed := range uint64(200) {
		a.Reset(seed, obs)
		b.Reset(seed, ob)
		s := a.State()
		if s != b.State() {
			t.Fatalf("seed %d: two starts %v and %v", seed, s, b.State())
		}
		for _, v := range s {
			if v < -0.1 || v >= 0.1 {
				t.Fatalf("seed %d: start %v outside [-0.1, 0.1)", seed, s)
			}
		}
	}
	if _, _, _, err := a.Step(-1, obs); err == nil {
		t.Fatal("action -1 accepted")
	}
}

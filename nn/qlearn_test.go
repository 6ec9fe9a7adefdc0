package nn_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// qCase is one shape of the QOps test, its inputs and what it computes.
type qCase struct {
	rows, actions int
	x             []float32 // rows×actions
	v, diff       []float32 // rows
}

func newQCase(rows, actions int, seed uint64) qCase {
	rng := rand.New(rand.NewPCG(seed, 1))
	c := qCase{rows: rows, actions: actions, x: make([]float32, rows*actions), v: make([]float32, rows), diff: make([]float32, rows)}
	for i := range c.x {
		c.x[i] = float32(rng.NormFloat64() * 10)
	}
	for r := range rows {
		row := c.x[r*actions : (r+1)*actions]
		switch r % 5 {
		case 0: // a tie for the maximum: the first must win
			j, k := rng.IntN(actions), rng.IntN(actions)
			row[j] = 1e3
			row[k] = 1e3
		case 1: // nearly equal maxima: one ulp apart
			if actions > 1 {
				row[0] = 7
				row[actions-1] = math.Nextafter32(7, 8)
			}
		case 2: // +0 and -0 only
			for j := range row {
				row[j] = float32(math.Copysign(0, float64(j%2*2-1)))
			}
		}
		c.v[r] = float32(rng.NormFloat64())
		c.diff[r] = float32(rng.NormFloat64() * 3) // beyond Delta = 1 about two thirds of the time
	}
	c.diff[0], c.diff[1] = 1, -1 // the threshold itself
	return c
}

func refArgMax(row []float32) int {
	best := 0
	for j, v := range row {
		if v > row[best] {
			best = j
		}
	}
	return best
}

// qOut is everything one run of the ops produces.
type qOut struct {
	onehot, idx, gathered, scattered, grad, stats []float32
}

func TestQOps(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	s, err := dev.NewStream()
	must(t, err)
	defer s.Destroy()
	for _, shape := range [][2]int{{40, 1}, {40, 2}, {64, 3}, {33, 6}} {
		c := newQCase(shape[0], shape[1], uint64(shape[1]))
		var bufs []device.Buffer
		for _, n := range nn.QOpsSizes(c.rows, c.actions) {
			b, err := dev.Alloc(n)
			must(t, err)
			bufs = append(bufs, b)
		}
		q, err := nn.NewQOps(c.rows, c.actions, 1, bufs)
		must(t, err)
		must(t, q.Upload(dev))
		alloc := func(vals []float32) device.Buffer {
			b, err := dev.Alloc(len(vals))
			must(t, err)
			must(t, dev.Upload(b, vals))
			return b
		}
		ra := c.rows * c.actions
		x, v, diff := alloc(c.x), alloc(c.v), alloc(c.diff)
		onehot, idx, gathered := alloc(make([]float32, ra)), alloc(make([]float32, c.rows)), alloc(make([]float32, c.rows))
		scattered, grad, stats := alloc(make([]float32, ra)), alloc(make([]float32, c.rows)), alloc(make([]float32, device.StatsLen))
		// The gather reads x through the arg-max's one-hot rows; an
		// infinite value elsewhere in x must not leak into it.
		inf := slices.Clone(c.x)
		step := func(s device.Stream) error {
			for _, f := range []func() error{
				func() error { return s.Fill(stats, 0) },
				func() error { return q.ArgMaxOneHot(s, x, onehot) },
				func() error { return q.Index(s, onehot, idx) },
				func() error { return q.Gather(s, x, onehot, gathered) },
				func() error { return q.Scatter(s, v, onehot, scattered) },
				func() error { return q.Huber(s, diff, stats, grad, 0.5) },
			} {
				if err := f(); err != nil {
					return err
				}
			}
			return nil
		}
		read := func() qOut {
			o := qOut{make([]float32, ra), make([]float32, c.rows), make([]float32, c.rows), make([]float32, ra), make([]float32, c.rows), make([]float32, device.StatsLen)}
			for _, p := range []struct {
				dst []float32
				src device.Buffer
			}{{o.onehot, onehot}, {o.idx, idx}, {o.gathered, gathered}, {o.scattered, scattered}, {o.grad, grad}, {o.stats, stats}} {
				must(t, dev.Download(p.dst, p.src))
			}
			return o
		}
		must(t, step(s))
		must(t, s.Synchronize())
		eager := read()
		checkQ(t, c, eager)

		// The same ops captured and replayed give the same bits.
		for _, b := range []device.Buffer{onehot, idx, gathered, scattered, grad} {
			must(t, dev.Upload(b, make([]float32, b.Len())))
		}
		must(t, s.BeginCapture(device.CaptureGlobal))
		stepErr := step(s)
		g, err := s.EndCapture()
		must(t, stepErr)
		must(t, err)
		exec, err := dev.Instantiate(g)
		must(t, err)
		must(t, s.Launch(exec))
		must(t, s.Synchronize())
		replayed := read()
		if !equalBits(eager, replayed) {
			t.Errorf("%dx%d: the replayed ops differ from the eager ones:\neager %+v\nreplay %+v", c.rows, c.actions, eager, replayed)
		}
		must(t, exec.Destroy())
		must(t, g.Destroy())

		// Infinite values in the columns not chosen leave the gather exact.
		for r := range c.rows {
			for j := range c.actions {
				if eager.onehot[r*c.actions+j] == 0 {
					inf[r*c.actions+j] = float32(math.Inf(1 - 2*(j%2)))
				}
			}
		}
		must(t, dev.Upload(x, inf))
		must(t, q.Gather(s, x, onehot, gathered))
		got := make([]float32, c.rows)
		must(t, dev.Download(got, gathered))
		if !slices.Equal(got, eager.gathered) {
			t.Errorf("%dx%d: infinities in unchosen columns changed the gather: %v, want %v", c.rows, c.actions, got, eager.gathered)
		}
	}
}

func equalBits(a, b qOut) bool {
	eq := func(x, y []float32) bool {
		return slices.EqualFunc(x, y, func(p, q float32) bool { return math.Float32bits(p) == math.Float32bits(q) })
	}
	return eq(a.onehot, b.onehot) && eq(a.idx, b.idx) && eq(a.gathered, b.gathered) && eq(a.scattered, b.scattered) && eq(a.grad, b.grad) && eq(a.stats, b.stats)
}

func checkQ(t *testing.T, c qCase, o qOut) {
	t.Helper()
	a := c.actions
	var loss float64
	for r := range c.rows {
		best := refArgMax(c.x[r*a : (r+1)*a])
		for j := range a {
			want := float32(0)
			if j == best {
				want = 1
			}
			if o.onehot[r*a+j] != want {
				t.Fatalf("%dx%d row %d %v: one-hot %v, want the one at %d", c.rows, a, r, c.x[r*a:(r+1)*a], o.onehot[r*a:(r+1)*a], best)
			}
			wantS := float32(0)
			if j == best {
				wantS = c.v[r]
			}
			if o.scattered[r*a+j] != wantS {
				t.Fatalf("%dx%d row %d: scatter %v, want %v at %d", c.rows, a, r, o.scattered[r*a:(r+1)*a], c.v[r], best)
			}
		}
		if o.idx[r] != float32(best) {
			t.Fatalf("%dx%d row %d: index %v, want %d", c.rows, a, r, o.idx[r], best)
		}
		if math.Float32bits(o.gathered[r]) != math.Float32bits(c.x[r*a+best]) && o.gathered[r] != c.x[r*a+best] {
			t.Fatalf("%dx%d row %d: gathered %v, want %v", c.rows, a, r, o.gathered[r], c.x[r*a+best])
		}
		d := c.diff[r]
		clip := max(-1, min(1, d))
		if o.grad[r] != clip*0.5 {
			t.Fatalf("%dx%d row %d: Huber gradient of %v is %v, want %v", c.rows, a, r, d, o.grad[r], clip*0.5)
		}
		if ad := math.Abs(float64(d)); ad <= 1 {
			loss += 0.5 * ad * ad
		} else {
			loss += ad - 0.5
		}
	}
	if math.Abs(float64(o.stats[device.StatLossSum])-loss) > 1e-5*loss || o.stats[device.StatCount] != float32(c.rows) {
		t.Fatalf("%dx%d: Huber stats %v, want loss sum %v over %d rows", c.rows, a, o.stats, loss, c.rows)
	}
}

func TestQOpsErrors(t *testing.T) {
	if _, err := nn.NewQOps(0, 2, 1, nil); err == nil {
		t.Error("0 rows accepted")
	}
	if _, err := nn.NewQOps(4, 2, 0, nil); err == nil {
		t.Error("Huber threshold 0 accepted")
	}
	if _, err := nn.NewQOps(4, 2, 1, nil); err == nil {
		t.Error("missing buffers accepted")
	}
}

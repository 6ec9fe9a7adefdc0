package cpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
)

// TestKernelsSameBitsAtAnyThreadCount: every kernel but GEMM splits its
// work so that no element's result depends on the split, and the gradient
// norm sums fixed chunks; so one thread and several give the same bits.
// The sizes are large enough to be split and not multiples of the parts'
// alignment.
func TestKernelsSameBitsAtAnyThreadCount(t *testing.T) {
	const rows, cols, n = 301, 257, 100_003
	rng := rand.New(rand.NewPCG(9, 9))
	rnd := func(k int, scale float32) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = scale * (2*rng.Float32() - 1)
		}
		return v
	}
	z, bias, dy := rnd(rows*cols, 4), rnd(cols, 1), rnd(rows*cols, 1)
	p, g, m, v := rnd(n, 1), rnd(n, 1), rnd(n, 0.1), rnd(n, 0.01)
	for i := range v {
		v[i] = float32(math.Abs(float64(v[i])))
	}
	hyper := []float32{1e-3, 0.1, 0.001, 0}
	// The loss's labels and weights: some rows padding, some half counted.
	labels, mask := make([]float32, rows), make([]float32, rows)
	for r := range rows {
		labels[r] = float32(rng.IntN(cols))
		mask[r] = float32(r%3) / 2
	}

	run := func(threads int) [][]float32 {
		d := openWith(t, cpu.Config{Threads: threads})
		s, err := d.NewStream()
		must(t, err)
		defer s.Destroy()
		up := func(x []float32) device.Buffer {
			b, err := d.Alloc(len(x))
			must(t, err)
			must(t, d.Upload(b, x))
			return b
		}
		zb, bb, yb, dyb := up(z), up(bias), up(make([]float32, rows*cols)), up(dy)
		csum, pb, gb, mb, vb, hb, norm := up(make([]float32, cols)), up(p), up(g), up(m), up(v), up(hyper), up([]float32{0})
		vel, p2, g2 := up(m), up(p), up(g)
		lb, mkb, probs, stats, dlog := up(labels), up(mask), up(make([]float32, rows*cols)), up(make([]float32, device.StatsLen)), up(make([]float32, rows*cols))
		must(t, s.SoftmaxXent(rows, cols, zb, lb, mkb, probs, stats))
		must(t, s.SoftmaxXentGrad(rows, cols, probs, lb, mkb, dlog))
		must(t, s.BiasAct(device.ActGELU, rows, cols, zb, bb, yb))
		must(t, s.ActGrad(device.ActGELU, rows, cols, zb, dyb, dyb))
		must(t, s.ColSum(rows, cols, dyb, 0.5, csum))
		must(t, s.ClipGlobalNorm(gb, 1, norm))
		must(t, s.AdamW(pb, gb, mb, vb, hb, 0.9, 0.999, 1e-8, 1e-4))
		must(t, s.Axpy(-0.5, gb, p2))
		must(t, s.Scale(p2, 0.75))
		must(t, s.SGDMomentum(p2, g2, vel, hb, 0.9, 1e-4, true))
		must(t, s.Synchronize())
		var out [][]float32
		for _, b := range []device.Buffer{zb, yb, dyb, csum, gb, norm, pb, mb, vb, p2, vel, probs, stats, dlog} {
			h := make([]float32, b.Len())
			must(t, d.Download(h, b))
			out = append(out, h)
		}
		return out
	}
	names := []string{"z", "y", "dz", "colsum", "clipped g", "norm", "p", "m", "v", "p (sgd)", "vel", "probs", "loss stats", "dlogits"}
	one := run(1)
	for _, threads := range []int{2, 3} {
		got := run(threads)
		for i := range one {
			for j := range one[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(one[i][j]) {
					t.Fatalf("%d threads: %s[%d] = %g, one thread gives %g", threads, names[i], j, got[i][j], one[i][j])
				}
			}
		}
	}
}

//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// A small output over a long k goes to tl_gemm_klanes (useKLanes), split
// into parts over the stream's scratch (klanesParts: 17 for the first shape;
// the last is a transformer's weight gradient, batch 16 × context 64):
// on the device it matches the float64 sum for every transposition, a
// second launch gives the same bits, and so does a replay of its capture.
func TestGemmKLanes(t *testing.T) {
	d := openTest(t)
	s := mustStream(t, d)
	rng := rand.New(rand.NewPCG(7, 11))
	for _, sh := range []struct{ m, n, k int }{{9, 32, 4100}, {288, 64, 2050}, {3, 70, 6000}, {64, 64, 1024}} {
		if !useKLanes(sh.m, sh.n, sh.k) || klanesParts(sh.m, sh.n, sh.k) < 2 {
			t.Fatalf("%+v does not go to tl_gemm_klanes in parts", sh)
		}
		for _, tA := range []bool{false, true} {
			for _, tB := range []bool{false, true} {
				a, b, c0 := randFloats(rng, sh.m*sh.k, -1, 1), randFloats(rng, sh.k*sh.n, -1, 1), randFloats(rng, sh.m*sh.n, -1, 1)
				const alpha, beta = float32(0.5), float32(-1.5)
				ab, bb := mustUpload(t, d, a), mustUpload(t, d, b)
				run := func() []float32 {
					cb := mustUpload(t, d, c0)
					check(t, "Gemm", s.Gemm(tA, tB, sh.m, sh.n, sh.k, alpha, ab, bb, beta, cb))
					out := make([]float32, len(c0))
					check(t, "Download", d.Download(out, cb))
					check(t, "Free", d.Free(cb))
					return out
				}
				got, again := run(), run()
				// Captured and replayed: the same bits as eager.
				cb := mustUpload(t, d, c0)
				check(t, "BeginCapture", s.BeginCapture(device.CaptureGlobal))
				check(t, "Gemm in a capture", s.Gemm(tA, tB, sh.m, sh.n, sh.k, alpha, ab, bb, beta, cb))
				g, err := s.EndCapture()
				check(t, "EndCapture", err)
				ex, err := d.Instantiate(g)
				check(t, "Instantiate", err)
				check(t, "Launch", s.Launch(ex))
				replayed := make([]float32, len(c0))
				check(t, "Download", d.Download(replayed, cb))
				for e := range replayed {
					if math.Float32bits(replayed[e]) != math.Float32bits(got[e]) {
						t.Fatalf("%+v transA=%v transB=%v: element %d replayed %g, eager %g", sh, tA, tB, e, replayed[e], got[e])
					}
				}
				check(t, "Exec.Destroy", ex.Destroy())
				check(t, "Graph.Destroy", g.Destroy())
				check(t, "Free", d.Free(cb))
				for i := range sh.m {
					for j := range sh.n {
						sum := 0.0
						for l := range sh.k {
							av := a[i*sh.k+l]
							if tA {
								av = a[l*sh.m+i]
							}
							bv := b[l*sh.n+j]
							if tB {
								bv = b[j*sh.k+l]
							}
							sum += float64(av) * float64(bv)
						}
						want := float64(alpha)*sum + float64(beta)*float64(c0[i*sh.n+j])
						g := got[i*sh.n+j]
						if math.Abs(float64(g)-want) > 1e-6*math.Max(1, math.Abs(want)) {
							t.Fatalf("%+v transA=%v transB=%v: C[%d,%d] = %g, want %g", sh, tA, tB, i, j, g, want)
						}
						if math.Float32bits(g) != math.Float32bits(again[i*sh.n+j]) {
							t.Fatalf("%+v transA=%v transB=%v: C[%d,%d] is %g, then %g on a second launch", sh, tA, tB, i, j, g, again[i*sh.n+j])
						}
					}
				}
				check(t, "Free", d.Free(ab))
				check(t, "Free", d.Free(bb))
			}
		}
	}
}

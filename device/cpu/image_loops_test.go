package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// TestImageLoopsMatchGo: the AVX-512 loops of image_amd64.s give the bits
// of the plain Go loops they replace (written out here as the contract
// states them), on values with NaNs, zeros of both signs and a large mean,
// and on widths with a tail of columns that are not a multiple of 16.
func TestImageLoopsMatchGo(t *testing.T) {
	if !haveImageKernel() {
		t.Skip("no AVX-512: the Go loops run")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	special := []float32{float32(math.NaN()), 0, float32(math.Copysign(0, -1)), 1e-40}
	data := func(n int, mean float32, nan bool) []float32 {
		v := randSlice(rng, n)
		for i := range v {
			v[i] += mean
			if nan && i%37 == 5 {
				v[i] = special[i%len(special)]
			}
		}
		return v
	}
	t.Run("maxpool", func(t *testing.T) {
		for _, s := range []device.PoolShape{{N: 2, H: 7, W: 6, C: 32, K: 3, Stride: 2, Pad: 1}, {N: 3, H: 4, W: 4, C: 16, K: 2, Stride: 2}} {
			g := poolWindow(s)
			x := data(s.InLen(), 0, true)
			for i := range x {
				if i%11 == 3 {
					x[i] = x[i-1] // ties: the first keeps its place
				}
			}
			y, arg := make([]float32, s.OutLen()), make([]float32, s.OutLen())
			maxPool(&g, x, y, arg, 0, g.outPixels)
			g.eachOutPixel(0, g.outPixels, func(p, n, oh, ow int) {
				y0, x0, kh0, kh1, kw0, kw1 := g.span(oh, ow)
				for c := range s.C {
					best, pos := float32(0), -1
					for kh := kh0; kh < kh1; kh++ {
						for kw := kw0; kw < kw1; kw++ {
							v := x[g.pixel(n, y0+kh, x0+kw)+c]
							nan := func(f float32) bool { return f != f }
							if pos < 0 || v > best || nan(v) && !nan(best) {
								best, pos = v, kh*g.kw+kw
							}
						}
					}
					i := p*s.C + c
					if math.Float32bits(y[i]) != math.Float32bits(best) || arg[i] != float32(pos) {
						t.Fatalf("%+v: pixel %d channel %d: %v at %v, want %v at %d", s, p, c, y[i], arg[i], best, pos)
					}
				}
			})
		}
	})
	for _, cols := range []int{16, 32, 48, 40} {
		rows := 67
		n := rows * cols
		t.Run("batchnorm", func(t *testing.T) {
			x := data(n, 100, false)
			params, running := data(2*cols, 1, false), data(2*cols, 1, false)
			for j := range cols {
				running[cols+j] = 1 + float32(j)
			}
			stats, xhat, y := make([]float32, 2*cols), make([]float32, n), make([]float32, n)
			r0 := append([]float32(nil), running...)
			bnStats(rows, cols, 0, cols, 1e-5, 0.1, x, stats, running)
			bnNormalize(cols, 0, rows, x, params, stats, xhat, y)
			wantStats, wantXhat, wantY := make([]float32, 2*cols), make([]float32, n), make([]float32, n)
			for j := range cols {
				var s, q float64
				for r := range rows {
					s += float64(x[r*cols+j])
				}
				s /= float64(rows)
				for r := range rows {
					d := float64(x[r*cols+j]) - s
					q += d * d
				}
				wantStats[j], wantStats[cols+j] = float32(s), float32(1/math.Sqrt(q/float64(rows)+float64(float32(1e-5))))
				m := float64(float32(0.1))
				if got, want := running[j], float32((1-m)*float64(r0[j])+m*s); got != want {
					t.Fatalf("cols %d: running mean %d: %v, want %v", cols, j, got, want)
				}
			}
			for i := range x {
				j := i % cols
				h := float32((x[i] - wantStats[j]) * wantStats[cols+j])
				wantXhat[i], wantY[i] = h, float32(params[j]*h)+params[cols+j]
			}
			sameBits(t, "stats", stats, wantStats)
			sameBits(t, "xhat", xhat, wantXhat)
			sameBits(t, "y", y, wantY)

			dy := data(n, 0, true)
			dparams, kab, dx := make([]float32, 2*cols), make([]float32, 3*cols), make([]float32, n)
			bnGradSums(rows, cols, 0, cols, dy, xhat, params, stats, dparams, kab)
			bnGradInput(cols, 0, rows, dy, xhat, kab, dx)
			wantDp, wantDx := make([]float32, 2*cols), make([]float32, n)
			for j := range cols {
				var g, b float64
				for r := range rows {
					d := float64(dy[r*cols+j])
					b += d
					g += d * float64(xhat[r*cols+j])
				}
				wantDp[j], wantDp[cols+j] = float32(g), float32(b)
			}
			for i := range dy {
				j := i % cols
				k := float32(float64(params[j]) * float64(stats[cols+j]))
				a := float32(float64(wantDp[cols+j]) / float64(rows))
				b := float32(float64(wantDp[j]) / float64(rows))
				wantDx[i] = k * ((dy[i] - a) - float32(xhat[i]*b))
			}
			sameBits(t, "dparams", dparams, wantDp)
			sameBits(t, "dx", dx, wantDx)
		})
		t.Run("relu", func(t *testing.T) {
			z, bias, dy := data(n, 0, true), data(cols, 0, true), data(n, 0, true)
			for _, act := range []device.Activation{device.ActNone, device.ActReLU} {
				zz, y := append([]float32(nil), z...), make([]float32, n)
				biasAct(act, rows, cols, zz, bias, y)
				wantZ, wantY := make([]float32, n), make([]float32, n)
				for i, v := range z {
					v += bias[i%cols]
					wantZ[i], wantY[i] = v, v
					if act == device.ActReLU {
						wantY[i] = max(v, 0)
					}
				}
				sameBits(t, "z", zz, wantZ)
				sameBits(t, "y", y, wantY)
			}
			dz := make([]float32, n-3) // a tail after the 16-lane blocks
			actGrad(device.ActReLU, 1, n-3, z, dy, dz)
			for i, v := range z[:n-3] {
				want := float32(0)
				if v > 0 {
					want = dy[i]
				}
				if math.Float32bits(dz[i]) != math.Float32bits(want) {
					t.Fatalf("cols %d: relu gradient %d: %v, want %v", cols, i, dz[i], want)
				}
			}
			acc, want := append([]float32(nil), dy[:n-5]...), make([]float32, n-5)
			addRun(acc, z)
			for i := range want {
				want[i] = dy[i] + z[i]
			}
			sameBits(t, "addRun", acc, want)
			axpy(0.3, z, acc)
			for i := range want {
				want[i] += float32(0.3 * z[i])
			}
			sameBits(t, "axpy", acc, want)
			sums := make([]float32, cols)
			colSum(rows, cols, 0, cols, z, 0, sums)
			for j := range cols {
				var s float64
				for r := range rows {
					s += float64(z[r*cols+j])
				}
				if math.Float32bits(sums[j]) != math.Float32bits(float32(s)) {
					t.Fatalf("cols %d: column sum %d: %v, want %v", cols, j, sums[j], float32(s))
				}
			}
		})
	}
}

package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// These cover what the image kernels' contract leaves to the backend.

// TestMaxPoolNaNWins: a NaN in a window is its maximum, the first NaN in
// (kh, kw) order, so that a NaN reaches the loss; a window without one
// keeps the first of equal maxima, -0 before +0 included.
func TestMaxPoolNaNWins(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	s := device.PoolShape{N: 1, H: 2, W: 2, C: 3, K: 2, Stride: 2}
	g := poolWindow(s)
	// Channel 0: a NaN after a larger number, then a second NaN; channel
	// 1: a NaN first; channel 2: -0 then +0.
	x := []float32{
		1, nan, negZero,
		nan, 0, 0,
		nan, 5, 0,
		2, 6, 0,
	}
	y, arg := make([]float32, 3), make([]float32, 3)
	maxPool(&g, x, y, arg, 0, 1)
	if !math.IsNaN(float64(y[0])) || arg[0] != 1 {
		t.Errorf("channel 0: y = %g at %g, want NaN at 1", y[0], arg[0])
	}
	if !math.IsNaN(float64(y[1])) || arg[1] != 0 {
		t.Errorf("channel 1: y = %g at %g, want NaN at 0", y[1], arg[1])
	}
	if !math.Signbit(float64(y[2])) || arg[2] != 0 {
		t.Errorf("channel 2: y = %g at %g, want -0 at 0", y[2], arg[2])
	}
}

// TestMaxPoolGradIgnoresForeignArgs: an arg MaxPool could not have written
// (negative, past the window, NaN, or in the padding) adds nothing, rather
// than write outside the image.
func TestMaxPoolGradIgnoresForeignArgs(t *testing.T) {
	s := device.PoolShape{N: 1, H: 3, W: 3, C: 1, K: 3, Stride: 2, Pad: 1}
	g := poolWindow(s) // 2×2 windows; the first's row 0 and column 0 are padding
	dy := []float32{1, 2, 3, 4}
	arg := []float32{0, 9, -1, float32(math.NaN())}
	dx := make([]float32, s.InLen())
	maxPoolGrad(&g, dy, arg, dx, windowPositions(s.K), 0, g.inRows)
	for i, v := range dx {
		if v != 0 {
			t.Errorf("dx[%d] = %g, want 0", i, v)
		}
	}
}

// TestMaxPoolGradTiledMatchesWindows: where the windows tile the image,
// the tiled gradient (in Go, and in AVX-512 where the machine has it)
// gives the general loop's bits, for args MaxPool writes and for args it
// could not (negative, -0, fractions, past the window, NaN, huge) and dy
// with zeros of both signs and NaNs, whatever the split of the rows.
func TestMaxPoolGradTiledMatchesWindows(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	foreign := []float32{-1, -0.5, negZero, 0.5, 1.5, 3.99, 4, 9, nan, 1e30, -1e30}
	for _, s := range []device.PoolShape{
		{N: 2, H: 6, W: 4, C: 32, K: 2, Stride: 2},
		{N: 1, H: 6, W: 9, C: 16, K: 3, Stride: 3},
		{N: 2, H: 4, W: 4, C: 5, K: 2, Stride: 2},
	} {
		g := poolWindow(s)
		if !g.tiles() {
			t.Fatalf("%+v: the windows should tile the image", s)
		}
		dy, arg := make([]float32, s.OutLen()), make([]float32, s.OutLen())
		for i := range dy {
			dy[i] = float32(i%13) - 6.5
			arg[i] = float32(i % (s.K * s.K))
			switch {
			case i%7 == 3:
				arg[i] = foreign[i%len(foreign)]
			case i%11 == 5:
				dy[i] = []float32{negZero, nan, 0}[i%3]
			}
		}
		want := make([]float32, s.InLen())
		maxPoolGradWindows(&g, dy, arg, want, windowPositions(s.K), 0, g.inRows)
		wides := []bool{false}
		if haveImageKernel() && s.C%16 == 0 {
			wides = append(wides, true)
		}
		for _, wide := range wides {
			for _, parts := range []int{1, 3} {
				got := make([]float32, s.InLen())
				for i := range got {
					got[i] = 7 // garbage that every element must overwrite
				}
				for p := range parts {
					lo, hi := span(p, parts, g.inRows, 1)
					maxPoolGradTiled(&g, dy, arg, got, lo, hi, wide)
				}
				sameBits(t, fmt.Sprintf("%+v wide %v parts %d: dx", s, wide, parts), got, want)
			}
		}
	}
}

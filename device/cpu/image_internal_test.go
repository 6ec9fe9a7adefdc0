package cpu

import (
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

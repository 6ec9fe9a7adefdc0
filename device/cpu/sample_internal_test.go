package cpu

import (
	"math"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// TestSampleLastAgainstTheCDF: the draw is the interval of the CDF (in
// float64) that holds the uniform, for a fixed uniform: seed 0 at offset 0
// gives w0 = 0x6627e8d5 (Random123's known answer), u = 0.3990...
func TestSampleLastAgainstTheCDF(t *testing.T) {
	rng := make([]float32, device.RNGLen) // seed 0, offset 0
	u := float64(0x6627e8d5) * 0x1p-32
	logp := func(p ...float64) []float32 {
		out := make([]float32, len(p))
		for i, v := range p {
			out[i] = float32(math.Log(v))
		}
		return out
	}
	cases := []struct {
		name        string
		logits      []float32
		temperature float32
		want        int
	}{
		{"u in the third interval", logp(0.1, 0.2, 0.3, 0.4), 1, 2},
		{"u in the first interval", logp(0.5, 0.25, 0.25), 1, 0},
		{"u in the last interval", logp(0.1, 0.1, 0.1, 0.7), 1, 3},
		{"greedy takes the first largest", []float32{1, 3, 3, 2}, 0, 1},
		{"a cold temperature is near argmax", []float32{1, 3, 2.9, 2}, 0.01, 1},
		{"shifted logits give the same draw", []float32{1000, 1000 + float32(math.Log(2)), 1000 + float32(math.Log(3)), 1000 + float32(math.Log(4))}, 1, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := sampleLast(c.temperature, c.logits, rng); got != c.want {
				t.Errorf("sampleLast = %d, want %d (u = %.6f)", got, c.want, u)
			}
			if c.temperature > 0 {
				if ref := cdfDraw(c.logits, float64(c.temperature), u); ref != c.want {
					t.Errorf("the float64 reference draws %d, want %d", ref, c.want)
				}
			}
		})
	}
}

// cdfDraw is the reference: softmax in float64, the first id whose
// cumulative probability exceeds u.
func cdfDraw(logits []float32, t, u float64) int {
	top := math.Inf(-1)
	for _, l := range logits {
		top = math.Max(top, float64(l))
	}
	p := make([]float64, len(logits))
	sum := 0.0
	for i, l := range logits {
		p[i] = math.Exp((float64(l) - top) / t)
		sum += p[i]
	}
	c := 0.0
	for i := range p {
		if c += p[i] / sum; c > u {
			return i
		}
	}
	return len(p) - 1
}

// TestSampleLastFollowsTheOffset: each offset's draw matches the
// reference on its own uniform, and many offsets reach every id.
func TestSampleLastFollowsTheOffset(t *testing.T) {
	logits := []float32{0.5, -1, 2, 0, 1, -0.25, 0.75, 1.5}
	rng := make([]float32, device.RNGLen)
	rng[device.RNGSeedLo] = math.Float32frombits(12345)
	seen := map[int]bool{}
	for off := range 400 {
		k0, k1, offset := rngState(rng)
		w0, _, _, _ := philox4x32(uint32(offset), uint32(offset>>32), 0, 0, k0, k1)
		want := cdfDraw(logits, 0.8, float64(w0)*0x1p-32)
		if got := sampleLast(0.8, logits, rng); got != want {
			t.Fatalf("offset %d: sampleLast = %d, the reference %d", off, got, want)
		}
		seen[want] = true
		advanceRNG(rng, 1)
	}
	if len(seen) != len(logits) {
		t.Errorf("400 draws reached %d of %d ids", len(seen), len(logits))
	}
}

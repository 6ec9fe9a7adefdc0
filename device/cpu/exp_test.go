package cpu

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestExp64 checks exp64 against e^x computed in 200-bit arithmetic:
// below one ulp (the result is one of the two float64 values around e^x)
// over its own range, and math.Exp's outside it.
func TestExp64(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	xs := []float64{0, math.Copysign(0, -1), expLow, expHigh, -707.3499440000223, 1e-20, -1e-20, 0.5, -0.5, 1, -1}
	for range 5_000 {
		xs = append(xs, expLow+rng.Float64()*(expHigh-expLow), -rng.Float64()*30)
	}
	worst := 0.0
	for _, x := range xs {
		got := exp64(x)
		exact, _ := bigExp(x).Float64()
		if got == exact {
			continue
		}
		// In ulps of got, in big arithmetic: near the smallest normals
		// the error itself is below float64's range.
		ulp := new(big.Float).SetFloat64(math.Abs(math.Nextafter(got, exact) - got))
		off := new(big.Float).Sub(bigExp(x), big.NewFloat(got))
		ulps, _ := off.Quo(off.Abs(off), ulp).Float64()
		worst = max(worst, ulps)
		if ulps >= 1 {
			t.Fatalf("exp64(%v) = %v, e^x = %v: %.3g ulps off", x, got, exact, ulps)
		}
	}
	t.Logf("worst error %.3f ulps over %d arguments", worst, len(xs))
	for _, x := range []float64{-708.0001, 709.0001, -745.2, -800, 710, math.Inf(1), math.Inf(-1)} {
		if got, want := exp64(x), math.Exp(x); got != want {
			t.Errorf("exp64(%v) = %v, want math.Exp's %v", x, got, want)
		}
	}
	if !math.IsNaN(exp64(math.NaN())) {
		t.Errorf("exp64(NaN) = %v", exp64(math.NaN()))
	}
}

// bigExp is e^x to about 200 bits: x = k·ln2 + r, e^r by its series.
func bigExp(x float64) *big.Float {
	const prec = 240
	ln2, _ := new(big.Float).SetPrec(prec).SetString("0.693147180559945309417232121458176568075500134360255254120680009493393621969694715605863326996418687542001481021")
	k := math.Round(x / math.Ln2)
	r := new(big.Float).SetPrec(prec).SetFloat64(x)
	r.Sub(r, new(big.Float).SetPrec(prec).Mul(ln2, new(big.Float).SetFloat64(k)))
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	for n := int64(1); n < 80; n++ {
		term.Mul(term, r)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64(n))
		sum.Add(sum, term)
	}
	return sum.SetMantExp(sum, int(k))
}

// TestExpShiftedVectorMatchesScalar: expShifted8 gives exp64's bits on
// every lane, including groups that hold an argument outside exp64's own
// range (left to the scalar code), a NaN, infinities and lengths that are
// not a multiple of 8.
func TestExpShiftedVectorMatchesScalar(t *testing.T) {
	if !haveExpKernel() {
		t.Skip("no AVX-512: expShifted runs the scalar code")
	}
	rng := rand.New(rand.NewPCG(12, 12))
	var x []float32
	for v := float32(-800); v < 30; v += 0.0173 {
		x = append(x, v)
	}
	for range 50_000 {
		x = append(x, float32(rng.NormFloat64()*8))
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	x = append(x, nan, 3, inf, -inf, 0, -1e-30, 1e-30, float32(math.Copysign(0, -1)), 2, 1, 0.5)
	cases := []struct{ top, scale, off float64 }{{0, 1, 0}, {12.5, 1, 0}, {3, 0.25, 0}, {7, 1, 1.75}, {-2, 0.125, -0.5}}
	for _, c := range cases {
		for _, n := range []int{len(x), len(x) - 3, 7, 8, 17} {
			got := make([]float64, n)
			expShifted(x[:n], c.top, c.scale, c.off, got)
			for j, v := range x[:n] {
				want := exp64(float64(c.scale*(float64(v)-c.top)) - c.off)
				if math.Float64bits(got[j]) != math.Float64bits(want) && !(math.IsNaN(got[j]) && math.IsNaN(want)) {
					t.Fatalf("top %v scale %v off %v: x[%d] = %v: %v (%#x), exp64 gives %v (%#x)", c.top, c.scale, c.off, j, v,
						got[j], math.Float64bits(got[j]), want, math.Float64bits(want))
				}
			}
		}
	}
}

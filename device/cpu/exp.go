package cpu

import "math"

// exp64 is e^x in float64, below one ulp of error: x = k·ln2 + r with
// |r| <= ln2/2 (k rounded half away from zero, ln2 split in two so that
// k·ln2hi is exact), e^r from a rational function of r built on a degree-5
// polynomial in r², times 2^k built from its bits. Every operation is a
// single rounded float64 operation in a fixed order (the conversions of
// products keep a compiler from fusing them into the next sum), so expShifted8
// (exp_amd64.s) gives the same bits eight lanes at a time. Outside
// [-708, 709], where 2^k or the result is not a normal number, and for
// NaN, it is math.Exp's.
func exp64(x float64) float64 {
	const (
		log2e = 1.44269504088896338700e+00
		ln2hi = 6.93147180369123816490e-01
		ln2lo = 1.90821492927058770002e-10
		p1    = 1.66666666666666657415e-01
		p2    = -2.77777777770155933842e-03
		p3    = 6.61375632143793436117e-05
		p4    = -1.65339022054652515390e-06
		p5    = 4.13813679705723846039e-08
	)
	if !(x >= expLow && x <= expHigh) {
		return math.Exp(x)
	}
	t := float64(log2e * x)
	if x < 0 {
		t += -0.5
	} else {
		t += 0.5
	}
	k := int32(t)
	kf := float64(k)
	hi := x - float64(kf*ln2hi)
	lo := kf * ln2lo
	r := hi - lo
	rr := r * r
	q := float64(rr * p5)
	q = float64(rr * (q + p4))
	q = float64(rr * (q + p3))
	q = float64(rr * (q + p2))
	q = float64(rr * (q + p1))
	c := r - q
	rc := float64(r * c)
	y := 1 - ((lo - rc/(2-c)) - hi)
	return y * math.Float64frombits(uint64(int64(k)+1023)<<52)
}

// The arguments exp64 computes itself, its results normal numbers.
const (
	expLow  = -708
	expHigh = 709
)

// expShifted writes out[j] = exp64(scale·(float64(x[j]) - top) - off), the
// argument in float64, each operation rounded: the exponentials of a
// softmax over x shifted by its maximum (and off, a log-sum).
func expShifted(x []float32, top, scale, off float64, out []float64) {
	out = out[:len(x)]
	j := 0
	if haveExpKernel() {
		n8 := len(x) &^ 7
		for j < n8 {
			j += expShifted8(&x[j], top, scale, off, &out[j], n8-j)
			if j < n8 {
				// A group with an argument outside exp64's own range.
				for e := j; e < j+8; e++ {
					out[e] = exp64(float64(scale*(float64(x[e])-top)) - off)
				}
				j += 8
			}
		}
	}
	for ; j < len(x); j++ {
		out[j] = exp64(float64(scale*(float64(x[j])-top)) - off)
	}
}

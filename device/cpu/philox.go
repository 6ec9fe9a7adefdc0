package cpu

import (
	"math"
	"math/bits"

	"github.com/tolaria-ml/tolaria/device"
)

// Dropout's random numbers: Philox 4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011; the generator of cuRAND
// and PyTorch's CUDA dropout), a counter-based generator: the numbers for
// element i are a function of the key and the counter offset + i/4 alone,
// so any split of the elements draws the same numbers, and a captured
// dropout draws from the offset that the generator's buffer holds when it
// runs.

// The Philox 4x32 multipliers and Weyl key increments (Random123).
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9
	philoxW1 = 0xBB67AE85
)

// philox4x32 is Philox 4x32 with 10 rounds: the counter (c0, c1, c2, c3)
// encrypted under the key (k0, k1).
func philox4x32(c0, c1, c2, c3, k0, k1 uint32) (uint32, uint32, uint32, uint32) {
	for range 10 {
		hi0, lo0 := bits.Mul32(philoxM0, c0)
		hi1, lo1 := bits.Mul32(philoxM1, c2)
		c0, c1, c2, c3 = hi1^c1^k0, lo1, hi0^c3^k1, lo0
		k0 += philoxW0 // the bump after the last round is unused, and cheaper than a branch
		k1 += philoxW1
	}
	return c0, c1, c2, c3
}

// rngState reads a generator buffer: the key (seed) and the counter base
// (offset), stored as the bits of float32 elements.
func rngState(rng []float32) (k0, k1 uint32, offset uint64) {
	k0, k1 = math.Float32bits(rng[device.RNGSeedLo]), math.Float32bits(rng[device.RNGSeedHi])
	offset = uint64(math.Float32bits(rng[device.RNGOffsetLo])) | uint64(math.Float32bits(rng[device.RNGOffsetHi]))<<32
	return k0, k1, offset
}

// dropout writes mask and y = x·mask for the elements lo..hi. Element i
// takes word i%4 of the block at counter offset + i/4; a part that starts
// or ends inside a block computes that block for its own elements only.
// The keep scale 1/(1-p) is one float32 division.
//
// The draw u = (w>>8)·2^-24 is at least p exactly when w>>8 is at least
// ceil(p·2^24) (p·2^24 is exact in float64), so the decision is an integer
// comparison, made into a mask of bits without a branch: at p = 0.5 a
// branch would be mispredicted on every other element.
func dropout(p float32, rng, x, y, mask []float32, lo, hi int) {
	k0, k1, offset := rngState(rng)
	keep := math.Float32bits(1 / (1 - p))
	threshold := uint64(math.Ceil(float64(p) * (1 << 24)))
	pick := func(w uint32) float32 {
		// 1 when w>>8 >= threshold: the difference does not wrap.
		kept := uint32((uint64(w>>8)-threshold)>>63) ^ 1
		return math.Float32frombits(keep & -kept)
	}
	for b := lo / 4; b*4 < hi; b++ {
		c := offset + uint64(b)
		w0, w1, w2, w3 := philox4x32(uint32(c), uint32(c>>32), 0, 0, k0, k1)
		if i := b * 4; i >= lo && i+4 <= hi {
			m, xs, ys := mask[i:i+4:i+4], x[i:i+4:i+4], y[i:i+4:i+4]
			m[0], m[1], m[2], m[3] = pick(w0), pick(w1), pick(w2), pick(w3)
			ys[0], ys[1], ys[2], ys[3] = xs[0]*m[0], xs[1]*m[1], xs[2]*m[2], xs[3]*m[3]
			continue
		}
		words := [4]uint32{w0, w1, w2, w3}
		for i := max(lo, b*4); i < min(hi, b*4+4); i++ {
			mask[i] = pick(words[i%4])
			y[i] = x[i] * mask[i]
		}
	}
}

// advanceRNG adds counters to the generator's 64-bit offset, carrying from
// the low word into the high one.
func advanceRNG(rng []float32, counters int) {
	_, _, offset := rngState(rng)
	offset += uint64(counters)
	rng[device.RNGOffsetLo] = math.Float32frombits(uint32(offset))
	rng[device.RNGOffsetHi] = math.Float32frombits(uint32(offset >> 32))
}

func mul(x, y, z []float32) {
	x, y = x[:len(z)], y[:len(z)]
	for i := range z {
		z[i] = x[i] * y[i]
	}
}

// philoxCost is a dropout element's work in element operations: a quarter
// of a Philox block's ten rounds.
const philoxCost = 8

func (s *stream) Dropout(p float32, rng, x, y, mask device.Buffer) error {
	return s.launch("Dropout", device.CheckDropout(p, rng, x, y, mask), func(v [][]float32) func(*team) {
		rng, x, y, mask := v[0], v[1], v[2], v[3]
		return elementwise(len(x), philoxCost, func(lo, hi int) { dropout(p, rng, x, y, mask, lo, hi) })
	}, rng, x, y, mask)
}

func (s *stream) AdvanceRNG(rng device.Buffer, counters int) error {
	return s.launch("AdvanceRNG", device.CheckAdvanceRNG(rng, counters), serial(func(v [][]float32) {
		advanceRNG(v[0], counters)
	}), rng)
}

func (s *stream) Mul(x, y, z device.Buffer) error {
	return s.launch("Mul", device.CheckMul(x, y, z), func(v [][]float32) func(*team) {
		x, y, z := v[0], v[1], v[2]
		return elementwise(len(x), 1, func(lo, hi int) { mul(x[lo:hi], y[lo:hi], z[lo:hi]) })
	}, x, y, z)
}

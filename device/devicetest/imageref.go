package devicetest

import (
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// Float64 references for the kernels of device.ImageKernels, in the manner
// of ref.go: the definition evaluated element by element in float64 (for
// each output, a loop over the whole window or batch), with no care for
// speed and no code shared with any backend.

// imageAt returns x[n, y, x, c] of an N×H×W×C tensor, and false when (y, x)
// falls outside the H×W image.
func imageAt(x []float32, h, w, c, n, yy, xx, ch int) (float64, bool) {
	if yy < 0 || yy >= h || xx < 0 || xx >= w {
		return 0, false
	}
	return float64(x[((n*h+yy)*w+xx)*c+ch]), true
}

// RefIm2Col returns the im2col matrix of x: s.Rows() rows of s.Cols().
func RefIm2Col(s device.ConvShape, x []float32) []float64 {
	oh, ow := s.OutH(), s.OutW()
	out := make([]float64, 0, s.Rows()*s.Cols())
	for n := range s.N {
		for i := range oh {
			for j := range ow {
				for kh := range s.KH {
					for kw := range s.KW {
						for c := range s.C {
							v, _ := imageAt(x, s.H, s.W, s.C, n, i*s.Stride-s.Pad+kh, j*s.Stride-s.Pad+kw, c)
							out = append(out, v)
						}
					}
				}
			}
		}
	}
	return out
}

// RefCol2Im returns the adjoint of Im2Col applied to dcols: for each input
// element, the sum over every output pixel and window position that reads
// it.
func RefCol2Im(s device.ConvShape, dcols []float32) []float64 {
	oh, ow := s.OutH(), s.OutW()
	dx := make([]float64, s.InLen())
	for n := range s.N {
		for y := range s.H {
			for x := range s.W {
				for c := range s.C {
					var sum float64
					for i := range oh {
						for j := range ow {
							kh, kw := y-(i*s.Stride-s.Pad), x-(j*s.Stride-s.Pad)
							if kh >= 0 && kh < s.KH && kw >= 0 && kw < s.KW {
								row := (n*oh+i)*ow + j
								sum += float64(dcols[row*s.Cols()+(kh*s.KW+kw)*s.C+c])
							}
						}
					}
					dx[((n*s.H+y)*s.W+x)*s.C+c] = sum
				}
			}
		}
	}
	return dx
}

// poolWindows calls fn for every output element (n, i, j, c) of a pooling
// with its index into the output.
func poolWindows(s device.PoolShape, fn func(out, n, i, j, c int)) {
	oh, ow := s.OutH(), s.OutW()
	for n := range s.N {
		for i := range oh {
			for j := range ow {
				for c := range s.C {
					fn(((n*oh+i)*ow+j)*s.C+c, n, i, j, c)
				}
			}
		}
	}
}

// RefMaxPool returns each window's maximum over the pixels inside the
// image and the window position kh·K+kw of its first occurrence.
func RefMaxPool(s device.PoolShape, x []float32) (y []float64, arg []int) {
	y, arg = make([]float64, s.OutLen()), make([]int, s.OutLen())
	poolWindows(s, func(out, n, i, j, c int) {
		best, at := math.Inf(-1), -1
		for kh := range s.K {
			for kw := range s.K {
				v, inside := imageAt(x, s.H, s.W, s.C, n, i*s.Stride-s.Pad+kh, j*s.Stride-s.Pad+kw, c)
				if inside && (at < 0 || v > best) {
					best, at = v, kh*s.K+kw
				}
			}
		}
		y[out], arg[out] = best, at
	})
	return y, arg
}

// RefMaxPoolGrad returns dx: dy routed to the input pixel arg names in each
// window.
func RefMaxPoolGrad(s device.PoolShape, dy []float32, arg []int) []float64 {
	dx := make([]float64, s.InLen())
	poolWindows(s, func(out, n, i, j, c int) {
		kh, kw := arg[out]/s.K, arg[out]%s.K
		y, x := i*s.Stride-s.Pad+kh, j*s.Stride-s.Pad+kw
		dx[((n*s.H+y)*s.W+x)*s.C+c] += float64(dy[out])
	})
	return dx
}

// RefAvgPool returns each window's sum over the pixels inside the image
// divided by K·K.
func RefAvgPool(s device.PoolShape, x []float32) []float64 {
	y := make([]float64, s.OutLen())
	poolWindows(s, func(out, n, i, j, c int) {
		var sum float64
		for kh := range s.K {
			for kw := range s.K {
				v, _ := imageAt(x, s.H, s.W, s.C, n, i*s.Stride-s.Pad+kh, j*s.Stride-s.Pad+kw, c)
				sum += v
			}
		}
		y[out] = sum / float64(s.K*s.K)
	})
	return y
}

// RefAvgPoolGrad returns dx: every window spreads dy/(K·K) over its pixels
// inside the image.
func RefAvgPoolGrad(s device.PoolShape, dy []float32) []float64 {
	dx := make([]float64, s.InLen())
	poolWindows(s, func(out, n, i, j, c int) {
		for kh := range s.K {
			for kw := range s.K {
				y, x := i*s.Stride-s.Pad+kh, j*s.Stride-s.Pad+kw
				if y >= 0 && y < s.H && x >= 0 && x < s.W {
					dx[((n*s.H+y)*s.W+x)*s.C+c] += float64(dy[out]) / float64(s.K*s.K)
				}
			}
		}
	})
	return dx
}

// BatchNormResult is what RefBatchNormTrain computes: the batch statistics
// (means, then invstd), xhat, y and the updated running statistics (means,
// then unbiased variances).
type BatchNormResult struct {
	Stats, Xhat, Y, Running []float64
}

// RefBatchNormTrain normalises each column of x (rows×cols) with its mean
// and biased variance.
func RefBatchNormTrain(rows, cols int, eps, momentum float32, x, params, running []float32) BatchNormResult {
	r := BatchNormResult{Stats: make([]float64, 2*cols), Xhat: make([]float64, rows*cols),
		Y: make([]float64, rows*cols), Running: make([]float64, 2*cols)}
	m := float64(momentum)
	for c := range cols {
		var mean, variance float64
		for i := range rows {
			mean += float64(x[i*cols+c])
		}
		mean /= float64(rows)
		for i := range rows {
			d := float64(x[i*cols+c]) - mean
			variance += d * d
		}
		variance /= float64(rows)
		invstd := 1 / math.Sqrt(variance+float64(eps))
		r.Stats[c], r.Stats[cols+c] = mean, invstd
		for i := range rows {
			xh := (float64(x[i*cols+c]) - mean) * invstd
			r.Xhat[i*cols+c] = xh
			r.Y[i*cols+c] = float64(params[c])*xh + float64(params[cols+c])
		}
		r.Running[c] = (1-m)*float64(running[c]) + m*mean
		r.Running[cols+c] = (1-m)*float64(running[cols+c]) + m*variance*float64(rows)/float64(rows-1)
	}
	return r
}

// RefBatchNormEval normalises x with the running statistics.
func RefBatchNormEval(rows, cols int, eps float32, x, params, running []float32) []float64 {
	y := make([]float64, rows*cols)
	for i := range rows {
		for c := range cols {
			xh := (float64(x[i*cols+c]) - float64(running[c])) / math.Sqrt(float64(running[cols+c])+float64(eps))
			y[i*cols+c] = float64(params[c])*xh + float64(params[cols+c])
		}
	}
	return y
}

// RefBatchNormGrad returns dx and dparams (dgamma, then dbeta) from dy and
// the forward pass's xhat, stats and params.
func RefBatchNormGrad(rows, cols int, dy, xhat, params, stats []float32) (dx, dparams []float64) {
	dx, dparams = make([]float64, rows*cols), make([]float64, 2*cols)
	for c := range cols {
		var dgamma, dbeta float64
		for i := range rows {
			dbeta += float64(dy[i*cols+c])
			dgamma += float64(dy[i*cols+c]) * float64(xhat[i*cols+c])
		}
		dparams[c], dparams[cols+c] = dgamma, dbeta
		k := float64(params[c]) * float64(stats[cols+c])
		for i := range rows {
			dx[i*cols+c] = k * (float64(dy[i*cols+c]) - dbeta/float64(rows) - float64(xhat[i*cols+c])*dgamma/float64(rows))
		}
	}
	return dx, dparams
}

// RefPhilox is Philox 4x32-10 as Random123 defines it: ten rounds, each
// multiplying words 0 and 2 by the round constants and mixing their high
// halves with words 1 and 3 and the key, the key bumped by the Weyl
// constants between rounds.
func RefPhilox(ctr [4]uint32, key [2]uint32) [4]uint32 {
	const (
		m0, m1 = 0xD2511F53, 0xCD9E8D57
		w0, w1 = 0x9E3779B9, 0xBB67AE85
	)
	for round := 0; round < 10; round++ {
		p0 := uint64(m0) * uint64(ctr[0])
		p1 := uint64(m1) * uint64(ctr[2])
		ctr = [4]uint32{
			uint32(p1>>32) ^ ctr[1] ^ key[0],
			uint32(p1),
			uint32(p0>>32) ^ ctr[3] ^ key[1],
			uint32(p0),
		}
		key[0] += w0
		key[1] += w1
	}
	return ctr
}

// RefDropout returns the mask and y = x·mask that Dropout draws with the
// generator state (seed, offset): element i keeps (mask 1/(1-p)) when word
// i%4 of RefPhilox({offset+i/4 as two words, 0, 0}, seed), its top 24 bits
// scaled by 2^-24, is at least p.
func RefDropout(p float32, seed, offset uint64, x []float32) (y, mask []float64) {
	y, mask = make([]float64, len(x)), make([]float64, len(x))
	for i := range x {
		c := offset + uint64(i/4)
		w := RefPhilox([4]uint32{uint32(c), uint32(c >> 32), 0, 0}, [2]uint32{uint32(seed), uint32(seed >> 32)})[i%4]
		u := float64(w>>8) / (1 << 24)
		if u >= float64(p) {
			mask[i] = 1 / (1 - float64(p))
		}
		y[i] = float64(x[i]) * mask[i]
	}
	return y, mask
}

// RNGState returns a generator buffer's contents (device.RNGLen elements)
// for a seed and an offset: the bits of each 32-bit half in a float32.
func RNGState(seed, offset uint64) []float32 {
	s := make([]float32, device.RNGLen)
	s[device.RNGSeedLo] = math.Float32frombits(uint32(seed))
	s[device.RNGSeedHi] = math.Float32frombits(uint32(seed >> 32))
	s[device.RNGOffsetLo] = math.Float32frombits(uint32(offset))
	s[device.RNGOffsetHi] = math.Float32frombits(uint32(offset >> 32))
	return s
}

// RNGOffset reads the offset from a generator buffer's contents.
func RNGOffset(state []float32) uint64 {
	return uint64(math.Float32bits(state[device.RNGOffsetLo])) | uint64(math.Float32bits(state[device.RNGOffsetHi]))<<32
}

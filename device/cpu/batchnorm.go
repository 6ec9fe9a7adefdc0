package cpu

import (
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// Batch normalisation over a rows×cols matrix, a column per channel
// (device.ImageKernels.BatchNormTrain, BatchNormEval, BatchNormGrad).
//
// The column statistics are sums over every row: each column is summed
// in float64 from the first row to the last by one part, and the parts
// split the columns, so no sum depends on the thread count. The
// elementwise passes that follow split the rows. Both passes are one
// kernel: the first ends before the second starts (team.run returns only
// once every part is done), and the second reads the statistics the first
// stored, rounded to float32, as a second CUDA kernel would.

// bnAlign is how many columns a part of a statistics pass takes at least:
// sixteen float32, a cache line of each row (so that no two parts read
// the same lines) and a block of the AVX-512 loops (image_amd64.s); two
// threads share the 32 channels of a small CNN's activations.
const bnAlign = 16

// overColumns makes the statistics pass, split over the columns, each a
// sum over rows of cost operations per element.
func overColumns(rows, cols, cost int, fn func(lo, hi int)) *rangeTask {
	return &rangeTask{total: cols, align: bnAlign, cost: cost * rows, grain: elemGrain, fn: fn}
}

// overRows makes the elementwise pass, split over the rows.
func overRows(rows, cols int, fn func(lo, hi int)) *rangeTask {
	return &rangeTask{total: rows, align: 1, cost: 2 * cols, grain: elemGrain, fn: fn}
}

// twoPasses runs first, then second, as one kernel.
func twoPasses(first, second *rangeTask) func(*team) {
	return func(t *team) {
		first.run(t)
		second.run(t)
	}
}

// bnStats writes the batch statistics of the columns lo..hi to stats (the
// means, then invstd = 1/sqrt(var+eps)) and updates running: the mean and
// the biased variance in float64, the variance around the float64 mean in
// a second pass over the rows, which stays accurate when the mean is large
// beside the spread.
func bnStats(rows, cols, lo, hi int, eps, momentum float32, x, stats, running []float32) {
	var sum, sq [colBlock]float64
	n, m := float64(rows), float64(momentum)
	for j0 := lo; j0 < hi; j0 += colBlock {
		s, q := sum[:min(colBlock, hi-j0)], sq[:min(colBlock, hi-j0)]
		clear(s)
		clear(q)
		k := 0
		if haveImageKernel() {
			for ; k+16 <= len(s); k += 16 {
				colSum16(&x[j0+k], uintptr(4*cols), rows, &s[k])
			}
		}
		for r := 0; k < len(s) && r < rows; r++ {
			for j, v := range x[r*cols+j0+k:][:len(s)-k] {
				s[k+j] += float64(v)
			}
		}
		for j := range s {
			s[j] /= n
		}
		k = 0
		if haveImageKernel() {
			for ; k+16 <= len(s); k += 16 {
				colSqDev16(&x[j0+k], uintptr(4*cols), rows, &s[k], &q[k])
			}
		}
		for r := 0; k < len(s) && r < rows; r++ {
			for j, v := range x[r*cols+j0+k:][:len(s)-k] {
				d := float64(v) - s[k+j]
				q[k+j] += d * d
			}
		}
		for j, mean := range s {
			c := j0 + j
			variance := q[j] / n
			stats[c] = float32(mean)
			stats[cols+c] = float32(1 / math.Sqrt(variance+float64(eps)))
			running[c] = float32((1-m)*float64(running[c]) + m*mean)
			running[cols+c] = float32((1-m)*float64(running[cols+c]) + m*variance*n/(n-1))
		}
	}
}

// bnNormalize writes xhat = (x-mean)·invstd and y = gamma·xhat + beta for
// the rows lo..hi, in float32 from the stored statistics. x is read
// before xhat and y are written, element by element, so they may alias it.
func bnNormalize(cols, lo, hi int, x, params, stats, xhat, y []float32) {
	mean, inv := stats[:cols], stats[cols:2*cols]
	gamma, beta := params[:cols], params[cols:2*cols]
	if haveImageKernel() && cols%16 == 0 {
		x, xhat, y = x[lo*cols:hi*cols], xhat[lo*cols:hi*cols], y[lo*cols:hi*cols]
		bnNormRows(&x[0], &xhat[0], &y[0], hi-lo, cols, &stats[0], &params[0])
		return
	}
	for r := lo; r < hi; r++ {
		xr, xh, yr := x[r*cols:(r+1)*cols], xhat[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		for j, v := range xr {
			h := float32((v - mean[j]) * inv[j])
			xh[j] = h
			yr[j] = float32(gamma[j]*h) + beta[j]
		}
	}
}

// bnEval writes y = gamma·((x-rmean)·inv) + beta for the rows lo..hi, with
// inv = 1/sqrt(rvar+eps) taken in float64 and rounded to float32, as
// BatchNormTrain's invstd is, and the rest in float32 in bnNormalize's
// order.
func bnEval(cols, lo, hi int, eps float32, x, params, running, y []float32) {
	var inv [colBlock]float32
	for j0 := 0; j0 < cols; j0 += colBlock {
		w := min(colBlock, cols-j0)
		iv := inv[:w]
		for j := range iv {
			iv[j] = float32(1 / math.Sqrt(float64(running[cols+j0+j])+float64(eps)))
		}
		mean, gamma, beta := running[j0:j0+w], params[j0:j0+w], params[cols+j0:cols+j0+w]
		for r := lo; r < hi; r++ {
			yr := y[r*cols+j0:][:w]
			for j, v := range x[r*cols+j0:][:w] {
				yr[j] = gamma[j]*((v-mean[j])*iv[j]) + beta[j]
			}
		}
	}
}

// bnGradSums writes dgamma = Σ dy·xhat and dbeta = Σ dy for the columns
// lo..hi, in float64 in row order, to dparams, and the factors of
// bnGradInput for those columns to kab (cols each): k = gamma·invstd,
// a = dbeta/rows and b = dgamma/rows, from the stored dparams, each
// rounded once to float32.
func bnGradSums(rows, cols, lo, hi int, dy, xhat, params, stats, dparams, kab []float32) {
	var dg, db [colBlock]float64
	n := float64(rows)
	for j0 := lo; j0 < hi; j0 += colBlock {
		w := min(colBlock, hi-j0)
		g, b := dg[:w], db[:w]
		clear(g)
		clear(b)
		k := 0
		if haveImageKernel() {
			for ; k+16 <= w; k += 16 {
				colDot16(&dy[j0+k], &xhat[j0+k], uintptr(4*cols), rows, &b[k], &g[k])
			}
		}
		for r := 0; k < w && r < rows; r++ {
			xh := xhat[r*cols+j0+k:][:w-k]
			for j, d := range dy[r*cols+j0+k:][:w-k] {
				b[k+j] += float64(d)
				g[k+j] += float64(d) * float64(xh[j])
			}
		}
		for j := range g {
			c := j0 + j
			dparams[c] = float32(g[j])
			dparams[cols+c] = float32(b[j])
			kab[c] = float32(float64(params[c]) * float64(stats[cols+c]))
			kab[cols+c] = float32(float64(dparams[cols+c]) / n)
			kab[2*cols+c] = float32(float64(dparams[c]) / n)
		}
	}
}

// bnGradInput writes dx = k·((dy - a) - xhat·b) for the rows lo..hi, in
// float32 per element, with the factors bnGradSums left in kab.
func bnGradInput(cols, lo, hi int, dy, xhat, kab, dx []float32) {
	if haveImageKernel() && cols%16 == 0 {
		dy, xhat, dx = dy[lo*cols:hi*cols], xhat[lo*cols:hi*cols], dx[lo*cols:hi*cols]
		bnGradRows(&dy[0], &xhat[0], &dx[0], hi-lo, cols, &kab[0])
		return
	}
	k, a, b := kab[:cols], kab[cols:2*cols], kab[2*cols:3*cols]
	for r := lo; r < hi; r++ {
		xh, out := xhat[r*cols:(r+1)*cols], dx[r*cols:(r+1)*cols]
		for j, d := range dy[r*cols : (r+1)*cols] {
			out[j] = k[j] * ((d - a[j]) - float32(xh[j]*b[j]))
		}
	}
}

func (s *stream) BatchNormTrain(rows, cols int, eps, momentum float32, x, params, stats, xhat, y, running device.Buffer) error {
	check := device.CheckBatchNormTrain(rows, cols, eps, momentum, x, params, stats, xhat, y, running)
	return s.launch("BatchNormTrain", check, func(v [][]float32) func(*team) {
		x, params, stats, xhat, y, running := v[0], v[1], v[2], v[3], v[4], v[5]
		return twoPasses(
			overColumns(rows, cols, 2, func(lo, hi int) { bnStats(rows, cols, lo, hi, eps, momentum, x, stats, running) }),
			overRows(rows, cols, func(lo, hi int) { bnNormalize(cols, lo, hi, x, params, stats, xhat, y) }))
	}, x, params, stats, xhat, y, running)
}

func (s *stream) BatchNormEval(rows, cols int, eps float32, x, params, running, y device.Buffer) error {
	check := device.CheckBatchNorm(rows, cols, []device.Buffer{x, y}, []device.Buffer{params, running})
	return s.launch("BatchNormEval", check, func(v [][]float32) func(*team) {
		x, params, running, y := v[0], v[1], v[2], v[3]
		return overRows(rows, cols, func(lo, hi int) { bnEval(cols, lo, hi, eps, x, params, running, y) }).run
	}, x, params, running, y)
}

func (s *stream) BatchNormGrad(rows, cols int, dy, xhat, params, stats, dx, dparams device.Buffer) error {
	check := device.CheckBatchNorm(rows, cols, []device.Buffer{dy, xhat, dx}, []device.Buffer{params, stats, dparams})
	return s.launch("BatchNormGrad", check, func(v [][]float32) func(*team) {
		dy, xhat, params, stats, dx, dparams := v[0], v[1], v[2], v[3], v[4], v[5]
		kab := make([]float32, 3*cols)
		return twoPasses(
			overColumns(rows, cols, 2, func(lo, hi int) { bnGradSums(rows, cols, lo, hi, dy, xhat, params, stats, dparams, kab) }),
			overRows(rows, cols, func(lo, hi int) { bnGradInput(cols, lo, hi, dy, xhat, kab, dx) }))
	}, dy, xhat, params, stats, dx, dparams)
}

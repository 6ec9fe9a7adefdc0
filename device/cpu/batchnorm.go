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
// eight float32, half a cache line per row, so that two threads share the
// 32 channels of a small CNN's activations.
const bnAlign = 8

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
		for r := range rows {
			for j, v := range x[r*cols+j0:][:len(s)] {
				s[j] += float64(v)
			}
		}
		for j := range s {
			s[j] /= n
		}
		for r := range rows {
			for j, v := range x[r*cols+j0:][:len(s)] {
				d := float64(v) - s[j]
				q[j] += d * d
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
	for r := lo; r < hi; r++ {
		xr, xh, yr := x[r*cols:(r+1)*cols], xhat[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		for j, v := range xr {
			h := (v - mean[j]) * inv[j]
			xh[j] = h
			yr[j] = gamma[j]*h + beta[j]
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
// lo..hi, in float64 in row order, to dparams.
func bnGradSums(rows, cols, lo, hi int, dy, xhat, dparams []float32) {
	var dg, db [colBlock]float64
	for j0 := lo; j0 < hi; j0 += colBlock {
		w := min(colBlock, hi-j0)
		g, b := dg[:w], db[:w]
		clear(g)
		clear(b)
		for r := range rows {
			xh := xhat[r*cols+j0:][:w]
			for j, d := range dy[r*cols+j0:][:w] {
				b[j] += float64(d)
				g[j] += float64(d) * float64(xh[j])
			}
		}
		for j := range g {
			dparams[j0+j] = float32(g[j])
			dparams[cols+j0+j] = float32(b[j])
		}
	}
}

// bnGradInput writes dx = k·((dy - dbeta/rows) - xhat·dgamma/rows), with
// k = gamma·invstd, for the rows lo..hi: the per-column factors from the
// stored dparams, rounded once to float32, then float32 per element.
func bnGradInput(rows, cols, lo, hi int, dy, xhat, params, stats, dparams, dx []float32) {
	var kf, af, bf [colBlock]float32
	n := float64(rows)
	for j0 := 0; j0 < cols; j0 += colBlock {
		w := min(colBlock, cols-j0)
		k, a, b := kf[:w], af[:w], bf[:w]
		for j := range k {
			c := j0 + j
			k[j] = float32(float64(params[c]) * float64(stats[cols+c]))
			a[j] = float32(float64(dparams[cols+c]) / n)
			b[j] = float32(float64(dparams[c]) / n)
		}
		for r := lo; r < hi; r++ {
			xh, out := xhat[r*cols+j0:][:w], dx[r*cols+j0:][:w]
			for j, d := range dy[r*cols+j0:][:w] {
				out[j] = k[j] * ((d - a[j]) - xh[j]*b[j])
			}
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
		return twoPasses(
			overColumns(rows, cols, 2, func(lo, hi int) { bnGradSums(rows, cols, lo, hi, dy, xhat, dparams) }),
			overRows(rows, cols, func(lo, hi int) { bnGradInput(rows, cols, lo, hi, dy, xhat, params, stats, dparams, dx) }))
	}, dy, xhat, params, stats, dx, dparams)
}

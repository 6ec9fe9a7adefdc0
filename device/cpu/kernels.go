package cpu

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/tolaria-ml/tolaria/device"
)

// The kernel math of the device contract (device.Kernels), one function per
// kernel over the memory of already validated buffers. Slices may be longer
// than the kernel needs; only the prefix is used.
//
// Results are float32, but reductions (norms, softmax sums, loss statistics,
// column sums) accumulate in float64 in a fixed order and round once: that
// keeps them accurate over long rows and lets a CUDA kernel, whose reduction
// order differs, agree to within 1e-5 relative. Nothing here depends on
// scheduling or memory addresses, so the same inputs give the same bits.
// Only gemm may use several goroutines (inside gonum), and it waits for them.

// gemm computes c = alpha*op(a)*op(b) + beta*c as device.Kernels.Gemm does.
//
// Each element of c is rounded the same way on every path: c is scaled by
// beta in float32 (set to zero when beta is 0, so that garbage in c is never
// read), then the products (alpha*a[i,l])*b[l,j] are added for l = 0..k-1 in
// order. gonum's kernel for a transposed b instead reduces with a SIMD dot
// product that starts at b's 16-byte alignment, so a transposed b is copied
// into k×n order first.
func gemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	if m*n*k <= smallGemm {
		gemmLoop(transA, transB, m, n, k, alpha, a, b, beta, c)
		return
	}
	gemmBLAS(transA, transB, m, n, k, alpha, a, b, beta, c)
}

// gemmBLAS is gemm through gonum's float32 BLAS, which blocks the product
// and uses all cores for large shapes.
func gemmBLAS(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	if transB {
		b = transpose(b[:n*k], n, k)
	}
	tA, lda := blas.NoTrans, k
	if transA {
		tA, lda = blas.Trans, m
	}
	gonum.Implementation{}.Sgemm(tA, blas.NoTrans, m, n, k, alpha, a[:m*k], lda, b[:k*n], n, beta, c[:m*n], n)
}

// smallGemm is the size (multiply-adds) up to which the plain loop beats
// gonum (BenchmarkGemm: 8x16x2 takes 0.28 µs looped, 0.79 µs through gonum).
const smallGemm = 4096

// gemmLoop is the plain triple loop. It adds in the same order as gonum's
// kernels, so both give the same bits (TestGemmMatchesNaive), and gemm may
// pick either by shape without changing a result. It is slower than gonum
// for real layers (BenchmarkGemm) but faster for tiny ones, where gonum's
// per-row vector calls cost more than the arithmetic.
func gemmLoop(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) {
	// t holds alpha*A[i,:] for the row being computed.
	var tBuf [256]float32
	var t []float32
	if k <= len(tBuf) {
		t = tBuf[:k]
	} else {
		t = make([]float32, k)
	}
	for i := 0; i < m; i++ {
		ci := c[i*n : (i+1)*n]
		switch beta {
		case 0:
			clear(ci)
		case 1:
		default:
			scale(ci, beta)
		}
		if transA {
			for l := range t {
				t[l] = alpha * a[l*m+i]
			}
		} else {
			for l, v := range a[i*k : (i+1)*k] {
				t[l] = alpha * v
			}
		}
		// Each C[i,j] is summed in a register, adding the products in l
		// order, as gonum does; four columns at a time, so that four
		// independent sums hide the latency of each addition. The float32
		// conversions keep each product rounded on its own (no fused
		// multiply-add), as gonum's assembly kernels on amd64 do at every
		// GOAMD64 level. (Where gonum falls back to Go, as on arm64, the
		// compiler may fuse its additions; TestGemmMatchesNaive then tells.) Operands this
		// small sit in L1, so B's stride when it is not transposed costs
		// little.
		bs, bl := k, 1 // B[l,j] = b[j*bs+l*bl]
		if !transB {
			bs, bl = 1, n
		}
		j := 0
		for ; j+4 <= n; j += 4 {
			a0, a1, a2, a3 := ci[j], ci[j+1], ci[j+2], ci[j+3]
			o := j * bs
			for l, tl := range t {
				if tl == 0 { // gonum skips zero products
					continue
				}
				p := o + l*bl
				a0 += float32(tl * b[p])
				a1 += float32(tl * b[p+bs])
				a2 += float32(tl * b[p+2*bs])
				a3 += float32(tl * b[p+3*bs])
			}
			ci[j], ci[j+1], ci[j+2], ci[j+3] = a0, a1, a2, a3
		}
		for ; j+2 <= n; j += 2 {
			a0, a1 := ci[j], ci[j+1]
			o := j * bs
			for l, tl := range t {
				if tl == 0 {
					continue
				}
				p := o + l*bl
				a0 += float32(tl * b[p])
				a1 += float32(tl * b[p+bs])
			}
			ci[j], ci[j+1] = a0, a1
		}
		for ; j < n; j++ {
			a0 := ci[j]
			o := j * bs
			for l, tl := range t {
				if tl != 0 {
					a0 += float32(tl * b[o+l*bl])
				}
			}
			ci[j] = a0
		}
	}
}

// transpose returns the cols×rows transpose of the row-major rows×cols x.
func transpose(x []float32, rows, cols int) []float32 {
	t := make([]float32, len(x))
	for r := 0; r < rows; r++ {
		for j, v := range x[r*cols : (r+1)*cols] {
			t[j*rows+r] = v
		}
	}
	return t
}

// biasAct adds bias to every row of z in place, then writes act(z) to y,
// which may be z itself for ActNone.
func biasAct(act device.Activation, rows, cols int, z, bias, y []float32) {
	z, y, bias = z[:rows*cols], y[:rows*cols], bias[:cols]
	for r := 0; r < rows; r++ {
		zr := z[r*cols : (r+1)*cols]
		for j, b := range bias {
			zr[j] += b
		}
	}
	switch act {
	case device.ActNone:
		copy(y, z)
	case device.ActReLU:
		for i, v := range z {
			y[i] = max(v, 0)
		}
	case device.ActGELU:
		for i, v := range z {
			y[i] = gelu(v)
		}
	}
}

// actGrad writes dz = dy*act'(z); dz may be dy.
//
// The ReLU derivative is taken as 0 at z = 0, and an inactive unit's dz is
// set to 0 rather than computed as dy*0, so a NaN in dy does not leak
// through a unit that did not fire.
func actGrad(act device.Activation, rows, cols int, z, dy, dz []float32) {
	z, dy, dz = z[:rows*cols], dy[:rows*cols], dz[:rows*cols]
	switch act {
	case device.ActNone:
		copy(dz, dy)
	case device.ActReLU:
		for i, v := range z {
			if v > 0 {
				dz[i] = dy[i]
			} else {
				dz[i] = 0
			}
		}
	case device.ActGELU:
		for i, v := range z {
			dz[i] = float32(float64(dy[i]) * geluGrad(v))
		}
	}
}

// The tanh approximation of GELU documented at device.ActGELU.
const (
	geluScale = 0.7978845608028654 // sqrt(2/pi)
	geluCubic = 0.044715
)

// gelu is evaluated in float64 and rounded once: Go has no float32 tanh,
// and a single rounding keeps it as close to the formula as float32 allows.
func gelu(z float32) float32 {
	x := float64(z)
	return float32(0.5 * x * (1 + math.Tanh(geluScale*(x+geluCubic*x*x*x))))
}

// geluGrad is the exact derivative of gelu's formula.
func geluGrad(z float32) float64 {
	x := float64(z)
	t := math.Tanh(geluScale * (x + geluCubic*x*x*x))
	return 0.5*(1+t) + 0.5*x*(1-t*t)*geluScale*(1+3*geluCubic*x*x)
}

// softmaxXent writes the row-wise softmax of logits to probs and adds the
// masked loss sum, correct count and row count to stats.
//
// A row counts with weight mask[r] and is skipped entirely when that is 0,
// so padding rows may carry any label. A counted row whose label is not a
// class index in [0, cols) gets a NaN loss: such a label is a data bug that
// must not vanish into the average.
//
// Each statistic is summed in float64 over the call and rounded once when
// it is added to stats, rather than accumulated in float32 row by row: a
// call's contribution is then accurate to float32 precision whatever the batch
// size, and a running total loses one rounding per call, not one per row.
func softmaxXent(rows, cols int, logits, labels, mask, probs, stats []float32) {
	var loss, correct, count float64
	for r := 0; r < rows; r++ {
		x := logits[r*cols : (r+1)*cols]
		best, top, logSum := logSumExp(x)
		if w := float64(mask[r]); w != 0 {
			rowLoss, hit := xentRow(x, labels[r], best, top, logSum)
			loss += w * rowLoss
			count += w
			if hit {
				correct += w
			}
		}
		// Written after the loss so that probs may alias logits.
		softmaxRow(x, probs[r*cols:(r+1)*cols], top, logSum)
	}
	addStat(stats, device.StatLossSum, loss)
	addStat(stats, device.StatCorrect, correct)
	addStat(stats, device.StatCount, count)
}

// logSumExp returns the index of the first maximum of x, that maximum, and
// log(sum(exp(x - max))): shifting by the maximum keeps exp from overflowing.
func logSumExp(x []float32) (argmax int, top, logSum float64) {
	for j, v := range x {
		if v > x[argmax] {
			argmax = j
		}
	}
	top = float64(x[argmax])
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - top)
	}
	return argmax, top, math.Log(sum)
}

// xentRow returns a row's cross-entropy loss and whether its arg-max is the
// label; the loss is NaN when the label is not a class index.
func xentRow(x []float32, label float32, argmax int, top, logSum float64) (float64, bool) {
	c, ok := classIndex(label, len(x))
	if !ok {
		return math.NaN(), false
	}
	return top - float64(x[c]) + logSum, c == argmax
}

// softmaxRow writes p = exp(x - max - logSum), each element rounded once.
func softmaxRow(x, p []float32, top, logSum float64) {
	for j, v := range x {
		p[j] = float32(math.Exp(float64(v) - top - logSum))
	}
}

// classIndex converts a label stored as float32 to a class index, reporting
// whether it is an integer in [0, cols).
func classIndex(label float32, cols int) (int, bool) {
	if !(label >= 0 && label < float32(cols)) {
		return 0, false
	}
	i := int(label)
	return i, float32(i) == label
}

// addStat adds a float64 partial sum to a float32 statistic, rounding once.
func addStat(stats []float32, i int, sum float64) {
	stats[i] = float32(float64(stats[i]) + sum)
}

// validRows is n = max(1, sum(mask)), the divisor of the mean losses.
func validRows(rows int, mask []float32) float64 {
	var n float64
	for _, w := range mask[:rows] {
		n += float64(w)
	}
	return max(n, 1)
}

// softmaxXentGrad writes dlogits = mask*(probs - onehot(labels))/n, the
// gradient of the mean loss over valid rows. Padding rows get zeros and a
// counted row with an invalid label gets NaNs, as in softmaxXent.
func softmaxXentGrad(rows, cols int, probs, labels, mask, dlogits []float32) {
	n := validRows(rows, mask)
	for r := 0; r < rows; r++ {
		p, d := probs[r*cols:(r+1)*cols], dlogits[r*cols:(r+1)*cols]
		w := float64(mask[r])
		if w == 0 {
			clear(d)
			continue
		}
		label, ok := classIndex(labels[r], cols)
		if !ok {
			fill(d, float32(math.NaN()))
			continue
		}
		s := w / n
		for j, v := range p {
			g := float64(v)
			if j == label {
				g--
			}
			d[j] = float32(g * s)
		}
	}
}

// mse adds to stats the masked sum of the row-mean squared errors and the
// row count, with the same float64 accumulation as softmaxXent.
func mse(rows, cols int, pred, target, mask, stats []float32) {
	var loss, count float64
	for r := 0; r < rows; r++ {
		w := float64(mask[r])
		if w == 0 {
			continue
		}
		var sq float64
		t := target[r*cols : (r+1)*cols]
		for j, v := range pred[r*cols : (r+1)*cols] {
			e := float64(v) - float64(t[j])
			sq += e * e
		}
		loss += w * sq / float64(cols)
		count += w
	}
	addStat(stats, device.StatLossSum, loss)
	addStat(stats, device.StatCount, count)
}

// mseGrad writes dpred = mask*2*(pred-target)/(cols*n); padding rows get
// zeros.
func mseGrad(rows, cols int, pred, target, mask, dpred []float32) {
	n := validRows(rows, mask)
	for r := 0; r < rows; r++ {
		d := dpred[r*cols : (r+1)*cols]
		w := float64(mask[r])
		if w == 0 {
			clear(d)
			continue
		}
		s := 2 * w / (float64(cols) * n)
		t := target[r*cols : (r+1)*cols]
		for j, v := range pred[r*cols : (r+1)*cols] {
			d[j] = float32((float64(v) - float64(t[j])) * s)
		}
	}
}

// colBlock is how many column sums colSum keeps at once: small enough to
// live on the stack, wide enough to read x a cache line at a time.
const colBlock = 64

// colSum writes out = beta*out + (column sums of x). Like gemm it does not
// read out when beta is 0.
func colSum(rows, cols int, x []float32, beta float32, out []float32) {
	var acc [colBlock]float64
	for j0 := 0; j0 < cols; j0 += colBlock {
		sums := acc[:min(colBlock, cols-j0)]
		clear(sums)
		for r := 0; r < rows; r++ {
			row := x[r*cols+j0:]
			for j := range sums {
				sums[j] += float64(row[j])
			}
		}
		for j, s := range sums {
			if beta != 0 {
				s += float64(beta) * float64(out[j0+j])
			}
			out[j0+j] = float32(s)
		}
	}
}

func fill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}

func scale(x []float32, alpha float32) {
	for i := range x {
		x[i] *= alpha
	}
}

func axpy(alpha float32, x, y []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// clipGlobalNorm writes the L2 norm of x to norm[0] and scales x by
// maxNorm/(norm+1e-6) when the norm exceeds maxNorm. The decision and the
// factor use the float32 norm that is stored, so a host reading norm[0]
// can tell exactly whether clipping happened.
func clipGlobalNorm(x []float32, maxNorm float32, norm []float32) {
	var ss float64
	for _, v := range x {
		// Exact: a float32 product fits in float64's mantissa.
		ss += float64(v) * float64(v)
	}
	l2 := float32(math.Sqrt(ss))
	norm[0] = l2
	if l2 > maxNorm {
		scale(x, float32(float64(maxNorm)/(float64(l2)+1e-6)))
	}
}

// sgdMomentum applies one step of SGD with (Nesterov) momentum and L2 weight
// decay, as documented at device.Kernels.SGDMomentum.
func sgdMomentum(p, g, vel, hyper []float32, momentum, weightDecay float32, nesterov bool) {
	lr := hyper[device.HyperLR]
	g, vel = g[:len(p)], vel[:len(p)]
	for i, w := range p {
		gi := g[i] + weightDecay*w
		v := momentum*vel[i] + gi
		vel[i] = v
		if nesterov {
			v = gi + momentum*v
		}
		p[i] = w - lr*v
	}
}

// adamW applies one AdamW step with decoupled weight decay, as documented
// at device.Kernels.AdamW; the bias corrections come from hyper.
func adamW(p, g, m, v, hyper []float32, beta1, beta2, eps, weightDecay float32) {
	lr, bias1, bias2 := hyper[device.HyperLR], hyper[device.HyperBias1], hyper[device.HyperBias2]
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	c1, c2 := 1-beta1, 1-beta2
	for i, w := range p {
		gi := g[i]
		mi := beta1*m[i] + c1*gi
		vi := beta2*v[i] + c2*gi*gi
		m[i], v[i] = mi, vi
		step := (mi / bias1) / (sqrt32(vi/bias2) + eps)
		p[i] = w - lr*(weightDecay*w+step)
	}
}

// sqrt32 is the correctly rounded float32 square root: rounding the float64
// root to float32 never double-rounds wrongly.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

package cpu

import (
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// The kernel math of the device contract (device.Kernels), one function per
// kernel over the memory of already validated buffers. Slices may be longer
// than the kernel needs; only the prefix is used. launch.go splits the
// large kernels into parts that run at once on the device's threads; a
// kernel function here is one part's work.
//
// Results are float32, but reductions (norms, softmax sums, loss statistics,
// column sums) accumulate in float64 in a fixed order and round once: that
// keeps them accurate over long rows and lets a CUDA kernel, whose reduction
// order differs, agree to within 1e-5 relative. Nothing here depends on
// scheduling or memory addresses, so the same inputs give the same bits; a
// split into parts changes no bits, except in GEMM, where it depends on the
// thread count (gemm.go).

// biasAct adds bias to every row of z in place and writes act(z) to y,
// which may be z itself for ActNone, in one pass over each row.
func biasAct(act device.Activation, rows, cols int, z, bias, y []float32) {
	z, y, bias = z[:rows*cols], y[:rows*cols], bias[:cols]
	if (act == device.ActNone || act == device.ActReLU) && rows > 0 && cols%16 == 0 && haveImageKernel() {
		biasActRows(&z[0], &y[0], &bias[0], rows, cols, act == device.ActReLU)
		return
	}
	for r := 0; r < rows; r++ {
		zr, yr := z[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		switch act {
		case device.ActNone:
			for j, b := range bias {
				zr[j] += b
			}
			copy(yr, zr)
		case device.ActReLU:
			for j, b := range bias {
				v := zr[j] + b
				zr[j], yr[j] = v, max(v, 0)
			}
		case device.ActGELU:
			j := 0
			if n := cols &^ 7; n > 0 && haveGELUKernel() {
				biasGELU8(&zr[0], &bias[0], &yr[0], n)
				j = n
			}
			for ; j < cols; j++ {
				v := zr[j] + bias[j]
				zr[j], yr[j] = v, gelu(v)
			}
		case device.ActTanh:
			for j, b := range bias {
				v := zr[j] + b
				zr[j], yr[j] = v, float32(math.Tanh(float64(v)))
			}
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
		i := 0
		if n := len(z) &^ 15; n > 0 && haveImageKernel() {
			reluGrad16(&z[0], &dy[0], &dz[0], n)
			i = n
		}
		for ; i < len(z); i++ {
			if v := z[i]; v > 0 {
				dz[i] = dy[i]
			} else {
				dz[i] = 0
			}
		}
	case device.ActGELU:
		i := 0
		if n := len(z) &^ 7; n > 0 && haveGELUKernel() {
			geluGrad8(&z[0], &dy[0], &dz[0], n)
			i = n
		}
		for ; i < len(z); i++ {
			dz[i] = dy[i] * geluGrad(z[i])
		}
	case device.ActTanh:
		// In float64 and rounded once, as the CUDA kernel does, so the two
		// backends agree to the last bit but for math libraries' tanh.
		for i, v := range z {
			t := math.Tanh(float64(v))
			dz[i] = float32(float64(dy[i]) * (1 - t*t))
		}
	}
}

// The tanh approximation of GELU documented at device.ActGELU.
const (
	geluScale = 0.7978845608028654 // sqrt(2/pi)
	geluCubic = 0.044715
)

// gelu is the tanh approximation in float32, through the identity
// 0.5*(1+tanh(u)) = 1/(1+exp(-2u)): one exp and no cancellation for
// negative z, where 1+tanh(u) would lose every digit. It is within a few
// float32 ulps of the formula in float64 (TestGELUAccuracy). biasAct and
// actGrad run it, and geluGrad, eight lanes at a time where there is AVX2
// (gelu_amd64.s), with the same bits.
func gelu(z float32) float32 {
	u := geluScale * (z + geluCubic*z*z*z)
	return z / (1 + exp32(-2*u))
}

// geluGrad is the derivative of gelu's formula, with s = 1/(1+exp(-2u)):
// 0.5*(1+tanh u) = s and 0.5*(1-tanh² u) = 2s(1-s) = 2s²exp(-2u).
func geluGrad(z float32) float32 {
	z2 := z * z
	e := exp32(-2 * geluScale * (z + geluCubic*z2*z))
	s := 1 / (1 + e)
	ds := e * s * s // s(1-s) without cancelling when s is near 1
	if ds == 0 || e > math.MaxFloat32 {
		// Far out, where z² may overflow: the limit, not inf*0.
		return s
	}
	return s + 2*z*ds*geluScale*(1+3*geluCubic*z2)
}

// exp32 is e^x in float32 within 2 ulps (TestExp32), for x below the
// smallest normal result's argument giving 0 rather than a subnormal:
// x = n*ln2 + r with |r| <= ln2/2, e^r by its Taylor polynomial of degree
// 7 (truncation below 1e-8 relative), times 2^n built from its bits.
func exp32(x float32) float32 {
	const (
		log2e = 1.4426950408889634
		ln2hi = 0.693145751953125 // the high bits of ln 2: n*ln2hi is exact for |n| < 256
		ln2lo = 1.428606765330187e-06
	)
	switch {
	case x != x:
		return x
	case x > 88.72284:
		return float32(math.Inf(1))
	case x < -87.33654:
		return 0
	}
	t := x * log2e
	if t < 0 {
		t -= 0.5
	} else {
		t += 0.5
	}
	n := int32(t)
	r := (x - float32(n)*ln2hi) - float32(n)*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	if n > 127 { // 2^128 is not a float32; e^x is, up to 88.72
		return p * 2 * math.Float32frombits(uint32(n-1+127)<<23)
	}
	return p * math.Float32frombits(uint32(n+127)<<23)
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
	var rs xentRows
	rs.init(rows)
	softmaxXentRows(cols, 0, rows, logits, labels, mask, probs, &rs)
	rs.addTo(stats, mask)
}

// xentRows holds each row's weighted loss and hit, so that rows can be
// scored in any split and the statistics still summed in row order: the
// sums, and so their bits, do not depend on the split.
type xentRows struct {
	loss, hit []float64
}

func (rs *xentRows) init(rows int) {
	rs.loss, rs.hit = make([]float64, rows), make([]float64, rows)
}

// addTo adds the loss sum, the correct count and the row count (the sum
// of the weights) to stats, each summed in float64 in row order and
// rounded once.
func (rs *xentRows) addTo(stats, mask []float32) {
	var loss, correct, count float64
	for r, l := range rs.loss {
		loss += l
		correct += rs.hit[r]
		count += float64(mask[r])
	}
	addStat(stats, device.StatLossSum, loss)
	addStat(stats, device.StatCorrect, correct)
	addStat(stats, device.StatCount, count)
}

// softmaxXentRows does the rows lo..hi of softmaxXent: their softmax, and
// each counted row's weighted loss and hit into rs (0 for a row of weight
// 0, which adds nothing to a sum).
func softmaxXentRows(cols, lo, hi int, logits, labels, mask, probs []float32, rs *xentRows) {
	for r := lo; r < hi; r++ {
		x := logits[r*cols : (r+1)*cols]
		best, top, logSum := logSumExp(x)
		rs.loss[r], rs.hit[r] = 0, 0
		if w := float64(mask[r]); w != 0 {
			rowLoss, hit := xentRow(x, labels[r], best, top, logSum)
			rs.loss[r] = w * rowLoss
			if hit {
				rs.hit[r] = w
			}
		}
		// Written after the loss so that probs may alias logits.
		softmaxRow(x, probs[r*cols:(r+1)*cols], top, logSum)
	}
}

// logSumExp returns the index of the first maximum of x, that maximum, and
// log(sum(exp(x - max))): shifting by the maximum keeps exp from
// overflowing. The exponentials are exp64's, summed in float64 in order.
func logSumExp(x []float32) (argmax int, top, logSum float64) {
	for j, v := range x {
		if v > x[argmax] {
			argmax = j
		}
	}
	top = float64(x[argmax])
	var buf [rowChunk]float64
	var sum float64
	for c := 0; c < len(x); c += rowChunk {
		e := buf[:min(len(x)-c, rowChunk)]
		expShifted(x[c:c+len(e)], top, 1, 0, e)
		for _, v := range e {
			sum += v
		}
	}
	return argmax, top, math.Log(sum)
}

// rowChunk is how many exponentials of a row the softmaxes keep at a time,
// on the stack.
const rowChunk = 256

// xentRow returns a row's cross-entropy loss and whether its arg-max is the
// label; the loss is NaN when the label is not a class index.
func xentRow(x []float32, label float32, argmax int, top, logSum float64) (float64, bool) {
	c, ok := classIndex(label, len(x))
	if !ok {
		return math.NaN(), false
	}
	return top - float64(x[c]) + logSum, c == argmax
}

// softmaxRow writes p = exp(x - max - logSum) (exp64, the argument in
// float64), each element rounded once. p may be x.
func softmaxRow(x, p []float32, top, logSum float64) {
	var buf [rowChunk]float64
	for c := 0; c < len(x); c += rowChunk {
		e := buf[:min(len(x)-c, rowChunk)]
		expShifted(x[c:c+len(e)], top, 1, logSum, e)
		for j, v := range e {
			p[c+j] = float32(v)
		}
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
	softmaxXentGradRows(cols, 0, rows, validRows(rows, mask), probs, labels, mask, dlogits)
}

// softmaxXentGradRows does the rows lo..hi of softmaxXentGrad, n being
// validRows over all of them.
func softmaxXentGradRows(cols, lo, hi int, n float64, probs, labels, mask, dlogits []float32) {
	for r := lo; r < hi; r++ {
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

// colSum writes out[j] = beta*out[j] + (the sum of column j of x) for the
// columns lo..hi. Like gemm it does not read out when beta is 0.
func colSum(rows, cols, lo, hi int, x []float32, beta float32, out []float32) {
	var acc [colBlock]float64
	for j0 := lo; j0 < hi; j0 += colBlock {
		sums := acc[:min(colBlock, hi-j0)]
		clear(sums)
		k := 0
		if haveImageKernel() && rows > 0 {
			for ; k+16 <= len(sums); k += 16 {
				colSum16(&x[j0+k], uintptr(4*cols), rows, &sums[k])
			}
		}
		for r := 0; k < len(sums) && r < rows; r++ {
			row := x[r*cols+j0+k:]
			for j := range sums[k:] {
				sums[k+j] += float64(row[j])
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
	if v == 0 && !math.Signbit(float64(v)) {
		clear(x) // the runtime's memory clearing, several times faster
		return
	}
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
	i := 0
	if n := len(y) &^ 15; n > 0 && haveImageKernel() {
		axpy16(alpha, &x[0], &y[0], n)
		i = n
	}
	for ; i < len(y); i++ {
		y[i] += float32(alpha * x[i])
	}
}

// clipTask is ClipGlobalNorm: it writes the L2 norm of x to norm[0] and
// scales x by maxNorm/(norm+1e-6) when the norm exceeds maxNorm. The
// decision and the factor use the float32 norm that is stored, so a host
// reading norm[0] can tell exactly whether clipping happened.
//
// The sum of squares is taken in float64 over fixed chunks of normChunk
// elements (sumSquares), whose sums are then added in order: the parts of
// a split sum whole chunks, so the norm has the same bits whatever the
// thread count.
type clipTask struct {
	x, norm []float32
	maxNorm float32
	sums    []float64 // one per chunk
	// factor is the clipping scale while the scaling pass runs, else 0
	// while the sums are taken.
	factor float32
}

const normChunk = 1 << 13

// sumSquares is the sum of x[i]² in float64, in four interleaved sums (of
// the elements i mod 4) added at the end: four independent additions hide
// each one's latency. Each square is exact: a float32 product fits in
// float64's mantissa.
func sumSquares(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		s0 += float64(v[0]) * float64(v[0])
		s1 += float64(v[1]) * float64(v[1])
		s2 += float64(v[2]) * float64(v[2])
		s3 += float64(v[3]) * float64(v[3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

func newClipTask(x []float32, maxNorm float32, norm []float32) *clipTask {
	return &clipTask{x: x, norm: norm, maxNorm: maxNorm, sums: make([]float64, (len(x)+normChunk-1)/normChunk)}
}

func (c *clipTask) run(t *team) {
	parts := t.parts(len(c.x), elemGrain)
	c.factor = 0
	t.run(c, min(parts, len(c.sums)))
	var ss float64
	for _, s := range c.sums {
		ss += s
	}
	l2 := float32(math.Sqrt(ss))
	c.norm[0] = l2
	if l2 > c.maxNorm {
		c.factor = float32(float64(c.maxNorm) / (float64(l2) + 1e-6))
		t.run(c, parts)
	}
}

func (c *clipTask) part(i, n int, _ *scratch) {
	if c.factor != 0 {
		lo, hi := span(i, n, len(c.x), 16)
		scale(c.x[lo:hi], c.factor)
		return
	}
	lo, hi := span(i, n, len(c.sums), 1)
	for ch := lo; ch < hi; ch++ {
		c.sums[ch] = sumSquares(c.x[ch*normChunk : min(len(c.x), (ch+1)*normChunk)])
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

// adamConsts are adamW's scalars, in the order adamW8 reads them.
type adamConsts struct {
	beta1, c1, beta2, c2, bias1, bias2, eps, lr, weightDecay float32
}

// adamW applies one AdamW step with decoupled weight decay, as documented
// at device.Kernels.AdamW; the bias corrections come from hyper. Where
// there is AVX, adamW8 does the same eight elements at a time (the
// divisions and the square root dominate a scalar loop), with the same
// bits.
func adamW(p, g, m, v, hyper []float32, beta1, beta2, eps, weightDecay float32) {
	k := adamConsts{beta1: beta1, c1: 1 - beta1, beta2: beta2, c2: 1 - beta2,
		bias1: hyper[device.HyperBias1], bias2: hyper[device.HyperBias2], eps: eps, lr: hyper[device.HyperLR], weightDecay: weightDecay}
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	i := 0
	if n := len(p) &^ 7; n > 0 && haveKernel() {
		adamW8(&p[0], &g[0], &m[0], &v[0], n, &k)
		i = n
	}
	for ; i < len(p); i++ {
		w, gi := p[i], g[i]
		mi := k.beta1*m[i] + k.c1*gi
		vi := k.beta2*v[i] + k.c2*gi*gi
		m[i], v[i] = mi, vi
		step := (mi / k.bias1) / (sqrt32(vi/k.bias2) + k.eps)
		p[i] = w - k.lr*(k.weightDecay*w+step)
	}
}

// sqrt32 is the correctly rounded float32 square root: rounding the float64
// root to float32 never double-rounds wrongly.
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

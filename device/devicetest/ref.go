package devicetest

import (
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// The Ref functions are naive float64 references for the kernels of
// device.Kernels: the textbook formula, evaluated in float64 from the
// float32 inputs a backend receives, with no care for speed. A backend's
// float32 results are compared to them with a tolerance. They are exported
// so that a backend can also test its kernel functions without a device.
// Inputs are not validated and are never modified; outputs are new slices.

// RefGemm returns alpha*op(A)*op(B) + beta*C (m×n). C is not read when beta
// is 0.
func RefGemm(transA, transB bool, m, n, k int, alpha float32, a, b []float32, beta float32, c []float32) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var sum float64
			for l := 0; l < k; l++ {
				sum += float64(at(a, transA, i, l, m, k)) * float64(at(b, transB, l, j, k, n))
			}
			out[i*n+j] = float64(alpha) * sum
			if beta != 0 {
				out[i*n+j] += float64(beta) * float64(c[i*n+j])
			}
		}
	}
	return out
}

// at returns element (i, j) of op(X), an r×c matrix stored c×r when trans.
func at(x []float32, trans bool, i, j, r, c int) float32 {
	if trans {
		return x[j*r+i]
	}
	return x[i*c+j]
}

// RefActivation returns act(z).
func RefActivation(act device.Activation, z float64) float64 {
	switch act {
	case device.ActReLU:
		return math.Max(z, 0)
	case device.ActGELU:
		return 0.5 * z * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(z+0.044715*z*z*z)))
	case device.ActTanh:
		return math.Tanh(z)
	}
	return z
}

// RefActivationGrad returns act'(z); ReLU's derivative at 0 is 0.
func RefActivationGrad(act device.Activation, z float64) float64 {
	switch act {
	case device.ActReLU:
		if z > 0 {
			return 1
		}
		return 0
	case device.ActGELU:
		c := math.Sqrt(2 / math.Pi)
		t := math.Tanh(c * (z + 0.044715*z*z*z))
		return 0.5*(1+t) + 0.5*z*(1-t*t)*c*(1+3*0.044715*z*z)
	case device.ActTanh:
		t := math.Tanh(z)
		return 1 - t*t
	}
	return 1
}

// RefBiasAct returns z with bias added to every row, and act of that.
func RefBiasAct(act device.Activation, rows, cols int, z, bias []float32) (zb, y []float64) {
	zb, y = make([]float64, rows*cols), make([]float64, rows*cols)
	for i := range zb {
		// BiasAct stores z+bias in float32 before activating it.
		zb[i] = float64(float32(z[i] + bias[i%cols]))
		y[i] = RefActivation(act, zb[i])
	}
	return zb, y
}

// RefActGrad returns dy*act'(z).
func RefActGrad(act device.Activation, rows, cols int, z, dy []float32) []float64 {
	dz := make([]float64, rows*cols)
	for i := range dz {
		dz[i] = float64(dy[i]) * RefActivationGrad(act, float64(z[i]))
	}
	return dz
}

// RefSoftmaxXent returns the row-wise softmax of logits and stats after the
// kernel has accumulated into it. Rows whose mask is 0 add nothing, whatever
// their label; a counted row whose label is not a class index adds NaN.
func RefSoftmaxXent(rows, cols int, logits, labels, mask, stats []float32) (probs []float64, out [device.StatsLen]float64) {
	for i := range out {
		out[i] = float64(stats[i])
	}
	probs = make([]float64, rows*cols)
	for r := 0; r < rows; r++ {
		x := logits[r*cols : (r+1)*cols]
		best := 0
		for j, v := range x {
			if v > x[best] {
				best = j
			}
		}
		top := float64(x[best])
		var sum float64
		for _, v := range x {
			sum += math.Exp(float64(v) - top)
		}
		for j, v := range x {
			probs[r*cols+j] = math.Exp(float64(v)-top) / sum
		}
		w := float64(mask[r])
		if w == 0 {
			continue
		}
		out[device.StatCount] += w
		label, ok := refClass(labels[r], cols)
		if !ok {
			out[device.StatLossSum] = math.NaN()
			continue
		}
		out[device.StatLossSum] += w * (top + math.Log(sum) - float64(x[label]))
		if best == label {
			out[device.StatCorrect] += w
		}
	}
	return probs, out
}

// refClass returns the class index a float32 label holds, if it holds one.
func refClass(label float32, cols int) (int, bool) {
	i := int(label)
	return i, float32(i) == label && i >= 0 && i < cols
}

// refValidRows returns max(1, sum(mask)).
func refValidRows(rows int, mask []float32) float64 {
	n := 0.0
	for _, w := range mask[:rows] {
		n += float64(w)
	}
	return math.Max(n, 1)
}

// RefSoftmaxXentGrad returns mask*(probs - onehot(labels))/max(1, sum(mask)).
func RefSoftmaxXentGrad(rows, cols int, probs, labels, mask []float32) []float64 {
	n := refValidRows(rows, mask)
	d := make([]float64, rows*cols)
	for r := 0; r < rows; r++ {
		w := float64(mask[r])
		if w == 0 {
			continue
		}
		label, ok := refClass(labels[r], cols)
		for j := 0; j < cols; j++ {
			g := float64(probs[r*cols+j])
			if !ok {
				g = math.NaN()
			} else if j == label {
				g--
			}
			d[r*cols+j] = w * g / n
		}
	}
	return d
}

// RefMSE returns stats after MSE has accumulated into it.
func RefMSE(rows, cols int, pred, target, mask, stats []float32) [device.StatsLen]float64 {
	var out [device.StatsLen]float64
	for i := range out {
		out[i] = float64(stats[i])
	}
	for r := 0; r < rows; r++ {
		w := float64(mask[r])
		if w == 0 {
			continue
		}
		var sq float64
		for j := r * cols; j < (r+1)*cols; j++ {
			e := float64(pred[j]) - float64(target[j])
			sq += e * e
		}
		out[device.StatLossSum] += w * sq / float64(cols)
		out[device.StatCount] += w
	}
	return out
}

// RefMSEGrad returns mask*2*(pred-target)/(cols*max(1, sum(mask))).
func RefMSEGrad(rows, cols int, pred, target, mask []float32) []float64 {
	n := refValidRows(rows, mask)
	d := make([]float64, rows*cols)
	for i := range d {
		if w := float64(mask[i/cols]); w != 0 {
			d[i] = w * 2 * (float64(pred[i]) - float64(target[i])) / (float64(cols) * n)
		}
	}
	return d
}

// RefColSum returns beta*out + (column sums of x). out is not read when
// beta is 0.
func RefColSum(rows, cols int, x []float32, beta float32, out []float32) []float64 {
	sums := make([]float64, cols)
	for j := range sums {
		for r := 0; r < rows; r++ {
			sums[j] += float64(x[r*cols+j])
		}
		if beta != 0 {
			sums[j] += float64(beta) * float64(out[j])
		}
	}
	return sums
}

// RefScale returns alpha*x.
func RefScale(x []float32, alpha float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(alpha) * float64(v)
	}
	return out
}

// RefAxpy returns y + alpha*x.
func RefAxpy(alpha float32, x, y []float32) []float64 {
	out := make([]float64, len(y))
	for i := range out {
		out[i] = float64(y[i]) + float64(alpha)*float64(x[i])
	}
	return out
}

// RefClipGlobalNorm returns x after clipping and the L2 norm of x.
func RefClipGlobalNorm(x []float32, maxNorm float32) (clipped []float64, norm float64) {
	for _, v := range x {
		norm += float64(v) * float64(v)
	}
	norm = math.Sqrt(norm)
	clipped = RefScale(x, 1)
	if norm > float64(maxNorm) {
		f := float64(maxNorm) / (norm + 1e-6)
		for i := range clipped {
			clipped[i] *= f
		}
	}
	return clipped, norm
}

// RefSGDMomentum returns p and vel after one SGDMomentum step.
func RefSGDMomentum(p, g, vel, hyper []float32, momentum, weightDecay float32, nesterov bool) (pNew, velNew []float64) {
	lr, mu := float64(hyper[device.HyperLR]), float64(momentum)
	pNew, velNew = make([]float64, len(p)), make([]float64, len(p))
	for i := range p {
		gi := float64(g[i]) + float64(weightDecay)*float64(p[i])
		velNew[i] = mu*float64(vel[i]) + gi
		step := velNew[i]
		if nesterov {
			step = gi + mu*velNew[i]
		}
		pNew[i] = float64(p[i]) - lr*step
	}
	return pNew, velNew
}

// RefAdamW returns p, m and v after one AdamW step.
func RefAdamW(p, g, m, v, hyper []float32, beta1, beta2, eps, weightDecay float32) (pNew, mNew, vNew []float64) {
	lr := float64(hyper[device.HyperLR])
	bias1, bias2 := float64(hyper[device.HyperBias1]), float64(hyper[device.HyperBias2])
	b1, b2 := float64(beta1), float64(beta2)
	pNew, mNew, vNew = make([]float64, len(p)), make([]float64, len(p)), make([]float64, len(p))
	for i := range p {
		gi := float64(g[i])
		mNew[i] = b1*float64(m[i]) + (1-b1)*gi
		vNew[i] = b2*float64(v[i]) + (1-b2)*gi*gi
		step := (mNew[i] / bias1) / (math.Sqrt(vNew[i]/bias2) + float64(eps))
		pNew[i] = float64(p[i]) - lr*(float64(weightDecay)*float64(p[i])+step)
	}
	return pNew, mNew, vNew
}

package nn

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
)

// QOps are the operations Q-learning needs beyond an MLP's step, composed
// from the device kernels so that every backend runs them and a step that
// uses them can be captured: the arg-max of each row as a one-hot row, the
// gather of each row's value at a one-hot column, the scatter of a value
// per row into that column, and the Huber loss with its gradient. A QOps
// serves one shape, Rows×Actions; it owns no memory (its buffers come from
// a workspace, in the order of QOpsSizes) and Upload writes its constants
// before its first use.
//
// The compositions rest on three exact facts. ActGrad with ReLU is a
// masked copy: dz = dy where z > 0 and 0 elsewhere (not dy*0, so an
// infinite value in a column not selected does not leak). The rounded
// difference of two finite floats has the sign of the exact one, and is
// zero only when they are equal. Sums of a single value and zeros, and of
// small integers, are exact in float32. So arg-max ties resolve to the
// first maximum, as in Spec.Score, and a gather returns the value itself.
type QOps struct {
	Rows, Actions int
	Delta         float32 // the Huber loss's threshold: quadratic within ±Delta, linear beyond

	// constants
	pairs  device.Buffer // Actions × Actions²: x·pairs holds the pairwise differences
	beats  device.Buffer // Actions² × Actions: counts, negated, the columns that beat each
	firsts device.Buffer // Actions: 1 - j
	index  device.Buffer // Actions: j
	ones   device.Buffer // max(Rows×Actions², Actions): ones
	negDel device.Buffer // 1: -Delta

	// scratch
	diff, beat device.Buffer // Rows × Actions²
	sel        device.Buffer // Rows × Actions
	p, hi, lo  device.Buffer // Rows
	inside     device.Buffer // Rows
}

// QOpsSizes lists the workspace buffer sizes (float32 elements) a QOps
// for rows×actions needs, in the order NewQOps takes them.
func QOpsSizes(rows, actions int) []int {
	a2 := actions * actions
	return []int{actions * a2, a2 * actions, actions, actions, max(rows*a2, actions), 1,
		rows * a2, rows * a2, rows * actions, rows, rows, rows, rows}
}

// NewQOps assigns buffers of the sizes from QOpsSizes.
func NewQOps(rows, actions int, delta float32, bufs []device.Buffer) (*QOps, error) {
	switch {
	case rows <= 0:
		return nil, fmt.Errorf("nn: Q operations need at least one row, got %d", rows)
	case actions < 1 || actions > 256:
		return nil, fmt.Errorf("nn: Q operations take 1..256 actions, got %d", actions)
	case !(delta > 0):
		return nil, fmt.Errorf("nn: the Huber threshold must be positive, got %g", delta)
	}
	sizes := QOpsSizes(rows, actions)
	if len(bufs) != len(sizes) {
		return nil, fmt.Errorf("nn: Q operations need %d buffers, got %d", len(sizes), len(bufs))
	}
	for i, b := range bufs {
		if b.Len() != sizes[i] {
			return nil, fmt.Errorf("nn: Q operations buffer %d has %d elements, want %d", i, b.Len(), sizes[i])
		}
	}
	return &QOps{Rows: rows, Actions: actions, Delta: delta,
		pairs: bufs[0], beats: bufs[1], firsts: bufs[2], index: bufs[3], ones: bufs[4], negDel: bufs[5],
		diff: bufs[6], beat: bufs[7], sel: bufs[8], p: bufs[9], hi: bufs[10], lo: bufs[11], inside: bufs[12]}, nil
}

// Upload writes the constants. Capture-unsafe: call it before warm-up.
func (q *QOps) Upload(dev device.Device) error {
	a := q.Actions
	pairs := make([]float32, a*a*a)
	beats := make([]float32, a*a*a)
	// Column j*a+k of x·pairs is x_k - x_j for k > j (k beats j when it is
	// positive) and x_j - x_k for k < j (j beats k when it is positive, so
	// k, the earlier column, beats j on a tie). beats then counts, for each
	// column j, the columns that beat it, minus j, negated.
	for j := range a {
		for k := range a {
			col := j*a + k
			switch {
			case k > j:
				pairs[k*a*a+col], pairs[j*a*a+col] = 1, -1
				beats[col*a+j] = -1
			case k < j:
				pairs[j*a*a+col], pairs[k*a*a+col] = 1, -1
				beats[col*a+j] = 1
			}
		}
	}
	firsts, index := make([]float32, a), make([]float32, a)
	for j := range a {
		firsts[j], index[j] = float32(1-j), float32(j)
	}
	ones := make([]float32, q.ones.Len())
	for i := range ones {
		ones[i] = 1
	}
	for _, c := range []struct {
		b device.Buffer
		v []float32
	}{{q.pairs, pairs}, {q.beats, beats}, {q.firsts, firsts}, {q.index, index}, {q.ones, ones}, {q.negDel, []float32{-q.Delta}}} {
		if err := dev.Upload(c.b, c.v); err != nil {
			return fmt.Errorf("nn: Q operations constants: %w", err)
		}
	}
	return nil
}

// ArgMaxOneHot writes onehot (Rows×Actions) = 1 at the first maximum of
// each row of x (Rows×Actions) and 0 elsewhere. A row holding NaN has no
// defined maximum.
func (q *QOps) ArgMaxOneHot(s device.Stream, x, onehot device.Buffer) error {
	r, a := q.Rows, q.Actions
	a2 := a * a
	if err := s.Gemm(false, false, r, a2, a, 1, x, q.pairs, 0, q.diff); err != nil {
		return err
	}
	if err := s.ActGrad(device.ActReLU, r, a2, q.diff, q.ones.Slice(0, r*a2), q.beat); err != nil {
		return err
	}
	// onehot = max(0, 1 - beaten_j): 1 exactly where no column beats j.
	if err := s.Gemm(false, false, r, a, a2, 1, q.beat, q.beats, 0, q.sel); err != nil {
		return err
	}
	return s.BiasAct(device.ActReLU, r, a, q.sel, q.firsts, onehot)
}

// Index writes idx[r] = the column of row r's one in onehot, as a float.
func (q *QOps) Index(s device.Stream, onehot, idx device.Buffer) error {
	return s.Gemm(false, false, q.Rows, 1, q.Actions, 1, onehot, q.index, 0, idx)
}

// Gather writes out[r] = x[r, j] where onehot[r, j] = 1 (out has Rows
// values); a row of onehot with no one gives 0.
func (q *QOps) Gather(s device.Stream, x, onehot, out device.Buffer) error {
	r, a := q.Rows, q.Actions
	if err := s.ActGrad(device.ActReLU, r, a, onehot, x, q.sel); err != nil {
		return err
	}
	return s.Gemm(false, false, r, 1, a, 1, q.sel, q.ones.Slice(0, a), 0, out)
}

// Scatter writes dst[r, j] = v[r] where onehot[r, j] = 1 and 0 elsewhere
// (dst Rows×Actions, v Rows values).
func (q *QOps) Scatter(s device.Stream, v, onehot, dst device.Buffer) error {
	r, a := q.Rows, q.Actions
	if err := s.Gemm(false, false, r, a, 1, 1, v, q.ones.Slice(0, a), 0, dst); err != nil {
		return err
	}
	return s.ActGrad(device.ActReLU, r, a, onehot, dst, dst)
}

// Huber adds to stats (device.StatsLen) the sum of the Huber losses of
// the Rows values of diff (StatLossSum) and Rows (StatCount), and writes
// grad = scale * clip(diff, -Delta, Delta), the loss's derivative times
// scale (1/Rows for the mean loss). The loss is c*d - c²/2 with c the
// clipped d: d²/2 within ±Delta, Delta*(|d| - Delta/2) beyond.
func (q *QOps) Huber(s device.Stream, diff, stats, grad device.Buffer, scale float32) error {
	r := q.Rows
	ones := q.ones.Slice(0, r)
	steps := []func() error{
		// hi = [d > Delta], lo = [d < -Delta], inside = 1 - hi - lo
		func() error { return s.CopyDtoD(q.p, diff) },
		func() error { return s.BiasAct(device.ActNone, r, 1, q.p, q.negDel, q.p) },
		func() error { return s.ActGrad(device.ActReLU, r, 1, q.p, ones, q.hi) },
		func() error { return s.CopyDtoD(q.p, diff) },
		func() error { return s.Scale(q.p, -1) },
		func() error { return s.BiasAct(device.ActNone, r, 1, q.p, q.negDel, q.p) },
		func() error { return s.ActGrad(device.ActReLU, r, 1, q.p, ones, q.lo) },
		func() error { return s.CopyDtoD(q.inside, ones) },
		func() error { return s.Axpy(-1, q.hi, q.inside) },
		func() error { return s.Axpy(-1, q.lo, q.inside) },
		// grad = clip(d): d inside, ±Delta beyond
		func() error { return s.ActGrad(device.ActReLU, r, 1, q.inside, diff, grad) },
		func() error { return s.Axpy(q.Delta, q.hi, grad) },
		func() error { return s.Axpy(-q.Delta, q.lo, grad) },
		func() error {
			return s.Gemm(false, false, 1, 1, r, 1, grad, diff, 1, stats.Slice(device.StatLossSum, 1))
		},
		func() error {
			return s.Gemm(false, false, 1, 1, r, -0.5, grad, grad, 1, stats.Slice(device.StatLossSum, 1))
		},
		func() error { return s.ColSum(r, 1, ones, 1, stats.Slice(device.StatCount, 1)) },
		func() error { return s.Scale(grad, scale) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

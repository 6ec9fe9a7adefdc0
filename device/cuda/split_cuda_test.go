//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
)

// splitCase is one of the reductions that a stream with a scratch splits
// over blocks once its rows are many: inputs, the call, and the tolerance
// against the CPU device (which sums in another order).
type splitCase struct {
	name string
	ins  [][]float32
	call func(s device.Stream, b []device.Buffer) error
	tol  float64
}

// Shapes past one part: 3,000 rows of softmax are 375 blocks of 8 rows
// (xentDims), 5,000 rows of 40 columns are 5 parts of 1,000 rows
// (rowParts), and ColSum's second case has a partial column tile.
const (
	splitXentRows, splitXentCols = 3000, 50
	splitRows, splitCols         = 5000, 40
)

func splitCases(rng *rand.Rand) []splitCase {
	labels, mask := make([]float32, splitXentRows), make([]float32, splitXentRows)
	for r := range labels {
		labels[r], mask[r] = float32(rng.IntN(splitXentCols)), 1
		if r%17 == 0 {
			labels[r], mask[r] = -1, 0 // padding: any label
		}
	}
	n, c := splitRows, splitCols
	stats := append(randFloats(rng, c, -0.1, 0.1), randFloats(rng, c, 0.5, 2)...)
	return []splitCase{
		{"SoftmaxXent", [][]float32{randFloats(rng, splitXentRows*splitXentCols, -4, 4), labels, mask,
			nanFloats(splitXentRows * splitXentCols), {0.5, 1, 2}},
			func(s device.Stream, b []device.Buffer) error {
				return s.SoftmaxXent(splitXentRows, splitXentCols, b[0], b[1], b[2], b[3], b[4])
			}, 1e-5},
		{"ColSum beta -1", [][]float32{randFloats(rng, n*c, -1, 1), randFloats(rng, c, -1, 1)},
			func(s device.Stream, b []device.Buffer) error { return s.ColSum(n, c, b[0], -1, b[1]) }, 1e-5},
		{"ColSum beta 0, 70 columns", [][]float32{randFloats(rng, n*70, -1, 1), nanFloats(70)},
			func(s device.Stream, b []device.Buffer) error { return s.ColSum(n, 70, b[0], 0, b[1]) }, 1e-5},
		{"BatchNormTrain", [][]float32{randFloats(rng, n*c, 1, 4), randFloats(rng, 2*c, 0.5, 1.5), nanFloats(2 * c),
			nanFloats(n * c), nanFloats(n * c), randFloats(rng, 2*c, 0.5, 1)},
			func(s device.Stream, b []device.Buffer) error {
				return s.BatchNormTrain(n, c, 1e-5, 0.1, b[0], b[1], b[2], b[3], b[4], b[5])
			}, 1e-5},
		{"BatchNormGrad", [][]float32{randFloats(rng, n*c, -1, 1), randFloats(rng, n*c, -2, 2), randFloats(rng, 2*c, 0.5, 1.5),
			stats, nanFloats(n * c), nanFloats(2 * c)},
			func(s device.Stream, b []device.Buffer) error {
				return s.BatchNormGrad(n, c, b[0], b[1], b[2], b[3], b[4], b[5])
			}, 1e-5},
	}
}

// The split shapes really split.
func TestSplitShapesSplit(t *testing.T) {
	if g := xentDims(splitXentRows, true); g.gridX < 2 {
		t.Errorf("xentDims(%d) = %+v: one block", splitXentRows, g)
	}
	for _, sums := range []int{1, 2} {
		if p := rowParts(splitRows, splitCols, sums); p < 2 {
			t.Errorf("rowParts(%d, %d, %d) = %d", splitRows, splitCols, sums, p)
		}
	}
}

// Softmax cross-entropy, ColSum and batch normalisation over rows split
// across blocks agree with the CPU device within rounding, on a stream with
// a scratch and on the legacy stream (one block per column tile or row
// set, no scratch).
func TestSplitReductionsMatchCPUDevice(t *testing.T) {
	p := newDevicePair(t)
	legacy := p.gpu.(*Device).DefaultStream()
	for _, tc := range splitCases(rand.New(rand.NewPCG(31, 7))) {
		g, c := p.run(tc.ins, tc.call)
		within(t, tc.name, g, c, tc.tol)
		within(t, tc.name+" on the legacy stream", runOn(t, p.gpu, legacy, tc.ins, tc.call), c, tc.tol)
	}
}

// Each split reduction gives the same bits launched twice and captured
// and replayed: the parts depend on the shape alone and are added in a
// fixed order.
func TestSplitReductionsDeterministic(t *testing.T) {
	d := openTest(t)
	s := mustStream(t, d)
	for _, tc := range splitCases(rand.New(rand.NewPCG(5, 9))) {
		first, second := runOn(t, d, s, tc.ins, tc.call), runOn(t, d, s, tc.ins, tc.call)
		replayed := replayOn(t, d, s, tc.ins, tc.call)
		for i := range first {
			identicalBits(t, fmt.Sprintf("%s buffer %d, launched again", tc.name, i), second[i], first[i])
			identicalBits(t, fmt.Sprintf("%s buffer %d, replayed", tc.name, i), replayed[i], first[i])
		}
	}
}

// replayOn is runOn with the call captured into a graph and launched once.
func replayOn(t *testing.T, d device.Device, s device.Stream, ins [][]float32, call func(s device.Stream, b []device.Buffer) error) [][]float32 {
	t.Helper()
	bufs := make([]device.Buffer, len(ins))
	for i, v := range ins {
		bufs[i] = mustUpload(t, d, v)
	}
	check(t, "BeginCapture", s.BeginCapture(device.CaptureGlobal))
	check(t, "kernel in a capture", call(s, bufs))
	g, err := s.EndCapture()
	check(t, "EndCapture", err)
	ex, err := d.Instantiate(g)
	check(t, "Instantiate", err)
	check(t, "Launch", s.Launch(ex))
	check(t, "Synchronize", s.Synchronize())
	out := make([][]float32, len(ins))
	for i, b := range bufs {
		out[i] = mustDownload(t, d, b)
		check(t, "Free", d.Free(b))
	}
	check(t, "Exec.Destroy", ex.Destroy())
	check(t, "Graph.Destroy", g.Destroy())
	return out
}

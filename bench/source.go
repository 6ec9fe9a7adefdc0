package bench

import (
	"math/rand/v2"

	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// syntheticBatches is how many distinct batches the source cycles
// through: enough that consecutive copies move different bytes, few
// enough that making them is cheap.
const syntheticBatches = 4

// source feeds the stager synthetic batches of the right shape: random
// inputs (standard normal values, or for a net that reads token ids
// uniform ids below its vocabulary), random class labels (one per
// position for a sequence model), a full mask and the optimizer's
// hyper-parameters for the step. The bench measures time, not accuracy,
// so the batches are made once and cycled; Fill is a copy, which keeps
// the loader far from being the bottleneck. It never ends: the bench stops
// the stager when it has measured enough.
type source struct {
	layout  nn.Layout
	opt     nn.Optimizer
	batches [][]float32
}

var _ staging.Source = (*source)(nil)

// newSource makes the batches; vocab > 0 makes the inputs token ids
// below vocab.
func newSource(spec nn.Spec, opt nn.Optimizer, layout nn.Layout, vocab int, seed uint64) *source {
	rng := rand.New(rand.NewPCG(seed, 0x62656e6368)) // "bench"
	s := &source{layout: layout, opt: opt}
	labels := spec.LabelLen()
	for range syntheticBatches {
		b := make([]float32, layout.Len)
		for i := range layout.XLen {
			if vocab > 0 {
				b[layout.X+i] = float32(rng.IntN(vocab))
			} else {
				b[layout.X+i] = float32(rng.NormFloat64())
			}
		}
		for r := range layout.Batch {
			if spec.Loss == nn.LossMSE {
				b[layout.Y+r*spec.Outputs+rng.IntN(spec.Outputs)] = 1
			} else {
				for j := range labels {
					b[layout.Y+r*labels+j] = float32(rng.IntN(spec.Outputs))
				}
			}
			b[layout.Mask+r] = 1
		}
		s.batches = append(s.batches, b)
	}
	return s
}

// Fill copies batch seq mod syntheticBatches and writes the step's
// hyper-parameters.
func (s *source) Fill(seq int, dst []float32) (staging.Meta, error) {
	copy(dst, s.batches[seq%len(s.batches)])
	l := s.layout
	s.opt.Hyper(seq+1, dst[l.Hyper:l.Hyper+3])
	return staging.Meta{Step: seq, Valid: l.Batch}, nil
}

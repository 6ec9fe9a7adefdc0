package trainer

import (
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// source turns a sequence number into a batch record: which epoch and step
// it belongs to follows from the sequence number alone, so loaders work in
// parallel and a resumed run produces exactly the batches it would have.
type source struct {
	ds      data.Examples
	layout  nn.Layout
	spec    nn.Spec
	opt     *nn.Optimizer // nil for evaluation: no hyper-parameters
	seed    uint64
	shuffle bool
	policy  data.Ragged
	rank    int
	world   int
	epochs  int
	steps   int // batches per epoch
	// onBatch, when set, is told each batch's indices (TrainBatch).
	onBatch func(seq int, indices []int)

	mu    sync.Mutex
	plans map[int][]data.Batch
}

func newSource(ds data.Examples, layout nn.Layout, spec nn.Spec, opt *nn.Optimizer, seed uint64,
	shuffle bool, policy data.Ragged, rank, world, epochs int) (*source, error) {
	s := &source{ds: ds, layout: layout, spec: spec, opt: opt, seed: seed, shuffle: shuffle, policy: policy,
		rank: rank, world: world, epochs: epochs, plans: make(map[int][]data.Batch)}
	// Counted, not planned: the loaders plan each epoch when they reach it.
	steps, err := data.Batches(ds.Len(), rank, world, layout.Batch, policy)
	if err != nil {
		return nil, err
	}
	if steps == 0 {
		return nil, fmt.Errorf("dataset %s has too few examples (%d) for one batch of %d in shard %d of %d with ragged policy %s",
			ds.Shape().Name, ds.Len(), layout.Batch, rank, world, policy)
	}
	s.steps = steps
	return s, nil
}

func (s *source) plan(epoch int) ([]data.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.plans[epoch]; ok {
		return p, nil
	}
	order, err := data.Shard(data.Order(s.ds.Len(), s.seed, epoch, s.shuffle), s.rank, s.world)
	if err != nil {
		return nil, err
	}
	p, err := data.Plan(order, s.layout.Batch, s.policy)
	if err != nil {
		return nil, err
	}
	// Loaders run at most a ring ahead, so older epochs are not needed.
	delete(s.plans, epoch-2)
	s.plans[epoch] = p
	return p, nil
}

var _ staging.Source = (*source)(nil)

func (s *source) Fill(seq int, dst []float32) (staging.Meta, error) {
	epoch, step := seq/s.steps, seq%s.steps
	if epoch >= s.epochs {
		return staging.Meta{}, io.EOF
	}
	p, err := s.plan(epoch)
	if err != nil {
		return staging.Meta{}, err
	}
	b := p[step]
	if s.onBatch != nil {
		s.onBatch(seq, slices.Clone(b.Indices))
	}
	l := s.layout
	x, y, mask := dst[l.X:l.X+l.XLen], dst[l.Y:l.Y+l.YLen], dst[l.Mask:l.Mask+l.MaskLen]
	// Labels go to the start of y: one per example, or one per position
	// of a sequence (then y is exactly the labels). For MSE they are then
	// expanded into one-hot targets in place.
	labels := y[:l.Batch*max(1, s.spec.Positions)]
	valid, err := s.ds.Fill(b.Indices, x, labels, mask)
	if err != nil {
		return staging.Meta{}, err
	}
	if s.spec.Loss == nn.LossMSE {
		oneHot(y, labels, mask, s.spec.Outputs)
	}
	hyper := dst[l.Hyper : l.Hyper+3]
	if s.opt != nil {
		s.opt.Hyper(seq+1, hyper)
	} else {
		clear(hyper)
	}
	return staging.Meta{Epoch: epoch, Step: step, Valid: valid, Ragged: b.Ragged}, nil
}

// oneHot expands class labels into MSE targets in place from the back, so
// the labels may share memory with the targets' start.
func oneHot(targets, labels, mask []float32, classes int) {
	for r := len(labels) - 1; r >= 0; r-- {
		c := int(labels[r])
		row := targets[r*classes : (r+1)*classes]
		clear(row)
		if mask[r] != 0 {
			row[c] = 1
		}
	}
}

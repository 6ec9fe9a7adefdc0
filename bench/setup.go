package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// Staging sizes, the trainer's defaults: two input buffers so the copy of
// step n+1 overlaps step n, a ring of four pinned slots, one loader.
const (
	stagingBuffers = 2
	stagingSlots   = 4
	stagingLoaders = 1
)

const prefetchReason = "bench: graph capture needs a quiet device"

// setup is what a trainer builds for a run, reduced to what a step needs:
// a model with fresh parameters, a workspace leased from the shared pool,
// a compute stream, a staging pipeline over synthetic batches and the
// step engine over its input buffers.
type setup struct {
	dev     device.Device
	w       Workload
	layout  nn.Layout
	model   *nn.Model
	lease   *graphs.Lease
	step    nn.Stepper
	compute device.Stream
	stager  *staging.Stager
	engine  *graphs.Engine
	src     *source
	copies  *copyLog
	nodes   int    // nodes in the captured step graph
	seed    uint64 // the parameters' (and the synthetic batches')
}

// copyLog collects the stager's copy times (OnCopy runs on the stager's
// goroutine).
type copyLog struct {
	mu sync.Mutex
	ms []float64
}

func (c *copyLog) add(seconds float64) {
	c.mu.Lock()
	c.ms = append(c.ms, seconds*1000)
	c.mu.Unlock()
}

// take returns the copy times logged since the last take.
func (c *copyLog) take() []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ms
	c.ms = nil
	return out
}

func newSetup(ctx context.Context, dev device.Device, pool *graphs.Pool, guard *staging.Guard, w Workload, seed uint64) (s *setup, err error) {
	s = &setup{dev: dev, w: w, seed: seed, layout: nn.NewLayout(w.Spec, w.BatchSize), copies: new(copyLog)}
	defer func() {
		if err != nil {
			_ = s.close()
		}
	}()
	if err := s.newStep(pool); err != nil {
		return nil, err
	}
	train, eval := s.step.Accumulators()
	if s.compute, err = dev.NewStream(); err != nil {
		return nil, err
	}
	cfg := staging.Config{BatchLen: s.layout.Len, Slots: stagingSlots, Buffers: stagingBuffers,
		Loaders: stagingLoaders, Guard: guard, OnCopy: s.copies.add}
	s.src = newSource(w.Spec, w.Optimizer, s.layout, w.vocab(), seed)
	if s.stager, err = staging.New(dev, cfg, s.src); err != nil {
		return nil, err
	}
	s.stager.Start(ctx)
	if err := errors.Join(s.compute.Fill(train, 0), s.compute.Fill(eval, 0)); err != nil {
		return nil, err
	}
	if s.engine, err = s.newEngine(); err != nil {
		return nil, err
	}
	return s, nil
}

// vocab is the vocabulary of a net that reads token ids (its first layer
// an embedding), else 0.
func (w Workload) vocab() int {
	if w.Net == nil || len(w.Net.Layers) == 0 || w.Net.Layers[0].Kind != nn.KindEmbedding {
		return 0
	}
	return w.Net.Layers[0].Vocab
}

// newStep makes the model with fresh parameters and its step over a
// workspace leased from pool: the MLP's nn.Step, or a net's nn.NetStep.
func (s *setup) newStep(pool *graphs.Pool) error {
	w := s.w
	if w.Net != nil {
		arch, err := w.Net.Resolve()
		if err != nil {
			return err
		}
		if s.model, err = nn.NewNetModel(s.dev, arch, w.Optimizer, s.seed); err != nil {
			return err
		}
		sizes, err := nn.NetWorkspaceSizes(arch, w.BatchSize)
		if err != nil {
			return err
		}
		if s.lease, err = pool.Acquire(s.dev, nn.NetSignature(arch, w.Optimizer, w.BatchSize), sizes); err != nil {
			return err
		}
		s.step, err = nn.NewNetStep(s.model, s.lease.Workspace(), w.BatchSize)
		return err
	}
	var err error
	if s.model, err = nn.NewModel(s.dev, w.Spec, w.Optimizer, s.seed); err != nil {
		return err
	}
	sig := nn.Signature(w.Spec, w.Optimizer, w.BatchSize)
	if s.lease, err = pool.Acquire(s.dev, sig, nn.WorkspaceSizes(w.Spec, w.BatchSize)); err != nil {
		return err
	}
	ws, err := nn.NewWorkspace(w.Spec, s.lease.Workspace())
	if err != nil {
		return err
	}
	s.step = &nn.Step{M: s.model, W: ws, Batch: w.BatchSize}
	return nil
}

// newEngine makes the step engine: the training step on staging input
// buffer k in slot k, captured under the stager's guard. Every epoch
// retries a failed capture, so there is no limit on failures.
func (s *setup) newEngine() (*graphs.Engine, error) {
	var slots []graphs.Slot
	for k := range s.stager.Buffers() {
		in := s.layout.Views(s.stager.Input(k))
		slots = append(slots, graphs.Slot{ID: k, Step: func(st device.Stream) error { return s.step.Train(st, in) }})
	}
	guard := graphs.GuardFunc(func(capture func() error) error {
		return s.stager.GuardCapture(prefetchReason, capture)
	})
	return graphs.NewEngine(graphs.EngineConfig{Lease: s.lease, Guard: guard, Slots: slots})
}

// close waits for the device and releases everything, returning the
// workspace and executables to the pool for the next setup.
func (s *setup) close() error {
	var errs []error
	if s.compute != nil {
		errs = append(errs, s.compute.Synchronize())
	}
	if s.stager != nil {
		errs = append(errs, s.stager.Stop())
	}
	if s.lease != nil {
		errs = append(errs, s.lease.Release())
	}
	if s.model != nil {
		errs = append(errs, s.model.Free())
	}
	if s.compute != nil {
		errs = append(errs, s.compute.Destroy())
	}
	s.compute, s.stager, s.lease, s.model = nil, nil, nil, nil
	return errors.Join(errs...)
}

// warmUp runs n eager steps through the pipeline and waits for them, so
// that everything the step touches exists and has run before capture.
func (s *setup) warmUp(ctx context.Context, n int) error {
	for range n {
		if _, err := s.issue(ctx, s.compute, false, nil); err != nil {
			return fmt.Errorf("bench: warm-up: %w", err)
		}
	}
	return s.compute.Synchronize()
}

// marks are the events recorded around one measured step on the compute
// stream, indexed by markBeforeWait, markAfterWait and markEnd.
type marks [3]device.Event

const (
	markBeforeWait = iota // before the wait for the batch's copy
	markAfterWait         // after it: the step's work starts here
	markEnd               // after the step's work
)

// issue enqueues one step: wait for the next staged batch's copy, run the
// step (through the engine when graph is set: replayed when an executable
// is ready, else eagerly with the reason; otherwise eagerly on purpose)
// on s, record step-done and hand the buffer back to the stager.
func (s *setup) issue(ctx context.Context, on device.Stream, graph bool, m *marks) (graphs.Result, error) {
	var res graphs.Result
	b, err := s.stager.Next(ctx)
	if err != nil {
		return res, err
	}
	record := func(i int) error {
		if m == nil {
			return nil
		}
		return on.Record(m[i])
	}
	err = errors.Join(record(markBeforeWait), on.Wait(b.CopyDone), record(markAfterWait))
	if err == nil {
		if graph {
			res, err = s.engine.Run(on, b.K)
		} else {
			err = s.engine.RunEager(on, b.K)
		}
	}
	if err == nil {
		err = errors.Join(record(markEnd), on.Record(s.stager.StepDone(b.K)))
	}
	s.stager.Release(b)
	return res, err
}

// captureResult is one setup's capture of its step graphs, one per
// staging input buffer.
type captureResult struct {
	ms     float64 // capture (+ instantiate or update) of every slot
	pooled bool    // every slot updated a pooled executable
	graphs int
	nodes  int
}

// capture records the training step for every input buffer through the
// engine, under the stager's capture guard and through the pool: a cold
// capture instantiates, a pooled one updates an executable left by an
// earlier setup.
func (s *setup) capture() (captureResult, error) {
	rs, err := s.engine.Capture(s.compute)
	if err != nil {
		return captureResult{}, err
	}
	res := captureResult{pooled: true}
	for _, r := range rs {
		res.ms += r.Seconds * 1000
		res.pooled = res.pooled && r.Pooled
		res.graphs++
		res.nodes = r.Nodes
	}
	s.nodes = res.nodes
	return res, nil
}

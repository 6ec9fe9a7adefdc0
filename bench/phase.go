package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
)

// StepWindow is the number of consecutive steps a wall or device step
// time is averaged over: the staging ring's size, which spans the bursts
// in which the pipelined loop issues steps (see Windowed).
const StepWindow = stagingSlots

// eventSet holds the marks of every measured step of an epoch, so that no
// event is read, and nothing waits on the host, until the epoch's
// measurement is over.
type eventSet struct {
	dev   device.Device
	steps []marks
}

func newEventSet(dev device.Device, n int) (*eventSet, error) {
	es := &eventSet{dev: dev, steps: make([]marks, n)}
	for i := range es.steps {
		for j := range es.steps[i] {
			e, err := dev.NewTimingEvent()
			if err != nil {
				es.destroy()
				return nil, err
			}
			es.steps[i][j] = e
		}
	}
	return es, nil
}

func (es *eventSet) destroy() {
	for _, m := range es.steps {
		for _, e := range m {
			if e != nil {
				_ = e.Destroy()
			}
		}
	}
}

func (es *eventSet) elapsed(a, b device.Event) (float64, error) {
	d, err := es.dev.Elapsed(a, b)
	return ms(d), err
}

// phase is what the measured steps of one mode in one epoch produced.
// Times are in milliseconds.
type phase struct {
	graph         bool      // every measured step was replayed (false: eager, or fallen back)
	fallback      string    // why steps of a graph phase ran eagerly, "" if none did
	fallbackSteps int       // measured steps of a graph phase that ran eagerly
	wall          []float64 // wall time per step, windowed within each block
	deviceStep    []float64 // step end to step end on the compute stream, windowed within each block
	busy          []float64 // after the copy wait to step end, per step
	exposed       []float64 // the compute stream's wait for the copy, per step
	copies        []float64 // staging copy device time
	processCPU    float64   // whole process's CPU per step, 0 if unknown
	kernels       int       // kernels in one eager step (eager phases)
	nodes         int       // nodes of the replayed graph (graph phases)

	steps      int // measured steps
	proc       time.Duration
	procOK     bool
	blockMarks [][]marks // the marks of each block, read by finish
}

// maxBlocks is how many blocks of each mode an epoch's measurement is cut
// into, at most: the modes alternate block by block (eager, graph, graph,
// eager, ...), so that drift in the machine's state during the epoch
// (other load, the scheduler settling) falls on both modes alike. A block
// has at least 2*StepWindow steps.
const maxBlocks = 10

func blockCount(steps int) int { return max(1, min(maxBlocks, steps/(2*StepWindow))) }

// measure runs settle unmeasured eager steps, then steps measured steps
// of each mode in alternating blocks, each after settle unmeasured steps of
// its mode, and reads the events once the device is done. Eager steps are issued one kernel at a time; graph steps replay
// the captured executable (or run eagerly, counted as a fallback, when
// there is none).
//
// The wall time of a step is the host time between the ends of issuing
// two consecutive steps. The loop is the trainer's pipelined loop, which
// runs at most a few steps ahead of the device (the stager waits for
// step-done before reusing an input buffer), so in steady state this
// interval, averaged over StepWindow steps, is the time per step the whole
// pipeline sustains.
func (s *setup) measure(ctx context.Context, es *eventSet, steps, settle int) (eager, graph phase, err error) {
	eager.graph, graph.graph = false, true
	// Every epoch starts from the same heap state, so the collector's work
	// during measurement is the measured steps' own garbage's. The
	// goroutine is not locked to its thread here: a locked goroutine that
	// blocks (as this one does, waiting for the stager) hands its thread
	// over on every block, which on a small VM costs more than the step.
	runtime.GC()

	counter := NewCountingStream(s.compute)
	for i := range settle {
		var on device.Stream = s.compute
		if i == 0 {
			on = counter
		}
		if _, err := s.issue(ctx, on, false, nil); err != nil {
			return eager, graph, err
		}
	}
	eager.kernels = counter.Kernels
	next := 0 // next free mark
	blocks := blockCount(steps)
	for b := range blocks {
		n := steps/blocks + btoi(b < steps%blocks)
		order := []*phase{&eager, &graph}
		if b%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, p := range order {
			if err = s.block(ctx, p, es.steps[next:next+n], settle); err != nil {
				return eager, graph, err
			}
			next += n
		}
	}
	if err := s.compute.Synchronize(); err != nil {
		return eager, graph, err
	}
	for _, p := range []*phase{&eager, &graph} {
		if err := p.finish(es); err != nil {
			return eager, graph, err
		}
	}
	if graph.fallbackSteps > 0 && graph.fallback == "" {
		graph.fallback = graphs.ReasonCaptureFailed
	}
	graph.graph = graph.fallbackSteps == 0
	graph.nodes = s.nodes
	return eager, graph, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// block issues lead unmeasured steps of p's mode, then len(mk) measured
// ones. The host runs a few steps ahead of the device (up to five with two
// staging buffers), so without the lead a block's first intervals would
// time the steps the previous block, of the other mode, left in the
// pipeline, or the pipeline filling after the settle steps.
func (s *setup) block(ctx context.Context, p *phase, mk []marks, lead int) error {
	for range lead {
		if _, err := s.issue(ctx, s.compute, p.graph, nil); err != nil {
			return err
		}
	}
	s.copies.take()
	last := time.Now()
	proc0, procOK := processCPU()
	wall := make([]float64, 0, len(mk))
	for i := range mk {
		res, err := s.issue(ctx, s.compute, p.graph, &mk[i])
		if err != nil {
			return err
		}
		if p.graph && !res.Replayed {
			p.fallbackSteps++
			if res.Reason != "" {
				p.fallback = res.Reason
			}
		}
		now := time.Now()
		wall = append(wall, msSince(last, now))
		last = now
	}
	proc1, procOK1 := processCPU()
	p.proc += proc1 - proc0
	p.procOK = (p.procOK || p.steps == 0) && procOK && procOK1
	p.steps += len(mk)
	p.wall = append(p.wall, Windowed(wall, StepWindow)...)
	p.copies = append(p.copies, s.copies.take()...)
	p.blockMarks = append(p.blockMarks, mk)
	return nil
}

func msSince(a, b time.Time) float64 { return ms(b.Sub(a)) }

// finish reads the phase's events and turns its counters into per-step
// figures.
func (p *phase) finish(es *eventSet) error {
	for _, mk := range p.blockMarks {
		var period []float64
		for i, m := range mk {
			exposed, err := es.elapsed(m[markBeforeWait], m[markAfterWait])
			if err != nil {
				return fmt.Errorf("bench: reading step events: %w", err)
			}
			busy, err := es.elapsed(m[markAfterWait], m[markEnd])
			if err != nil {
				return fmt.Errorf("bench: reading step events: %w", err)
			}
			p.exposed, p.busy = append(p.exposed, exposed), append(p.busy, busy)
			if i > 0 {
				d, err := es.elapsed(mk[i-1][markEnd], m[markEnd])
				if err != nil {
					return fmt.Errorf("bench: reading step events: %w", err)
				}
				period = append(period, d)
			}
		}
		p.deviceStep = append(p.deviceStep, Windowed(period, StepWindow)...)
	}
	if p.steps > 0 && p.procOK {
		p.processCPU = ms(p.proc) / float64(p.steps)
	}
	return nil
}

package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
)

// Probe is the launch-cost probe: Kernels no-op-size kernels (Scale of
// one element by 1) issued eagerly, against one replay of a graph of the
// same kernels, each followed by a stream synchronisation and timed on the
// host. Times are medians over Repeats and are per kernel in microseconds.
type Probe struct {
	Kernels int `json:"kernels"`
	Repeats int `json:"repeats"`
	// EagerUS is the time per kernel issued eagerly, issue to completion.
	EagerUS float64 `json:"eager_us_per_kernel"`
	// IssueUS is the host time per kernel to enqueue it eagerly (the
	// synchronisation excluded): what the issuing thread pays.
	IssueUS float64 `json:"eager_issue_us_per_kernel"`
	// ReplayUS is the time per kernel of one replay, launch to completion.
	ReplayUS float64 `json:"replay_us_per_kernel"`
	// LaunchCostUS is EagerUS - ReplayUS: what one eager launch costs over
	// running the same kernel inside a graph.
	LaunchCostUS float64 `json:"launch_cost_us"`
}

// probeLaunch runs the launch-cost probe on dev. Nothing else may use the
// device meanwhile: the graph is captured in global mode.
func probeLaunch(dev device.Device, kernels, repeats int) (p Probe, err error) {
	p = Probe{Kernels: kernels, Repeats: repeats}
	s, err := dev.NewStream()
	if err != nil {
		return p, err
	}
	defer func() { err = errors.Join(err, s.Destroy()) }()
	x, err := dev.Alloc(1)
	if err != nil {
		return p, err
	}
	defer func() { err = errors.Join(err, dev.Free(x)) }()
	if err := dev.Upload(x, []float32{1}); err != nil {
		return p, err
	}
	issue := func(st device.Stream) error {
		for range kernels {
			if err := st.Scale(x, 1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := graphs.WarmUp(s, 1, issue); err != nil {
		return p, err
	}
	g, err := graphs.Capture(s, issue)
	if err != nil {
		return p, err
	}
	exec, err := dev.Instantiate(g)
	_ = g.Destroy()
	if err != nil {
		return p, err
	}
	defer func() { err = errors.Join(err, exec.Destroy()) }()
	if err := exec.Upload(s); err != nil {
		return p, err
	}
	replay := func() error { return s.Launch(exec) }
	if err := errors.Join(replay(), s.Synchronize()); err != nil {
		return p, err
	}
	var eager, issued, replayed []float64
	for range repeats {
		t0 := time.Now()
		if err := issue(s); err != nil {
			return p, err
		}
		t1 := time.Now()
		if err := s.Synchronize(); err != nil {
			return p, err
		}
		t2 := time.Now()
		if err := replay(); err != nil {
			return p, err
		}
		if err := s.Synchronize(); err != nil {
			return p, err
		}
		t3 := time.Now()
		eager = append(eager, us(t2.Sub(t0)))
		issued = append(issued, us(t1.Sub(t0)))
		replayed = append(replayed, us(t3.Sub(t2)))
	}
	return probeFigures(kernels, repeats, eager, issued, replayed)
}

// probeFigures turns the probe's timings (µs per repeat for all kernels:
// eager issue to completion, eager issue alone, one replay to completion)
// into per-kernel medians and the launch cost, eager minus replay. The
// launch cost is not clamped: a negative one says the probe is inside its
// noise, which the figure should show.
func probeFigures(kernels, repeats int, eager, issued, replayed []float64) (Probe, error) {
	p := Probe{Kernels: kernels, Repeats: repeats}
	k := float64(kernels)
	p.EagerUS, p.IssueUS, p.ReplayUS = Median(eager)/k, Median(issued)/k, Median(replayed)/k
	p.LaunchCostUS = p.EagerUS - p.ReplayUS
	if !(p.EagerUS > 0) || !(p.ReplayUS > 0) {
		return p, fmt.Errorf("bench: launch probe measured no time; raise the probe's kernel count")
	}
	return p, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

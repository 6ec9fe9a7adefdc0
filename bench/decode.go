package bench

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
)

// Decode is a token model's decode step (nn.Decoder: the evaluation
// forward pass of the context window at batch 1, the draw of the next id
// on the device, the window shifted), measured the way tolaria sample runs
// it: each token's step enqueued, the stream synchronised, the id read
// back. Eager tokens enqueue every kernel afresh; replayed tokens launch
// the step captured once. Times are milliseconds per token.
type Decode struct {
	Context     int     `json:"context"`
	Vocab       int     `json:"vocab"`
	Temperature float32 `json:"temperature"`
	// Tokens is the measured tokens of each mode, in Blocks alternating
	// blocks (eager, replay, replay, eager, ...).
	Tokens int `json:"tokens"`
	Blocks int `json:"blocks"`

	// KernelsPerStep and CopiesPerStep are what one eager decode step
	// enqueues; GraphNodes the nodes of the captured step, which one
	// launch per token runs.
	KernelsPerStep int `json:"kernels_per_step"`
	CopiesPerStep  int `json:"copies_per_step"`
	GraphNodes     int `json:"graph_nodes"`
	// CaptureMS is the capture, instantiation and upload of the step.
	CaptureMS float64 `json:"capture_ms"`
	// CaptureError says why the step could not be captured; the replay
	// figures are then 0.
	CaptureError string `json:"capture_error,omitempty"`

	// The per-token loop: wall time from enqueueing the step to holding
	// the id on the host, median and p90.
	EagerStepMS     float64 `json:"eager_step_ms"`
	EagerStepP90MS  float64 `json:"eager_step_p90_ms"`
	ReplayStepMS    float64 `json:"replay_step_ms"`
	ReplayStepP90MS float64 `json:"replay_step_p90_ms"`
	// Speedup is EagerStepMS / ReplayStepMS: above 1, replay pays.
	Speedup float64 `json:"speedup"`
	// EagerDeviceBusyMS and ReplayDeviceBusyMS are the median time between
	// events recorded just before and just after the step on its stream:
	// the step's device work, with the gaps between eager launches.
	EagerDeviceBusyMS  float64 `json:"eager_device_busy_ms"`
	ReplayDeviceBusyMS float64 `json:"replay_device_busy_ms"`
	DeviceSpeedup      float64 `json:"device_speedup"`
	// EagerProcessCPUMS and ReplayProcessCPUMS are the whole process's CPU
	// time per token in the loop (0 where it cannot be read).
	EagerProcessCPUMS  float64 `json:"eager_process_cpu_ms"`
	ReplayProcessCPUMS float64 `json:"replay_process_cpu_ms"`

	// BackToBack issues tokens without reading any id back, one
	// synchronisation per run, as the dispatch comparison issues training
	// steps: what replay saves on issuing the decode step alone.
	BackToBack *Dispatch `json:"back_to_back,omitempty"`

	// SameTokens reports whether CheckedTokens ids drawn eagerly and
	// replayed, each from the same prompt and seed, are the same.
	SameTokens    bool `json:"same_tokens"`
	CheckedTokens int  `json:"checked_tokens"`
}

// Decode settings: the temperature tolaria sample defaults to and a fixed
// prompt, so that every run draws from the same generator state.
const (
	decodeTemperature = 1
	maxCheckedTokens  = 64
	// decodeBlockTokens is the fewest tokens of a block.
	decodeBlockTokens = 8
)

var decodePrompt = []byte("tolaria samples its decode step ")

// decoding is a decoder on a stream with its step captured.
type decoding struct {
	dev  device.Device
	st   device.Stream
	d    *nn.Decoder
	exec device.Exec // nil when the capture failed
	host []float32
}

func (dc *decoding) eager(st device.Stream) error  { return dc.d.Step(st) }
func (dc *decoding) replay(st device.Stream) error { return st.Launch(dc.exec) }

// token runs one step as tolaria sample does, timing events in m when it
// is not nil, and returns the id drawn.
func (dc *decoding) token(step graphs.StepFunc, m *[2]device.Event) (int, error) {
	record := func(i int) error {
		if m == nil {
			return nil
		}
		return dc.st.Record(m[i])
	}
	if err := record(0); err != nil {
		return 0, err
	}
	if err := step(dc.st); err != nil {
		return 0, err
	}
	if err := record(1); err != nil {
		return 0, err
	}
	if err := dc.st.Synchronize(); err != nil {
		return 0, err
	}
	if err := dc.dev.Download(dc.host, dc.d.ID); err != nil {
		return 0, err
	}
	return int(dc.host[0]), nil
}

// draw starts from the prompt and seed and draws n ids.
func (dc *decoding) draw(step graphs.StepFunc, n int, seed uint64) ([]int, error) {
	if err := dc.d.Start(decodePrompt, seed); err != nil {
		return nil, err
	}
	ids := make([]int, n)
	for i := range ids {
		id, err := dc.token(step, nil)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}

// decode measures the decode step of the setup's model on its compute
// stream, tokens tokens of each mode. It returns nil for a model that is
// not a token model or a device whose streams cannot sample.
func (s *setup) decode(tokens int) (_ *Decode, err error) {
	if _, ok := s.compute.(device.SampleKernels); !ok || s.w.vocab() == 0 {
		return nil, nil
	}
	d, err := nn.NewDecoder(s.dev, s.model, decodeTemperature)
	if errors.Is(err, nn.ErrNotTokenModel) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, d.Free()) }()
	dc := &decoding{dev: s.dev, st: s.compute, d: d, host: make([]float32, 1)}
	dec := &Decode{Context: d.Context, Vocab: d.Vocab, Temperature: decodeTemperature}

	// One eager step, counted, is also the warm-up before capture.
	if err := d.Start(decodePrompt, s.seed); err != nil {
		return nil, err
	}
	counter := NewCountingStream(s.compute)
	if err := d.Step(counter); err != nil {
		return nil, fmt.Errorf("decode step: %w", err)
	}
	if err := s.compute.Synchronize(); err != nil {
		return nil, err
	}
	dec.KernelsPerStep, dec.CopiesPerStep = counter.Kernels, counter.Copies

	exec, ms, err := s.captureDecode(d)
	if err != nil {
		dec.CaptureError = err.Error()
	} else {
		defer func() { err = errors.Join(err, exec.Destroy()) }()
		dc.exec, dec.CaptureMS, dec.GraphNodes = exec, ms, exec.Nodes()
	}

	if dc.exec != nil {
		dec.CheckedTokens = min(tokens, maxCheckedTokens)
		eager, err := dc.draw(dc.eager, dec.CheckedTokens, s.seed)
		if err != nil {
			return nil, err
		}
		replayed, err := dc.draw(dc.replay, dec.CheckedTokens, s.seed)
		if err != nil {
			return nil, err
		}
		dec.SameTokens = slices.Equal(eager, replayed)
	}
	if err := dc.measure(dec, tokens); err != nil {
		return nil, err
	}
	if dc.exec != nil {
		n := max(1, tokens/dispatchRepeats)
		b, err := dc.backToBack(n, dispatchRepeats)
		if err != nil {
			return nil, err
		}
		dec.BackToBack = &b
	}
	return dec, nil
}

// captureDecode captures d's step on the compute stream under the
// stager's guard, instantiates and uploads it: the executable and the
// milliseconds all that took.
func (s *setup) captureDecode(d *nn.Decoder) (device.Exec, float64, error) {
	t0 := time.Now()
	var g device.Graph
	err := s.stager.GuardCapture(prefetchReason, func() error {
		var err error
		g, err = graphs.Capture(s.compute, d.Step)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	x, err := s.dev.Instantiate(g)
	err = errors.Join(err, g.Destroy())
	if err != nil {
		if x != nil {
			_ = x.Destroy()
		}
		return nil, 0, err
	}
	if err := x.Upload(s.compute); err != nil {
		return nil, 0, errors.Join(err, x.Destroy())
	}
	return x, msSince(t0, time.Now()), nil
}

// decodeMode is what the measured tokens of one mode produced.
type decodeMode struct {
	step   graphs.StepFunc
	wall   []float64
	marks  [][2]device.Event
	proc   time.Duration
	procOK bool
	tokens int
}

// measure runs tokens measured tokens of each mode (eager only when the
// step was not captured) in alternating blocks, continuing from the
// decoder's state, and fills in dec's per-token figures.
func (dc *decoding) measure(dec *Decode, tokens int) (err error) {
	modes := []*decodeMode{{step: dc.eager}}
	if dc.exec != nil {
		modes = append(modes, &decodeMode{step: dc.replay})
	}
	events := make([][2]device.Event, tokens*len(modes))
	defer func() {
		for _, m := range events {
			for _, e := range m {
				if e != nil {
					err = errors.Join(err, e.Destroy())
				}
			}
		}
	}()
	for i := range events {
		for j := range events[i] {
			if events[i][j], err = dc.dev.NewTimingEvent(); err != nil {
				return err
			}
		}
	}
	if ta, ok := dc.dev.(device.ThreadAffine); ok && ta.PrefersLockedThread() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	runtime.GC()
	blocks := max(1, min(maxBlocks, tokens/decodeBlockTokens))
	next := 0
	for b := range blocks {
		n := tokens/blocks + btoi(b < tokens%blocks)
		order := slices.Clone(modes)
		if b%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			if err := dc.block(m, events[next:next+n]); err != nil {
				return err
			}
			next += n
		}
	}
	dec.Tokens, dec.Blocks = tokens, blocks
	figures := make([]struct{ wall, wallP90, busy, cpu float64 }, 2)
	for i, m := range modes {
		var busy []float64
		for _, mk := range m.marks {
			d, err := dc.dev.Elapsed(mk[0], mk[1])
			if err != nil {
				return fmt.Errorf("bench: reading decode events: %w", err)
			}
			busy = append(busy, ms(d))
		}
		w := Summarise(m.wall)
		figures[i].wall, figures[i].wallP90, figures[i].busy = w.Median, w.P90, Summarise(busy).Median
		if m.procOK && m.tokens > 0 {
			figures[i].cpu = ms(m.proc) / float64(m.tokens)
		}
	}
	e, r := figures[0], figures[1]
	dec.EagerStepMS, dec.EagerStepP90MS, dec.EagerDeviceBusyMS, dec.EagerProcessCPUMS = e.wall, e.wallP90, e.busy, e.cpu
	dec.ReplayStepMS, dec.ReplayStepP90MS, dec.ReplayDeviceBusyMS, dec.ReplayProcessCPUMS = r.wall, r.wallP90, r.busy, r.cpu
	dec.Speedup = ratio(dec.EagerStepMS, dec.ReplayStepMS)
	dec.DeviceSpeedup = ratio(dec.EagerDeviceBusyMS, dec.ReplayDeviceBusyMS)
	return nil
}

// block runs len(mk) tokens of m's mode, each timed on the host and
// between the events of mk.
func (dc *decoding) block(m *decodeMode, mk [][2]device.Event) error {
	proc0, ok0 := processCPU()
	for i := range mk {
		t0 := time.Now()
		if _, err := dc.token(m.step, &mk[i]); err != nil {
			return err
		}
		m.wall = append(m.wall, msSince(t0, time.Now()))
	}
	proc1, ok1 := processCPU()
	m.proc += proc1 - proc0
	m.procOK = (m.procOK || m.tokens == 0) && ok0 && ok1
	m.tokens += len(mk)
	m.marks = append(m.marks, mk...)
	return nil
}

// backToBack issues n tokens of each mode back to back, nothing read,
// then synchronises; repeats times, alternating, medians per token.
func (dc *decoding) backToBack(n, repeats int) (Dispatch, error) {
	// Issuing never blocks: locking the goroutine costs nothing and makes
	// the thread's CPU time the issuing's.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var eager, replayed issueTimes
	for range repeats {
		if err := timeIssue(dc.st, n, dc.eager, &eager); err != nil {
			return Dispatch{}, err
		}
		if err := timeIssue(dc.st, n, dc.replay, &replayed); err != nil {
			return Dispatch{}, err
		}
	}
	return dispatchFigures(n, repeats, eager, replayed), nil
}

// Comparisons returns the figures of d that the text summary sets side by
// side, eager against replayed, per token: the sampling loop's wall time,
// device busy and process CPU time, and the tokens issued back to back
// with their issuing thread's CPU.
func (d Decode) Comparisons() []Comparison {
	c := func(name string, eager, graph float64) Comparison {
		return Comparison{Name: name, Eager: eager, Graph: graph, Ratio: ratio(eager, graph)}
	}
	out := []Comparison{
		c("wall, median", d.EagerStepMS, d.ReplayStepMS),
		c("wall, p90", d.EagerStepP90MS, d.ReplayStepP90MS),
		c("device busy, median", d.EagerDeviceBusyMS, d.ReplayDeviceBusyMS),
		c("CPU, whole process", d.EagerProcessCPUMS, d.ReplayProcessCPUMS),
	}
	if b := d.BackToBack; b != nil {
		out = append(out,
			c("back to back, no id read", b.EagerMS, b.ReplayMS),
			c("  host CPU of the issuing thread", b.EagerHostCPUMS, b.ReplayHostCPUMS))
	}
	return out
}

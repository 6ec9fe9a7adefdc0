package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/staging"
)

// Opener opens the device a run measures. Run opens one device per batch
// size and closes it when that batch size is done, so nothing carries
// over between the points of a sweep.
type Opener func() (device.Device, error)

// Run measures cfg's workload on devices from open: at the configured
// batch size, and at every batch size of the sweep when there is one.
// guard is the process's capture guard (see staging.Guard), which the
// run's stagers honour and its captures hold.
func Run(ctx context.Context, guard *staging.Guard, open Opener, cfg Config) (*Report, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if guard == nil {
		return nil, errors.New("bench: Run needs the process's capture guard")
	}
	w, _ := cfg.workload(0)
	rep := &Report{
		Preset:    string(cfg.Preset),
		Model:     w.Name(),
		Optimizer: fmt.Sprintf("%s clip=%g", w.Optimizer.Kind, w.Optimizer.ClipNorm),
		BatchSize: w.BatchSize,
		Settings: Settings{Epochs: cfg.Epochs, WarmupBatches: cfg.WarmupBatches, Steps: cfg.Steps,
			SettleSteps: cfg.SettleSteps, StepWindow: StepWindow, ReuseTrainer: cfg.ReuseTrainer, StagingBuffers: stagingBuffers,
			StagingSlots: stagingSlots, SweepBatchSizes: cfg.SweepBatchSizes, DecodeTokens: cfg.DecodeTokens, Seed: cfg.Seed},
		Host:    hostInfo(),
		Started: time.Now().UTC(),
	}
	sizes := cfg.batchSizes()
	if !slices.Contains(sizes, w.BatchSize) {
		sizes = append(sizes, w.BatchSize)
		slices.Sort(sizes)
	}
	for i, b := range sizes {
		pt, err := runPoint(ctx, guard, open, cfg, b, i == 0, b == w.BatchSize, rep)
		if err != nil {
			return nil, fmt.Errorf("bench: batch size %d: %w", b, err)
		}
		if b == w.BatchSize {
			rep.Records, rep.Summary = pt.Records, pt.Summary
		}
		if len(cfg.SweepBatchSizes) > 0 && slices.Contains(cfg.SweepBatchSizes, b) {
			rep.Sweep = append(rep.Sweep, pt)
		}
	}
	rep.Targets = Targets(rep)
	rep.WallSeconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

func (c Config) progress(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(fmt.Sprintf(format, args...))
	}
}

// dispatchRepeats is how many times the dispatch comparison runs; it
// issues Steps/dispatchRepeats steps of each kind each time.
const dispatchRepeats = 5

// epochResult is one epoch's two phases and the capture between them.
type epochResult struct {
	eager, graph phase
	capture      captureResult
	captureKind  string
	captureErr   error
}

// runPoint measures one batch size on a freshly opened device. The first
// point also runs the launch probe and fills in the report's device; the
// report's own batch size also measures the decode step (own).
func runPoint(ctx context.Context, guard *staging.Guard, open Opener, cfg Config, batch int, first, own bool, rep *Report) (pt Point, err error) {
	dev, err := open()
	if err != nil {
		return pt, err
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	if first {
		rep.Device, rep.DeviceDescription = dev.Name(), dev.Description()
		if cfg.ProbeKernels > 0 {
			p, err := probeLaunch(dev, cfg.ProbeKernels, cfg.ProbeRepeats)
			if err != nil {
				return pt, fmt.Errorf("launch probe: %w", err)
			}
			rep.LaunchProbe = &p
			cfg.progress("launch probe: %d kernels: eager %.2f µs/kernel (issue %.2f), replayed %.2f µs/kernel: launch cost %.2f µs",
				p.Kernels, p.EagerUS, p.IssueUS, p.ReplayUS, p.LaunchCostUS)
		}
	}
	w, _ := cfg.workload(batch)
	pool := graphs.NewPool()
	defer func() { err = errors.Join(err, pool.Close()) }()
	es, err := newEventSet(dev, 2*cfg.Steps)
	if err != nil {
		return pt, err
	}
	defer es.destroy()

	var s *setup
	defer func() {
		if s != nil {
			err = errors.Join(err, s.close())
		}
	}()
	var epochs []epochResult
	for epoch := 1; epoch <= cfg.Epochs; epoch++ {
		if s == nil || !cfg.ReuseTrainer {
			if s != nil {
				if err := s.close(); err != nil {
					return pt, err
				}
				s = nil
			}
			if s, err = newSetup(ctx, dev, pool, guard, w, cfg.Seed+uint64(epoch)); err != nil {
				return pt, err
			}
			if err := s.warmUp(ctx, cfg.WarmupBatches); err != nil {
				return pt, err
			}
		}
		r, err := runEpoch(ctx, s, es, cfg)
		if err != nil {
			return pt, fmt.Errorf("epoch %d: %w", epoch, err)
		}
		epochs = append(epochs, r)
		cfg.progress("batch %d epoch %d/%d: eager %.3f ms/step, graph %.3f ms/step (capture %s %.2f ms)%s",
			batch, epoch, cfg.Epochs, Median(r.eager.wall), Median(r.graph.wall), r.captureKind, r.capture.ms,
			fallbackNote(r))
	}
	pt = Point{BatchSize: batch}
	for i, r := range epochs {
		pt.Records = append(pt.Records, eagerRecord(i+1, r), graphRecord(i+1, r))
	}
	pt.Summary = summarise(batch, epochs, pool.Stats().ReservedBytes, rep.LaunchProbe)
	if !s.engine.Captured() {
		cfg.progress("batch %d: no graph was captured, so eager dispatch is not compared with replay", batch)
	} else {
		n := max(StepWindow, cfg.Steps/dispatchRepeats)
		d, err := s.dispatch(n, dispatchRepeats)
		if err != nil {
			return pt, fmt.Errorf("dispatch: %w", err)
		}
		pt.Summary.Dispatch = &d
		pt.Summary.EagerHostCPUMS, pt.Summary.GraphHostCPUMS = d.EagerHostCPUMS, d.ReplayHostCPUMS
		cfg.progress("batch %d dispatch without staging: eager %.4f ms/step, replay %.4f ms/step: %.2fx",
			batch, d.EagerMS, d.ReplayMS, d.Speedup)
	}
	if own && cfg.DecodeTokens > 0 {
		if rep.Decode, err = s.decode(cfg.DecodeTokens); err != nil {
			return pt, fmt.Errorf("decode step: %w", err)
		}
		if d := rep.Decode; d != nil {
			cfg.progress("decode step: %d kernels; eager %.4f ms/token, replay %.4f ms/token: %.2fx%s",
				d.KernelsPerStep, d.EagerStepMS, d.ReplayStepMS, d.Speedup, decodeNote(d))
		}
	}
	return pt, nil
}

func decodeNote(d *Decode) string {
	switch {
	case d.CaptureError != "":
		return "; capture failed, measured eagerly only: " + d.CaptureError
	case !d.SameTokens:
		return fmt.Sprintf("; the replayed tokens differ from the eager ones (%d checked)", d.CheckedTokens)
	}
	return ""
}

func fallbackNote(r epochResult) string {
	switch {
	case r.captureErr != nil:
		return fmt.Sprintf("; capture failed, graph phase ran eagerly: %v", r.captureErr)
	case r.graph.fallback != "":
		return fmt.Sprintf("; %d steps fell back (%s)", r.graph.fallbackSteps, r.graph.fallback)
	}
	return ""
}

// runEpoch captures (unless the setup already holds its graphs) and
// measures both modes.
func runEpoch(ctx context.Context, s *setup, es *eventSet, cfg Config) (epochResult, error) {
	var r epochResult
	if s.engine.Captured() {
		r.captureKind = CaptureReused
	} else {
		r.capture, r.captureErr = s.capture()
		switch {
		case r.captureErr != nil:
		case r.capture.pooled:
			r.captureKind = CapturePooled
		default:
			r.captureKind = CaptureCold
		}
	}
	var err error
	r.eager, r.graph, err = s.measure(ctx, es, cfg.Steps, cfg.SettleSteps)
	return r, err
}

func phaseRecord(epoch int, p phase) Record {
	wall, busy, exposed, copies := Summarise(p.wall), Summarise(p.busy), Summarise(p.exposed), Summarise(p.copies)
	return Record{
		GraphEnabled: p.graph, StageCopyMS: copies.Median, StageCopyP90MS: copies.P90,
		Fallback: p.fallbackSteps > 0, FallbackReason: p.fallback, FallbackSteps: p.fallbackSteps,
		Epoch: epoch, Steps: p.steps, StepMS: wall.Median, StepP90MS: wall.P90, StepMeanMS: wall.Mean,
		DeviceStepMS: Summarise(p.deviceStep).Median, DeviceBusyMS: busy.Median, DeviceBusyP90: busy.P90,
		ExposedStageMS: exposed.Median, ExposedP90MS: exposed.P90,
		ProcessCPUMS: p.processCPU,
	}
}

func eagerRecord(epoch int, r epochResult) Record {
	rec := phaseRecord(epoch, r.eager)
	rec.Phase = "eager"
	rec.KernelsPerStep = r.eager.kernels
	return rec
}

func graphRecord(epoch int, r epochResult) Record {
	rec := phaseRecord(epoch, r.graph)
	rec.Phase = "graph"
	rec.Capture = r.captureKind
	rec.CaptureMS = r.capture.ms
	rec.GraphNodes = r.graph.nodes
	if r.graph.graph {
		rec.ReplayMS = rec.DeviceBusyMS
	}
	return rec
}

// summarise pools the measured steps of every epoch by mode. Graph phases
// that fell back are left out of the graph statistics and counted.
func summarise(batch int, epochs []epochResult, poolBytes int64, probe *Probe) Summary {
	s := Summary{BatchSize: batch, PoolBytes: poolBytes, Fallbacks: map[string]int{}}
	var eager, graph phase
	var eagerProc, graphProc []float64
	var pooled []float64
	var copies []float64
	for i, r := range epochs {
		eager.append(r.eager)
		eagerProc = append(eagerProc, r.eager.processCPU)
		copies = append(copies, r.eager.copies...)
		copies = append(copies, r.graph.copies...)
		if r.graph.graph {
			graph.append(r.graph)
			graphProc = append(graphProc, r.graph.processCPU)
		}
		if r.graph.fallbackSteps > 0 {
			s.Fallbacks[r.graph.fallback] += r.graph.fallbackSteps
		}
		if s.KernelsPerStep == 0 {
			s.KernelsPerStep = r.eager.kernels
		}
		if r.graph.nodes > 0 {
			s.GraphNodes = r.graph.nodes
		}
		switch r.captureKind {
		case CaptureCold:
			s.Captures++
			if i == 0 {
				s.CaptureColdMS = r.capture.ms
			}
			s.GraphsPerSetup = r.capture.graphs
		case CapturePooled:
			s.Captures++
			s.PooledCaptures++
			pooled = append(pooled, r.capture.ms)
			s.GraphsPerSetup = r.capture.graphs
		}
	}
	ew, gw := Summarise(eager.wall), Summarise(graph.wall)
	s.EagerStepMS, s.EagerStepP90MS, s.EagerStepMeanMS = ew.Median, ew.P90, ew.Mean
	s.GraphStepMS, s.GraphStepP90MS, s.GraphStepMeanMS = gw.Median, gw.P90, gw.Mean
	s.Speedup = ratio(s.EagerStepMS, s.GraphStepMS)
	s.EagerDeviceStepMS, s.GraphDeviceStepMS = Summarise(eager.deviceStep).Median, Summarise(graph.deviceStep).Median
	s.DeviceSpeedup = ratio(s.EagerDeviceStepMS, s.GraphDeviceStepMS)
	gb, eb := Summarise(graph.busy), Summarise(eager.busy)
	s.DeviceBusyMS, s.DeviceBusyP90MS = gb.Median, gb.P90
	s.EagerDeviceBusyMS, s.EagerDeviceBusyP90MS = eb.Median, eb.P90
	s.ReplayMS = gb.Median
	s.EagerProcessCPUMS, s.GraphProcessCPUMS = Summarise(eagerProc).Median, Summarise(graphProc).Median
	c := Summarise(copies)
	s.StageCopyMS, s.StageCopyP90MS = c.Median, c.P90
	ex := Summarise(graph.exposed)
	s.ExposedStageMS, s.ExposedStageP90MS = ex.Median, ex.P90
	s.ExposedStageFraction = ratio(ex.Mean, Summarise(graph.deviceStep).Mean)
	s.CapturePooledMS = Summarise(pooled).Median
	if probe != nil {
		s.LaunchCostUS = probe.LaunchCostUS
	}
	s.StepLaunchCostUS = stepLaunchCostUS(s)
	s.EagerSamplesPerSecond = ratio(float64(batch)*1000, ew.Mean)
	s.GraphSamplesPerSecond = ratio(float64(batch)*1000, gw.Mean)
	return s
}

// stepLaunchCostUS estimates the launch cost per kernel from the step
// times: (EagerStepMS - GraphStepMS) / KernelsPerStep, in µs. It is 0 when
// either step was not measured, and 0 when the estimate is negative: graph
// steps no faster than eager ones put the launch cost within the noise of
// the step times, and a negative cost means nothing.
func stepLaunchCostUS(s Summary) float64 {
	if !s.StepLaunchCostMeasured() {
		return 0
	}
	return max(0, (s.EagerStepMS-s.GraphStepMS)*1000/float64(s.KernelsPerStep))
}

// StepLaunchCostMeasured reports whether s has the figures the launch
// cost is estimated from (StepLaunchCostUS is 0 without them).
func (s Summary) StepLaunchCostMeasured() bool {
	return s.KernelsPerStep > 0 && s.EagerStepMS > 0 && s.GraphStepMS > 0
}

// append pools q's samples into p.
func (p *phase) append(q phase) {
	p.wall = append(p.wall, q.wall...)
	p.deviceStep = append(p.deviceStep, q.deviceStep...)
	p.busy = append(p.busy, q.busy...)
	p.exposed = append(p.exposed, q.exposed...)
}

func hostInfo() Host {
	h := Host{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(),
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.LoadAvg = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return h
}

package bench

import (
	"time"
)

// Capture kinds of a record.
const (
	CaptureCold   = "cold"   // the pool had no executable: instantiated
	CapturePooled = "pooled" // a pooled executable was updated in place
	CaptureReused = "reused" // ReuseTrainer: the setup kept its executables, nothing captured
)

// Report is the outcome of a benchmark run. Its first keys keep the
// predecessor's shape (device, records with graph_enabled, stage_copy_ms,
// capture_ms, replay_ms and fallback) so existing tooling reads it.
type Report struct {
	Device  string   `json:"device"`
	Records []Record `json:"records"`
	Summary Summary  `json:"summary"`
	// Sweep holds one point per batch size of SweepBatchSizes.
	Sweep []Point `json:"sweep,omitempty"`
	// LaunchProbe is the launch-cost probe, run once per report.
	LaunchProbe *Probe `json:"launch_probe,omitempty"`
	// Decode is the decode step of a token model, eager against
	// replayed, measured once per report at its batch size.
	Decode *Decode `json:"decode,omitempty"`
	// Targets are the performance targets for this device and workload,
	// judged on Summary (see Targets).
	Targets []Target `json:"targets,omitempty"`

	DeviceDescription string    `json:"device_description"`
	Preset            string    `json:"preset"`
	Model             string    `json:"model"`
	Optimizer         string    `json:"optimizer"`
	BatchSize         int       `json:"batch_size"`
	Settings          Settings  `json:"settings"`
	Host              Host      `json:"host"`
	Command           string    `json:"command,omitempty"`
	Started           time.Time `json:"started"`
	WallSeconds       float64   `json:"wall_seconds"`
}

// Settings are the run's parameters after defaults.
type Settings struct {
	Epochs          int    `json:"epochs"`
	WarmupBatches   int    `json:"warmup_batches"`
	Steps           int    `json:"steps"`
	SettleSteps     int    `json:"settle_steps"`
	StepWindow      int    `json:"step_window"`
	ReuseTrainer    bool   `json:"reuse_trainer"`
	StagingBuffers  int    `json:"staging_buffers"`
	StagingSlots    int    `json:"staging_slots"`
	SweepBatchSizes []int  `json:"sweep_batch_sizes,omitempty"`
	DecodeTokens    int    `json:"decode_tokens,omitempty"`
	Seed            uint64 `json:"seed"`
}

// Host describes the machine the bench ran on.
type Host struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GoVersion  string `json:"go_version"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPU        string `json:"cpu,omitempty"`
	// LoadAvg is /proc/loadavg when the run started: other work on the
	// machine shows up in the times.
	LoadAvg string `json:"loadavg,omitempty"`
}

// Record is one phase of one epoch: the eager phase or the graph phase.
// Times are milliseconds per step unless the name says otherwise.
type Record struct {
	// The predecessor's fields.
	GraphEnabled bool    `json:"graph_enabled"` // the phase's steps were replayed from a graph
	StageCopyMS  float64 `json:"stage_copy_ms"` // median staging copy, device events on the staging stream
	CaptureMS    float64 `json:"capture_ms"`    // this epoch's capture of every slot, before the graph phase (0 in eager phases)
	ReplayMS     float64 `json:"replay_ms"`     // median replay, device events around the launch (0 in eager phases)
	Fallback     bool    `json:"fallback"`      // some steps of a graph phase ran eagerly

	Epoch          int     `json:"epoch"`
	Phase          string  `json:"phase"`                     // "eager" or "graph"
	Capture        string  `json:"capture,omitempty"`         // cold, pooled or reused (graph phases)
	FallbackReason string  `json:"fallback_reason,omitempty"` // capture_failed or device_error
	FallbackSteps  int     `json:"fallback_steps,omitempty"`
	Steps          int     `json:"steps"`
	StepMS         float64 `json:"step_ms"`        // median wall time per step
	StepP90MS      float64 `json:"step_p90_ms"`    // p90 wall time per step
	StepMeanMS     float64 `json:"step_mean_ms"`   // mean wall time per step
	DeviceStepMS   float64 `json:"device_step_ms"` // median step-end to step-end on the compute stream
	DeviceBusyMS   float64 `json:"device_busy_ms"` // median step work on the compute stream, copy wait excluded
	DeviceBusyP90  float64 `json:"device_busy_p90_ms"`
	ExposedStageMS float64 `json:"exposed_stage_ms"` // median wait of the compute stream for the copy
	ExposedP90MS   float64 `json:"exposed_stage_p90_ms"`
	StageCopyP90MS float64 `json:"stage_copy_p90_ms"`
	ProcessCPUMS   float64 `json:"process_cpu_ms"` // whole process's CPU per step (CLOCK_PROCESS_CPUTIME_ID)
	KernelsPerStep int     `json:"kernels_per_step,omitempty"`
	GraphNodes     int     `json:"graph_nodes,omitempty"`
}

// Summary aggregates a run's records: medians and p90s are over every
// measured step of every epoch of the mode. Milliseconds per step unless
// the name says otherwise.
type Summary struct {
	BatchSize int `json:"batch_size"`

	EagerStepMS     float64 `json:"eager_step_ms"` // median wall time per eager step
	EagerStepP90MS  float64 `json:"eager_step_p90_ms"`
	EagerStepMeanMS float64 `json:"eager_step_mean_ms"`
	GraphStepMS     float64 `json:"graph_step_ms"` // median wall time per replayed step
	GraphStepP90MS  float64 `json:"graph_step_p90_ms"`
	GraphStepMeanMS float64 `json:"graph_step_mean_ms"`
	// Speedup is EagerStepMS / GraphStepMS: above 1, graphs pay.
	Speedup float64 `json:"speedup"`

	EagerDeviceStepMS float64 `json:"eager_device_step_ms"` // median step period from compute-stream events
	GraphDeviceStepMS float64 `json:"graph_device_step_ms"`
	DeviceSpeedup     float64 `json:"device_speedup"` // EagerDeviceStepMS / GraphDeviceStepMS

	// DeviceBusyMS is the median time the compute stream spends on a
	// replayed step (its kernels back to back); EagerDeviceBusyMS is the
	// same span for an eager step, launch gaps included.
	DeviceBusyMS         float64 `json:"device_busy_ms"`
	DeviceBusyP90MS      float64 `json:"device_busy_p90_ms"`
	EagerDeviceBusyMS    float64 `json:"eager_device_busy_ms"`
	EagerDeviceBusyP90MS float64 `json:"eager_device_busy_p90_ms"`

	// EagerHostCPUMS and GraphHostCPUMS are the issuing thread's CPU per
	// step (CLOCK_THREAD_CPUTIME_ID), from the dispatch comparison: what
	// issuing a step costs the host. The process figures are the whole
	// process's (CLOCK_PROCESS_CPUTIME_ID) per step in the pipelined loop.
	EagerHostCPUMS    float64 `json:"eager_host_cpu_ms"`
	GraphHostCPUMS    float64 `json:"graph_host_cpu_ms"`
	EagerProcessCPUMS float64 `json:"eager_process_cpu_ms"`
	GraphProcessCPUMS float64 `json:"graph_process_cpu_ms"`

	StageCopyMS          float64 `json:"stage_copy_ms"` // median staging copy
	StageCopyP90MS       float64 `json:"stage_copy_p90_ms"`
	ReplayMS             float64 `json:"replay_ms"`        // median replay (= device_busy_ms)
	ExposedStageMS       float64 `json:"exposed_stage_ms"` // median copy wait on the compute stream, graph mode
	ExposedStageP90MS    float64 `json:"exposed_stage_p90_ms"`
	ExposedStageFraction float64 `json:"exposed_stage_fraction"` // mean copy wait / mean device step, graph mode

	CaptureColdMS   float64 `json:"capture_cold_ms"`   // the first epoch's capture (new pool)
	CapturePooledMS float64 `json:"capture_pooled_ms"` // median of the later epochs' pooled captures; 0 if none
	Captures        int     `json:"captures"`          // epochs that captured
	PooledCaptures  int     `json:"pooled_captures"`
	GraphsPerSetup  int     `json:"graphs_per_capture"` // one per staging input buffer

	KernelsPerStep int `json:"kernels_per_step"` // kernels one eager step enqueues
	GraphNodes     int `json:"graph_nodes"`      // nodes of the captured step graph

	// LaunchCostUS is the probe's eager launch cost per kernel;
	// StepLaunchCostUS estimates it from the steps instead:
	// (EagerStepMS - GraphStepMS) / KernelsPerStep, and is 0 when the
	// estimate is within noise (graph steps no faster than eager ones: a
	// negative estimate is stored as 0) or when a step was not measured.
	LaunchCostUS     float64 `json:"launch_cost_us"`
	StepLaunchCostUS float64 `json:"step_launch_cost_us"`

	// Dispatch is eager dispatch against replay of the same step outside
	// the pipeline (no staging): what graphs save on issuing alone.
	Dispatch *Dispatch `json:"dispatch,omitempty"`

	PoolBytes int64 `json:"pool_bytes"` // workspace the graph pool holds

	EagerSamplesPerSecond float64 `json:"eager_samples_per_second"`
	GraphSamplesPerSecond float64 `json:"graph_samples_per_second"`

	Fallbacks map[string]int `json:"fallbacks"` // graph-phase steps that ran eagerly, by reason
}

// Point is one batch size of a sweep.
type Point struct {
	BatchSize int      `json:"batch_size"`
	Summary   Summary  `json:"summary"`
	Records   []Record `json:"records"`
}

// Comparison is one figure per step measured in both modes, and how many
// times the graph step's figure the eager step's is.
type Comparison struct {
	Name  string
	Eager float64 // milliseconds per step
	Graph float64 // milliseconds per step
	Ratio float64 // Eager / Graph: above 1, graphs pay; 0 when either is not measured
}

// Comparisons returns the figures of s that the text summary sets side by
// side, eager against graphs: the pipelined loop's wall, device step,
// device busy and process CPU time, and with a dispatch comparison the
// step issued alone and its issuing thread's CPU.
func Comparisons(s Summary) []Comparison {
	c := func(name string, eager, graph float64) Comparison {
		return Comparison{Name: name, Eager: eager, Graph: graph, Ratio: ratio(eager, graph)}
	}
	out := []Comparison{
		c("wall, median", s.EagerStepMS, s.GraphStepMS),
		c("wall, p90", s.EagerStepP90MS, s.GraphStepP90MS),
		c("device step, median", s.EagerDeviceStepMS, s.GraphDeviceStepMS),
		c("device busy, median", s.EagerDeviceBusyMS, s.DeviceBusyMS),
		c("CPU, whole process", s.EagerProcessCPUMS, s.GraphProcessCPUMS),
	}
	if d := s.Dispatch; d != nil {
		out = append(out,
			c("issuing alone (no staging)", d.EagerMS, d.ReplayMS),
			c("  host CPU of the issuing thread", d.EagerHostCPUMS, d.ReplayHostCPUMS))
	}
	return out
}

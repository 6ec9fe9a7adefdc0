package telemetry

import (
	"runtime"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tolaria-ml/tolaria/graphs"
)

// Metric family names. Every family except MetricBuildInfo carries the
// labels LabelDevice and LabelWorker, on a sweep's metrics
// (NewTrialMetrics) LabelTrial too, and on a reinforcement-learning run's
// (NewAgentMetrics) LabelAgent.
const (
	MetricBuildInfo         = "tolaria_build_info"
	MetricGraphEnabled      = "tolaria_graph_enabled"
	MetricCaptureSeconds    = "tolaria_graph_capture_seconds"
	MetricReplaySeconds     = "tolaria_graph_replay_seconds"
	MetricStageCopySeconds  = "tolaria_graph_stage_copy_seconds"
	MetricReplaysTotal      = "tolaria_graph_replays_total"
	MetricFallbackTotal     = "tolaria_graph_fallback_total"
	MetricCapturesTotal     = "tolaria_graph_captures_total"
	MetricPoolReservedBytes = "tolaria_graph_pool_reserved_bytes"
	MetricExecUpdatesTotal  = "tolaria_graph_exec_updates_total"
	MetricPrefetchDisabled  = "tolaria_prefetch_to_device_disabled"
	MetricStepSeconds       = "tolaria_train_step_seconds"
	MetricSamplesTotal      = "tolaria_train_samples_total"
	MetricTrainLoss         = "tolaria_train_loss"
	MetricEvalAccuracy      = "tolaria_eval_accuracy"
	MetricTrainEpoch        = "tolaria_train_epoch"
	MetricDeviceMemoryBytes = "tolaria_device_memory_bytes"
	MetricLastStepTimestamp = "tolaria_train_last_step_timestamp_seconds"
	MetricCheckpointsTotal  = "tolaria_train_checkpoints_total"
	// MetricProcessFinished is the process's, without device or worker: 0
	// while its run goes on, 1 once the run has ended (whatever the
	// outcome) and the process serves its final metrics before it exits.
	// TolariaTargetDown stays silent for a target whose last process said 1.
	MetricProcessFinished = "tolaria_process_finished"
)

// Label names.
const (
	LabelDevice = "device"
	LabelWorker = "worker"
	LabelReason = "reason"
	LabelPooled = "pooled"
	LabelKind   = "kind"
	LabelTrial  = "trial"
	LabelState  = "state"
)

// FallbackOther is the reason label of a fallback whose reason is not one
// of graphs.Reasons, which keeps the label's cardinality bounded.
const FallbackOther = "other"

// FallbackReasons returns the values of tolaria_graph_fallback_total's
// reason label: the step engine's reasons (graphs.Reasons), then
// FallbackOther. The counter starts at zero for each of them so that
// increase() sees the first fallback.
func FallbackReasons() []string {
	return append(graphs.Reasons(), FallbackOther)
}

// MetricNames returns the name of every tolaria metric family, as an
// end-to-end test or a dashboard review expects to find them.
func MetricNames() []string {
	return []string{
		MetricBuildInfo, MetricGraphEnabled, MetricCaptureSeconds,
		MetricReplaySeconds, MetricStageCopySeconds, MetricReplaysTotal,
		MetricFallbackTotal, MetricCapturesTotal, MetricPoolReservedBytes,
		MetricExecUpdatesTotal, MetricPrefetchDisabled, MetricStepSeconds,
		MetricSamplesTotal, MetricTrainLoss, MetricEvalAccuracy,
		MetricTrainEpoch, MetricDeviceMemoryBytes, MetricLastStepTimestamp,
		MetricCheckpointsTotal,
	}
}

// Base bucket layouts in seconds. bucketsFor adds every threshold of the
// table to them, so alert and dashboard thresholds are bucket boundaries.
// They reach down to what was measured: CPU steps of about 0.25 ms, and
// cold captures of 0.6 to 2.7 ms on an H100 (docs/gpu-results.md).
var (
	captureBase   = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 4, 8, 15, 30, 60}
	replayBase    = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
	stageCopyBase = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1}
	stepBase      = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// bucketsFor returns base plus every threshold value the table holds for
// the histogram named metric, sorted and without duplicates.
func bucketsFor(metric string, base []float64) []float64 {
	b := slices.Clone(base)
	for _, t := range Thresholds() {
		if t.Metric == metric && (t.Condition == MeanAbove || t.Condition == QuantileAbove || t.Condition == AnyAbove) {
			b = append(b, t.Value)
		}
	}
	slices.Sort(b)
	return slices.Compact(b)
}

// Metrics holds tolaria's metrics on a registry of its own, together with
// the Go and process collectors and tolaria_build_info. One Metrics serves a
// whole job: each worker reports through its own Observer, told apart by
// the worker label.
type Metrics struct {
	reg *prometheus.Registry
	// perTrial adds LabelTrial to every family a job reports into.
	perTrial bool
	// perAgent adds LabelAgent to every family a job reports into.
	perAgent bool

	graphEnabled     *prometheus.GaugeVec
	captureSeconds   *prometheus.HistogramVec
	replaySeconds    *prometheus.HistogramVec
	stageCopySeconds *prometheus.HistogramVec
	replaysTotal     *prometheus.CounterVec
	fallbackTotal    *prometheus.CounterVec
	capturesTotal    *prometheus.CounterVec
	poolReserved     *prometheus.GaugeVec
	execUpdates      *prometheus.CounterVec
	prefetchDisabled *prometheus.GaugeVec
	stepSeconds      *prometheus.HistogramVec
	samplesTotal     *prometheus.CounterVec
	trainLoss        *prometheus.GaugeVec
	evalAccuracy     *prometheus.GaugeVec
	trainEpoch       *prometheus.GaugeVec
	deviceMemory     *prometheus.GaugeVec
	lastStep         *prometheus.GaugeVec
	checkpoints      *prometheus.CounterVec
	finished         prometheus.Gauge
}

// NewMetrics creates the metrics on a new registry. version is the build
// version reported by tolaria_build_info.
func NewMetrics(version string) *Metrics { return newMetrics(version, false, false) }

// NewTrialMetrics creates the metrics of a sweep: every family a job
// reports into carries LabelTrial besides the device and worker, so the
// trials of one coordinator keep series of their own (see
// Metrics.SeriesObserver). Sweep adds the sweep's own families.
func NewTrialMetrics(version string) *Metrics { return newMetrics(version, true, false) }

// NewAgentMetrics creates the metrics of a reinforcement-learning run:
// every family a job reports into carries LabelAgent besides the device
// and the worker (an agent's half: RLActor or RLLearner), so the graph
// families keep each agent's halves apart and join the run's own families
// (Metrics.RL) on the agent. Only the graph families are fed (see
// Metrics.SeriesObserver). Training's metrics (NewMetrics,
// NewTrialMetrics) have no agent label at all, so their series are those
// they always were.
func NewAgentMetrics(version string) *Metrics { return newMetrics(version, false, true) }

func newMetrics(version string, perTrial, perAgent bool) *Metrics {
	dw := []string{LabelDevice, LabelWorker}
	if perTrial {
		dw = append(dw, LabelTrial)
	}
	if perAgent {
		dw = append(dw, LabelAgent)
	}
	with := func(extra ...string) []string { return append(slices.Clone(dw), extra...) }
	gauge := func(name, help string, labels []string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, base []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name, Help: help, Buckets: bucketsFor(name, base),
		}, dw)
	}

	m := &Metrics{
		reg:              prometheus.NewRegistry(),
		perTrial:         perTrial,
		perAgent:         perAgent,
		graphEnabled:     gauge(MetricGraphEnabled, "1 while training steps are replayed from CUDA graphs, 0 while they run eagerly.", dw),
		captureSeconds:   histogram(MetricCaptureSeconds, "Time to capture and instantiate (or update) a step graph.", captureBase),
		replaySeconds:    histogram(MetricReplaySeconds, "Device time of one graph replay, measured with device events.", replayBase),
		stageCopySeconds: histogram(MetricStageCopySeconds, "Device time of one host-to-device batch copy on the staging stream, measured with device events.", stageCopyBase),
		replaysTotal:     counter(MetricReplaysTotal, "Graph replays.", dw),
		fallbackTotal:    counter(MetricFallbackTotal, "Training steps and evaluation batches run eagerly instead of replayed, by reason.", with(LabelReason)),
		capturesTotal:    counter(MetricCapturesTotal, "Graph captures; pooled=\"true\" when the shared graph pool served them without a new instantiation.", with(LabelPooled)),
		poolReserved:     gauge(MetricPoolReservedBytes, "Device memory held by the shared graph pool.", dw),
		execUpdates:      counter(MetricExecUpdatesTotal, "Graph executables updated in place from a new capture.", dw),
		prefetchDisabled: gauge(MetricPrefetchDisabled, "1 while the stagers' prefetch-to-device is switched off around a graph capture (staging copies then wait for the capture guard), 0 otherwise.", dw),
		stepSeconds:      histogram(MetricStepSeconds, "Wall time of one training step.", stepBase),
		samplesTotal:     counter(MetricSamplesTotal, "Training samples processed.", dw),
		trainLoss:        gauge(MetricTrainLoss, "Mean training loss over the last log interval.", dw),
		evalAccuracy:     gauge(MetricEvalAccuracy, "Test-set accuracy after the last epoch, from 0 to 1.", dw),
		trainEpoch:       gauge(MetricTrainEpoch, "Epoch now running, 1-based; 0 before the first.", dw),
		deviceMemory:     gauge(MetricDeviceMemoryBytes, "Device memory by kind (in_use, peak, limit, pinned).", with(LabelKind)),
		lastStep:         gauge(MetricLastStepTimestamp, "Unix time of the last completed training step (of the observer's creation before the first).", dw),
		checkpoints:      counter(MetricCheckpointsTotal, "Checkpoints written to the run directory (at epoch ends, every checkpoint_every steps and on a stop).", dw),
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricBuildInfo,
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	buildInfo.Set(1)
	m.finished = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricProcessFinished,
		Help: "1 once this process's run has ended, whatever the outcome, and it serves its final metrics before exiting; 0 while the run goes on.",
	})

	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo, m.finished,
		m.graphEnabled, m.captureSeconds, m.replaySeconds, m.stageCopySeconds,
		m.replaysTotal, m.fallbackTotal, m.capturesTotal, m.poolReserved,
		m.execUpdates, m.prefetchDisabled, m.stepSeconds, m.samplesTotal,
		m.trainLoss, m.evalAccuracy, m.trainEpoch, m.deviceMemory, m.lastStep,
		m.checkpoints,
	)
	return m
}

// Finished says that the process's run has ended (MetricProcessFinished),
// before it serves its final metrics and exits.
func (m *Metrics) Finished() { m.finished.Set(1) }

// Registry returns the registry holding every metric, for Serve or for
// registering more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

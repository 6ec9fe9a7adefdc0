package trainer

import "time"

// Observer receives the trainer's measurements as they happen. The trainer
// knows nothing of Prometheus; telemetry implements Observer for metrics,
// and the worker implements it by forwarding each call to the coordinator.
// Implementations must be safe for concurrent use and must not block.
// Durations are in seconds, sizes in bytes.
type Observer interface {
	// GraphEnabled reports whether steps are being replayed from graphs.
	GraphEnabled(on bool)
	// Captured reports one capture+instantiate (or update) of a step graph;
	// pooled is true when the shared graph pool served it without a new
	// instantiation.
	Captured(seconds float64, pooled bool)
	// Replayed reports one graph replay and its device time from events.
	Replayed(seconds float64)
	// StageCopied reports one host-to-device batch copy and its device time.
	StageCopied(seconds float64)
	// Fallback reports one step run eagerly instead of replayed, and why.
	Fallback(reason string)
	// ExecUpdated reports an executable updated in place from a new capture.
	ExecUpdated()
	// PoolReserved reports the bytes of device memory the graph pool holds.
	PoolReserved(bytes int64)
	// PrefetchToDeviceDisabled reports prefetch-to-device switched off
	// before a capture (true) and back on after it (false).
	PrefetchToDeviceDisabled(disabled bool)
	// Stepped reports one training step's wall time and its sample count.
	Stepped(seconds float64, samples int)
	// TrainLoss reports the mean training loss over the last log interval.
	TrainLoss(loss float64)
	// EvalAccuracy reports the test-set accuracy after an epoch.
	EvalAccuracy(acc float64)
	// Epoch reports the epoch now running (1-based).
	Epoch(epoch int)
	// DeviceMemory reports device memory by kind ("in_use", "peak",
	// "limit", "pinned").
	DeviceMemory(kind string, bytes int64)
	// Event records a notable event for the events log.
	Event(e Event)
}

// Event kinds written to the events log.
const (
	EventStart       = "start"
	EventCapture     = "capture"
	EventFallback    = "fallback"
	EventShapeChange = "shape_change"
	EventCheckpoint  = "checkpoint"
	EventResume      = "resume"
	EventEpoch       = "epoch"
	EventPrefetchOff = "prefetch_to_device_disabled"
	EventDone        = "done"
	EventError       = "error"
)

// Event is one line of the events log.
type Event struct {
	Time   time.Time      `json:"time"`
	Kind   string         `json:"kind"`
	Fields map[string]any `json:"fields,omitempty"`
}

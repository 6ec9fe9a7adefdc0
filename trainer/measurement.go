package trainer

import (
	"encoding/json"
	"fmt"
	"time"
)

// Measurement is one thing a run measured or noticed, passed to an
// Observer as a value of one of the types below. Durations are in seconds,
// sizes in bytes. A new kind is a type here, an entry in kinds (so that it
// crosses the worker protocol) and a case where it is shown (telemetry).
type Measurement interface {
	// Name is the kind's name on the wire, unique among the kinds.
	Name() string
}

// GraphEnabled reports whether steps are being replayed from graphs.
type GraphEnabled struct {
	On bool `json:"on"`
}

// Captured reports one capture+instantiate (or update) of a step graph;
// Pooled is true when the shared graph pool served it without a new
// instantiation.
type Captured struct {
	Seconds float64 `json:"seconds"`
	Pooled  bool    `json:"pooled"`
}

// Replayed reports one graph replay and its device time from events.
type Replayed struct {
	Seconds float64 `json:"seconds"`
}

// StageCopied reports one host-to-device batch copy and its device time.
type StageCopied struct {
	Seconds float64 `json:"seconds"`
}

// Fallback reports one step run eagerly instead of replayed, and why (one
// of the graphs.Reason values).
type Fallback struct {
	Reason string `json:"reason"`
}

// ExecUpdated reports an executable updated in place from a new capture.
type ExecUpdated struct{}

// PoolReserved reports the bytes of device memory the graph pool holds.
type PoolReserved struct {
	Bytes int64 `json:"bytes"`
}

// PrefetchDisabled reports prefetch to device switched off before a
// capture (Disabled true) and back on after it (false).
type PrefetchDisabled struct {
	Disabled bool `json:"disabled"`
}

// Stepped reports one training step's wall time and its sample count.
type Stepped struct {
	Seconds float64 `json:"seconds"`
	Samples int     `json:"samples"`
}

// TrainLoss reports the mean training loss over the last log interval
// (and over the epoch at its end).
type TrainLoss struct {
	Loss float64 `json:"loss"`
}

// EvalAccuracy reports the test-set accuracy after an epoch.
type EvalAccuracy struct {
	Accuracy float64 `json:"accuracy"`
}

// Epoch reports the epoch now running (1-based).
type Epoch struct {
	Epoch int `json:"epoch"`
}

// DeviceMemory reports device memory by what it counts: "in_use", "peak",
// "limit" or "pinned".
type DeviceMemory struct {
	What  string `json:"what"`
	Bytes int64  `json:"bytes"`
}

// TrainBatch reports the training-set indices of the batch with sequence
// number Seq (epoch Seq/steps per epoch), as a loader fills it. It is an
// audit of the data path (do the ranks of a sharded job see disjoint
// strides?), observed only when Config.ObserveBatches asks for it, so an
// ordinary run pays nothing for it and sends nothing per batch. Loaders
// fill in parallel: batches come concurrently and out of order, and one
// filled ahead of a stop is observed though it is never trained.
type TrainBatch struct {
	Seq     int   `json:"seq"`
	Indices []int `json:"indices"`
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
	EventMemoryBill  = "memory_bill"
)

// Event is one line of the events log: a notable event rather than a
// measurement, observed the same way.
type Event struct {
	Time   time.Time      `json:"time"`
	Kind   string         `json:"kind"`
	Fields map[string]any `json:"fields,omitempty"`
}

func (GraphEnabled) Name() string     { return "graph_enabled" }
func (Captured) Name() string         { return "captured" }
func (Replayed) Name() string         { return "replayed" }
func (StageCopied) Name() string      { return "stage_copied" }
func (Fallback) Name() string         { return "fallback" }
func (ExecUpdated) Name() string      { return "exec_updated" }
func (PoolReserved) Name() string     { return "pool_reserved" }
func (PrefetchDisabled) Name() string { return "prefetch_disabled" }
func (Stepped) Name() string          { return "stepped" }
func (TrainLoss) Name() string        { return "train_loss" }
func (EvalAccuracy) Name() string     { return "eval_accuracy" }
func (Epoch) Name() string            { return "epoch" }
func (DeviceMemory) Name() string     { return "device_memory" }
func (TrainBatch) Name() string       { return "train_batch" }
func (MemoryBill) Name() string       { return "memory_bill" }
func (Event) Name() string            { return "event" }

// kinds lists every kind of measurement: the wire codec knows these and
// no others, and tests iterate them.
func kinds() []kind {
	return []kind{
		kindOf[GraphEnabled](),
		kindOf[Captured](),
		kindOf[Replayed](),
		kindOf[StageCopied](),
		kindOf[Fallback](),
		kindOf[ExecUpdated](),
		kindOf[PoolReserved](),
		kindOf[PrefetchDisabled](),
		kindOf[Stepped](),
		kindOf[TrainLoss](),
		kindOf[EvalAccuracy](),
		kindOf[Epoch](),
		kindOf[DeviceMemory](),
		kindOf[TrainBatch](),
		kindOf[MemoryBill](),
		kindOf[Event](),
	}
}

// kind is one measurement type: its zero value, a test for it and its
// decoder.
type kind struct {
	zero   Measurement
	is     func(Measurement) bool
	decode func(json.RawMessage) (Measurement, error)
}

func kindOf[M Measurement]() kind {
	var zero M
	return kind{
		zero: zero,
		is:   func(m Measurement) bool { _, ok := m.(M); return ok },
		decode: func(body json.RawMessage) (Measurement, error) {
			var m M
			err := json.Unmarshal(body, &m)
			return m, err
		},
	}
}

// Measurements returns the zero value of every kind of measurement, for
// tests that must see each kind handled.
func Measurements() []Measurement {
	var all []Measurement
	for _, k := range kinds() {
		all = append(all, k.zero)
	}
	return all
}

// EncodeMeasurement encodes m for another process: its kind's name and
// its JSON. It refuses a measurement that is not of a listed kind (one
// DecodeMeasurement would not know) and one JSON cannot carry (a NaN).
func EncodeMeasurement(m Measurement) (name string, body json.RawMessage, err error) {
	if m == nil {
		return "", nil, fmt.Errorf("trainer: encoding a nil measurement")
	}
	listed := false
	for _, k := range kinds() {
		if k.is(m) {
			listed = true
			break
		}
	}
	if !listed {
		return "", nil, fmt.Errorf("trainer: %T (%q) is not a listed kind of measurement", m, m.Name())
	}
	if body, err = json.Marshal(m); err != nil {
		return "", nil, fmt.Errorf("trainer: encoding a %s measurement: %w", m.Name(), err)
	}
	return m.Name(), body, nil
}

// DecodeMeasurement decodes what EncodeMeasurement encoded.
func DecodeMeasurement(name string, body json.RawMessage) (Measurement, error) {
	for _, k := range kinds() {
		if k.zero.Name() == name {
			m, err := k.decode(body)
			if err != nil {
				return nil, fmt.Errorf("trainer: decoding a %s measurement: %w", name, err)
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("trainer: unknown measurement %q", name)
}

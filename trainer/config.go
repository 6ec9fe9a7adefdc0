// Package trainer runs tolaria's training loop: warm-up, capture of the
// whole iteration and of evaluation, replay through double-buffered
// staging, eager fallback with counted reasons, per-epoch evaluation,
// NaN/Inf detection and atomic checkpoints that make a resumed run end
// with the same parameters as an uninterrupted one.
package trainer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
)

// Config is everything a run needs. Library code takes it as a plain
// struct; flags and files are the command's business.
type Config struct {
	Spec nn.Spec
	// Net is the model as the job described it, as layers; zero for the
	// MLP of Spec given as such. A Net that is an MLP (Net.MLP) is trained
	// by the MLP step, and Spec must be that MLP; any other is trained by
	// nn.NetStep, and Spec must be its outline (nn.Arch.Outline: inputs,
	// classes and loss). The checkpoint records Net's name.
	Net       nn.Net
	Optimizer nn.Optimizer
	Epochs    int
	BatchSize int
	Seed      uint64
	Ragged    data.Ragged

	EnableGraphs     bool
	WarmupBatches    int  // eager steps before capture
	GraphPoolReuse   bool // use the process-wide pool rather than a private one
	PrefetchToDevice bool

	Slots    int // pinned ring slots
	Loaders  int // loader goroutines
	LogEvery int // steps between asynchronous metric reads

	RunDir string // checkpoints go here; "" disables checkpoints
	Resume bool   // continue from RunDir's checkpoint

	Rank, World int // stride shard of the training set

	// Train and Test are the examples: a Dataset of vectors and classes,
	// or a Text of token windows for a model that reads token ids (Spec's
	// Positions labels per example). Their Shape must be Spec's.
	Train, Test data.Examples

	// MaxSteps stops the run (with a checkpoint) after this many steps in
	// total; 0 means no limit. It lets tests interrupt runs at a chosen
	// point.
	MaxSteps int

	// CheckpointEvery saves a checkpoint every this many steps (counted
	// over the whole run) inside an epoch as well as at its end; 0: at
	// epoch ends and stops only. A mid-epoch checkpoint resumes as a stop's
	// does, to the same parameters as a run never stopped.
	CheckpointEvery int

	// ObserveBatches also observes a TrainBatch for every training batch
	// filled: an audit seam for tests, off in every run tolaria starts.
	ObserveBatches bool

	Logger   *slog.Logger
	Observer Observer
	Progress func(Progress)
	// Parker, when set, may park the run between steps (see Parker).
	Parker Parker
	// Advance, when set, is called on the training goroutine as the run's
	// work moves, with what moved (one of the Stage constants): after
	// setup, each training step, each evaluation batch, each capture and
	// each checkpoint written. A worker forwards it to its heartbeats
	// (worker.Conn.Advance), so a run wedged in a step is told from a slow
	// one: no stretch between two calls is longer than one step, one
	// evaluation batch, one capture or one checkpoint write.
	Advance func(stage string)
}

// What moved, in a call of Config.Advance.
const (
	StageSetup      = "setup"
	StageTrainStep  = "train step"
	StageEvalBatch  = "eval batch"
	StageCapture    = "capture"
	StageCheckpoint = "checkpoint"
)

// Progress is reported every LogEvery steps and at each epoch's end.
type Progress struct {
	Epoch, Epochs       int
	Step, StepsPerEpoch int // step within the epoch
	Loss                float64
	Accuracy            float64 // training accuracy over the interval
	SamplesPerSecond    float64
	EpochDone           bool
	TestAccuracy        float64 // set when EpochDone
	EpochSeconds        float64 // set when EpochDone
}

// ErrNonFinite is returned when the model diverges: the training loss, the
// test loss or a parameter becomes NaN or Inf. Its messages begin with
// which ("training loss is not finite ...", "test loss is not finite ...").
var ErrNonFinite = errors.New("loss is not finite")

// Validate reports the first invalid setting, naming it by its
// configuration key in a field.Error. NewPlan calls it once for a run.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate checks c and returns its steps per epoch.
func (c Config) validate() (steps int, err error) {
	if err := c.Spec.Validate(); err != nil {
		return 0, err
	}
	if err := c.checkNet(); err != nil {
		return 0, err
	}
	if err := c.CheckSettings(); err != nil {
		return 0, err
	}
	if c.Train == nil || c.Test == nil {
		return 0, fmt.Errorf("train and test datasets are required")
	}
	for _, d := range []data.Examples{c.Train, c.Test} {
		if err := fits(c.Spec, d.Shape()); err != nil {
			return 0, err
		}
	}
	if steps, err = StepsPerEpoch(c); err != nil {
		return 0, err
	}
	if total := c.Epochs * steps; c.EnableGraphs && c.WarmupBatches >= total {
		// Graphs are never silently off: a run that would only warm up is
		// refused rather than run eagerly.
		return 0, field.Errorf("graphs.warmup_batches", "%d covers the whole run (%d steps): no step would be captured; lower %s, train longer, or turn graphs off",
			c.WarmupBatches, total, field.Name("graphs.warmup_batches"))
	}
	return steps, nil
}

// CheckSettings checks the settings that need neither the model nor the
// data: the optimizer (nn.Optimizer.Validate), the schedule, staging and
// sharding. These bounds are written here once; a job checks its spec
// with them before it loads anything.
func (c Config) CheckSettings() error {
	if err := c.Optimizer.Validate(); err != nil {
		return err
	}
	switch {
	case c.Epochs < 1 || c.Epochs > 10000:
		return field.Errorf("schedule.epochs", "must be in 1..10000, got %d", c.Epochs)
	case c.BatchSize < 1 || c.BatchSize > 65536:
		return field.Errorf("schedule.batch_size", "must be in 1..65536, got %d", c.BatchSize)
	case c.LogEvery < 1:
		return field.Errorf("schedule.log_every", "must be at least 1, got %d", c.LogEvery)
	case c.MaxSteps < 0:
		return field.Errorf("schedule.max_steps", "must be >= 0, got %d", c.MaxSteps)
	case c.CheckpointEvery < 0:
		return field.Errorf("schedule.checkpoint_every", "must be >= 0 (0: at each epoch's end only), got %d", c.CheckpointEvery)
	case c.WarmupBatches < 0 || c.WarmupBatches > 1000:
		return field.Errorf("graphs.warmup_batches", "must be in 0..1000, got %d", c.WarmupBatches)
	case c.Slots < 2 || c.Slots > 64:
		return field.Errorf("staging.slots", "must be in 2..64, got %d", c.Slots)
	case c.Loaders < 1 || c.Loaders > 64:
		return field.Errorf("data.loaders", "must be in 1..64, got %d", c.Loaders)
	case c.World < 1:
		return field.Errorf("data.world", "must be at least 1, got %d", c.World)
	case c.Rank < 0 || c.Rank >= c.World:
		return field.Errorf("data.rank", "must be in 0..%d, below %s (%d), got %d", c.World-1, field.Name("data.world"), c.World, c.Rank)
	case c.Resume && c.RunDir == "":
		return field.Errorf("resume", "needs %s pointing at the run to resume", field.Name("run_dir"))
	}
	if _, err := data.ParseRagged(string(c.Ragged)); err != nil {
		return field.Errorf("data.ragged", "%w", err)
	}
	return nil
}

// fits checks that a batch laid out for spec (nn.NewLayout) holds the
// examples of a dataset of shape d: as many x values, as many labels, and
// a logit per class.
func fits(spec nn.Spec, d data.Shape) error {
	switch {
	case d.Inputs != spec.Inputs:
		what := "features"
		if d.Tokens {
			what = "token ids per example"
		}
		return fmt.Errorf("dataset %s has %d %s but the model takes %d inputs", d.Name, d.Inputs, what, spec.Inputs)
	case d.Classes != spec.Outputs:
		return fmt.Errorf("dataset %s has %d classes but the model has %d outputs", d.Name, d.Classes, spec.Outputs)
	case d.Positions != spec.Positions:
		return fmt.Errorf("dataset %s has %d labels per example but the model %s scores %d", d.Name, d.Labels(), spec, max(1, spec.Positions))
	case d.Positions > 0 && spec.Loss != nn.LossCrossEntropy:
		return fmt.Errorf("dataset %s has a label per position, which only %s scores, not %s", d.Name, nn.LossCrossEntropy, spec.Loss)
	}
	return nil
}

// checkNet checks Net against Spec: a Net that is an MLP must be Spec's
// MLP; any other Net is trained by nn.NetStep, and Spec must be its
// outline (nn.Arch.Outline), which lays out the batches.
func (c Config) checkNet() error {
	if len(c.Net.Layers) == 0 {
		return nil
	}
	arch, err := c.Net.Resolve()
	if err != nil {
		return err
	}
	want := arch.Outline()
	if mlp, err := c.Net.MLP(); err == nil {
		want = mlp
	}
	if want.String() != c.Spec.String() {
		return fmt.Errorf("the layers describe %s but the step was given %s", want, c.Spec)
	}
	return nil
}

// netArch is the resolved Net when the run's model is a net that is not
// an MLP (nn.NetStep trains it); ok is false for an MLP.
func (c Config) netArch() (a nn.Arch, ok bool) { return netArch(c.Net) }

func netArch(net nn.Net) (a nn.Arch, ok bool) {
	if len(net.Layers) == 0 {
		return nn.Arch{}, false
	}
	if _, err := net.MLP(); err == nil {
		return nn.Arch{}, false
	}
	a, err := net.Resolve()
	return a, err == nil
}

// ModelName is the name of the run's model that a checkpoint and the
// summary record: Net's canonical name (nn.Net.String) when the model was
// described as layers, else Spec's.
func (c Config) ModelName() string {
	if len(c.Net.Layers) > 0 {
		return c.Net.String()
	}
	return c.Spec.String()
}

// Summary is the outcome of a run; the command writes it as summary.json.
// After a resume it describes the whole run: the counters, the epoch times
// and the last epoch's training metrics carry on from the checkpoint. Only
// SamplesPerSecond and WallSeconds are of the last invocation alone, and
// the time of an epoch stopped and resumed is that of its resumed part.
type Summary struct {
	Device             string         `json:"device"`
	DeviceDescription  string         `json:"device_description"`
	Model              string         `json:"model"`
	GraphEnabled       bool           `json:"graph_enabled"`
	Epochs             int            `json:"epochs"`
	Steps              int            `json:"steps"`
	GraphReplays       int            `json:"graph_replays"`
	EagerSteps         int            `json:"eager_steps"`
	EvalReplays        int            `json:"eval_replays"`       // evaluation batches run by replaying a graph
	EvalEagerBatches   int            `json:"eval_eager_batches"` // evaluation batches run eagerly
	Fallbacks          map[string]int `json:"fallbacks"`
	Captures           int            `json:"captures"`
	CaptureSeconds     float64        `json:"capture_seconds"`
	CaptureColdSeconds float64        `json:"capture_cold_seconds"`
	CapturePooled      int            `json:"captures_pooled"`
	TrainLoss          float64        `json:"train_loss"`
	TrainAccuracy      float64        `json:"train_accuracy"`
	TestAccuracy       float64        `json:"test_accuracy"` // cross-entropy models; 0 for MSE
	TestLoss           float64        `json:"test_loss"`
	SamplesPerSecond   float64        `json:"samples_per_second"` // this invocation's training samples over its loop's wall time, eval included
	EpochSeconds       []float64      `json:"epoch_seconds"`
	WallSeconds        float64        `json:"wall_seconds"`
	ParamsSHA256       string         `json:"params_sha256"`
	ResumedFromStep    int            `json:"resumed_from_step,omitempty"`
	Interrupted        bool           `json:"interrupted,omitempty"`
	PrefetchDisabled   bool           `json:"prefetch_to_device_disabled,omitempty"` // prefetch to device was on and switched off around a capture
	StageCopies        uint64         `json:"stage_copies"`
	Finished           time.Time      `json:"finished"`
}

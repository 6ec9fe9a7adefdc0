package bench

import (
	"fmt"
	"slices"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// Preset names a benchmark workload.
type Preset string

const (
	// PresetMLP is the default model: 784-256-128-10, GELU, cross-entropy,
	// AdamW with clipping, batch 64.
	PresetMLP Preset = "mlp"
	// PresetTiny is the predecessor's workload: one Linear 16->2 layer at
	// batch 8, where launch cost dominates the step.
	PresetTiny Preset = "tiny"
	// PresetCNN is examples/cnn.yaml's model (CNN): two pooled convolution
	// blocks, a residual block and a classifier with a hidden layer, batch 64.
	PresetCNN Preset = "cnn"
	// PresetTransformer is examples/char-transformer.yaml's model
	// (Transformer): 64 byte ids, two pre-norm blocks of width 64 with 4
	// heads, logits per position, batch 32, on synthetic token windows.
	PresetTransformer Preset = "transformer"
	// PresetTinyTransformer is a transformer small enough that launch cost
	// dominates its step (TinyTransformer), batch 8.
	PresetTinyTransformer Preset = "tiny-transformer"
)

// Presets lists the presets in the order the command documents them.
func Presets() []Preset {
	return []Preset{PresetMLP, PresetTiny, PresetCNN, PresetTransformer, PresetTinyTransformer}
}

// CNN is examples/cnn.yaml's model (nn.ExampleCNN).
func CNN() nn.Net { return nn.ExampleCNN() }

// Transformer is examples/char-transformer.yaml's model: a byte-level
// (vocabulary 256) transformer over 64 positions, embedding and learned
// positions of width 64, two pre-norm blocks with 4 heads and an MLP of
// 256, a final layer norm and the per-position head.
func Transformer() nn.Net { return TransformerOver(64) }

// TransformerOver is Transformer over context positions instead of 64.
func TransformerOver(context int) nn.Net { return charTransformer(context, 64, 2, 4, 256) }

// TinyTransformer is Transformer shrunk until its kernels are tiny: 16
// positions, width 16, one block with 2 heads and an MLP of 64.
func TinyTransformer() nn.Net { return charTransformer(16, 16, 1, 2, 64) }

// charTransformer is a byte-level transformer over context positions.
func charTransformer(context, dim, blocks, heads, mlp int) nn.Net {
	layers := []nn.LayerSpec{nn.Embedding(256, dim), nn.Positional()}
	for range blocks {
		layers = append(layers, nn.TransformerBlock(heads, mlp))
	}
	return nn.Net{Input: nn.Shape{context}, Layers: append(layers, nn.LayerNorm(), nn.LMHead()), Loss: nn.LossCrossEntropy}
}

// netWorkload is net's outline and net at batch size b.
func netWorkload(p Preset, net nn.Net, opt nn.Optimizer, b int) (Workload, error) {
	arch, err := net.Resolve()
	if err != nil {
		return Workload{}, fmt.Errorf("preset %s: %w", p, err)
	}
	return Workload{Spec: arch.Outline(), Net: &net, Optimizer: opt, BatchSize: b}, nil
}

// Workload is a preset's model and default batch size. A model described
// as layers (Net set) trains through nn.NetStep, its Spec then being the
// net's outline (inputs, outputs, loss), which sizes the batches.
type Workload struct {
	Spec      nn.Spec
	Net       *nn.Net
	Optimizer nn.Optimizer
	BatchSize int
}

// Name is the model's description: the Spec's, or the net's.
func (w Workload) Name() string {
	if w.Net != nil {
		return w.Net.String()
	}
	return w.Spec.String()
}

// Workload returns the preset's model and default batch size.
func (p Preset) Workload() (Workload, error) {
	opt := nn.DefaultOptimizer()
	switch p {
	case PresetMLP:
		return Workload{Spec: nn.Spec{Inputs: 784, Hidden: []int{256, 128}, Outputs: 10, Act: device.ActGELU,
			Loss: nn.LossCrossEntropy}, Optimizer: opt, BatchSize: 64}, nil
	case PresetTiny:
		return Workload{Spec: nn.Spec{Inputs: 16, Outputs: 2, Act: device.ActGELU, Loss: nn.LossCrossEntropy},
			Optimizer: opt, BatchSize: 8}, nil
	case PresetCNN:
		return netWorkload(p, CNN(), opt, 64)
	case PresetTransformer:
		return netWorkload(p, Transformer(), opt, 32)
	case PresetTinyTransformer:
		return netWorkload(p, TinyTransformer(), opt, 8)
	}
	return Workload{}, fmt.Errorf("preset: unknown preset %q: use mlp, tiny, cnn, transformer or tiny-transformer", p)
}

// Defaults for the zero fields of Config.
const (
	DefaultEpochs        = 3
	DefaultWarmupBatches = 2
	// DefaultStepsMLP and DefaultStepsTiny are the measured steps per
	// phase: about a second of an mlp phase on a laptop core, and enough
	// tiny steps (a few µs each) that a phase outlasts scheduler noise.
	DefaultStepsMLP  = 100
	DefaultStepsTiny = 5000
	DefaultStepsCNN  = 20
	// DefaultStepsTinyTransformer: its step is well under a millisecond.
	DefaultStepsTinyTransformer = 500
	// DefaultSettleSteps: more than the five steps the host runs ahead
	// of the device with two staging buffers.
	DefaultSettleSteps  = 6
	DefaultProbeKernels = 1000
	DefaultProbeRepeats = 15
	// DefaultDecodeTokens is the measured decode tokens of each mode for
	// a token model: a decode step is a small forward pass at batch 1.
	DefaultDecodeTokens = 256
)

// Config is one benchmark run. Zero numeric fields take the defaults above
// (use WithDefaults); library callers validate with Validate.
type Config struct {
	Preset Preset
	// BatchSize overrides the preset's batch size when positive.
	BatchSize int
	// Hidden overrides the preset's hidden layers when HiddenSet is true
	// (an empty Hidden then means no hidden layer).
	Hidden    []int
	HiddenSet bool
	// Epochs is the number of epochs: each builds a new trainer-like setup
	// (new parameters, new stager) unless ReuseTrainer is set, and leases
	// its workspace and executables from one graphs.Pool shared by the run.
	Epochs int
	// WarmupBatches are the eager steps a new setup runs before anything
	// is measured or captured, as the trainer does before capture.
	WarmupBatches int
	// Steps is the number of measured steps per phase (eager, then graph)
	// in each epoch.
	Steps int
	// SettleSteps run before each block of measured steps, in the
	// block's mode, without being measured, so that the pipeline holds
	// only that mode's steps when measurement starts.
	SettleSteps int
	// ReuseTrainer keeps one setup for every epoch: one capture in the
	// first epoch, replayed in all of them.
	ReuseTrainer bool
	// ProbeKernels and ProbeRepeats size the launch-cost probe: that many
	// no-op-size kernels issued eagerly versus one replay of a graph of
	// them, repeated and the median taken. ProbeKernels < 0 skips it.
	ProbeKernels int
	ProbeRepeats int
	// DecodeTokens is the measured tokens of each mode (eager, replayed)
	// of the decode step, measured once per report for a token model at
	// the report's batch size, after its training-step phases (see
	// Decode). Negative skips it; other models have no decode step.
	DecodeTokens int
	// SweepBatchSizes, when set, repeats the run at each batch size.
	SweepBatchSizes []int
	// Seed makes the parameters and the synthetic batches reproducible.
	Seed uint64
	// Progress, when set, receives one line per finished phase and run.
	Progress func(msg string) `json:"-"`
}

// WithDefaults fills in the zero fields.
func (c Config) WithDefaults() Config {
	if c.Preset == "" {
		c.Preset = PresetMLP
	}
	if c.Epochs == 0 {
		c.Epochs = DefaultEpochs
	}
	if c.Steps == 0 {
		switch c.Preset {
		case PresetTiny:
			c.Steps = DefaultStepsTiny
		case PresetCNN, PresetTransformer:
			c.Steps = DefaultStepsCNN
		case PresetTinyTransformer:
			c.Steps = DefaultStepsTinyTransformer
		default:
			c.Steps = DefaultStepsMLP
		}
	}
	if c.SettleSteps == 0 {
		c.SettleSteps = DefaultSettleSteps
	}
	if c.ProbeKernels == 0 {
		c.ProbeKernels = DefaultProbeKernels
	}
	if c.ProbeRepeats == 0 {
		c.ProbeRepeats = DefaultProbeRepeats
	}
	if c.DecodeTokens == 0 {
		c.DecodeTokens = DefaultDecodeTokens
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// Limits on the configuration, to keep a run's memory and time bounded.
const (
	MaxBatchSize = 65536
	MinSteps     = 2 * StepWindow
	// MinDecodeTokens is one block of decode tokens.
	MinDecodeTokens = decodeBlockTokens
	MaxSteps        = 100000
	MaxEpochs       = 1000
)

// Validate reports the first invalid field by its flag name.
func (c Config) Validate() error {
	if _, err := c.Preset.Workload(); err != nil {
		return err
	}
	switch {
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return fmt.Errorf("batch-size: must be in 1..%d (0 keeps the preset's), got %d", MaxBatchSize, c.BatchSize)
	case c.Epochs < 1 || c.Epochs > MaxEpochs:
		return fmt.Errorf("epochs: must be in 1..%d, got %d", MaxEpochs, c.Epochs)
	case c.WarmupBatches < 0 || c.WarmupBatches > 1000:
		return fmt.Errorf("warmup-batches: must be in 0..1000, got %d", c.WarmupBatches)
	case c.Steps < MinSteps || c.Steps > MaxSteps:
		return fmt.Errorf("steps: must be in %d..%d, got %d", MinSteps, MaxSteps, c.Steps)
	case c.SettleSteps < 1 || c.SettleSteps > 1000:
		return fmt.Errorf("settle-steps: must be in 1..1000, got %d", c.SettleSteps)
	case c.ProbeKernels > 1000000:
		return fmt.Errorf("probe-kernels: must be at most 1000000 (negative skips the probe), got %d", c.ProbeKernels)
	case c.ProbeKernels > 0 && (c.ProbeRepeats < 1 || c.ProbeRepeats > 1000):
		return fmt.Errorf("probe-repeats: must be in 1..1000, got %d", c.ProbeRepeats)
	case c.DecodeTokens >= 0 && (c.DecodeTokens < MinDecodeTokens || c.DecodeTokens > MaxSteps):
		return fmt.Errorf("decode-tokens: must be in %d..%d (negative skips the decode step), got %d",
			MinDecodeTokens, MaxSteps, c.DecodeTokens)
	}
	for _, b := range c.SweepBatchSizes {
		if b < 1 || b > MaxBatchSize {
			return fmt.Errorf("sweep-batch-sizes: each batch size must be in 1..%d, got %d", MaxBatchSize, b)
		}
	}
	if w, _ := c.Preset.Workload(); c.HiddenSet && w.Net != nil {
		return fmt.Errorf("hidden: the %s preset is described as layers; hidden widths are for mlp and tiny", c.Preset)
	}
	w, err := c.workload(0)
	if err != nil {
		return err
	}
	if w.Net != nil {
		return nil
	}
	if err := w.Spec.Validate(); err != nil {
		return fmt.Errorf("hidden: %w", err)
	}
	return nil
}

// workload is the model to run at batch size b (0: the configured one).
func (c Config) workload(b int) (Workload, error) {
	w, err := c.Preset.Workload()
	if err != nil {
		return Workload{}, err
	}
	if c.HiddenSet {
		w.Spec.Hidden = slices.Clone(c.Hidden)
	}
	if c.BatchSize > 0 {
		w.BatchSize = c.BatchSize
	}
	if b > 0 {
		w.BatchSize = b
	}
	return w, nil
}

// batchSizes lists the batch sizes a run measures, in increasing order,
// without duplicates: the sweep, or the configured batch size alone.
func (c Config) batchSizes() []int {
	w, _ := c.workload(0)
	if len(c.SweepBatchSizes) == 0 {
		return []int{w.BatchSize}
	}
	bs := slices.Clone(c.SweepBatchSizes)
	slices.Sort(bs)
	return slices.Compact(bs)
}

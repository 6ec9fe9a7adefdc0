// Package job turns a plain, serialisable job specification into a
// training run: it validates the specification, loads the data, resolves
// the trainer's plan and runs it on a device. The coordinator plans a Spec
// before it writes anything, then runs that plan in process or sends the
// Spec to a worker, which validates and plans it once more on its side.
package job

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Spec is a training job as the user configured it. Each field's key
// tag is its configuration key, a path of sections (optimizer.lr is lr
// under optimizer:); its flat tag, where it has one, is the key's
// spelling before the sections, which files may still use for a release
// (with a warning) and which names its flag and TOLARIA_* variable. The
// JSON names, what a worker receives, are the flat ones. The model is
// Layers on an input of shape Input (see nn.Net), or, when Layers is
// empty, the MLP of Hidden and Activation.
type Spec struct {
	Device           string  `json:"device" key:"device"`
	EnableGraphs     bool    `json:"enable_graphs" key:"graphs.enabled" flat:"enable_graphs"`
	Epochs           int     `json:"epochs" key:"schedule.epochs" flat:"epochs"`
	BatchSize        int     `json:"batch_size" key:"schedule.batch_size" flat:"batch_size"`
	LR               float64 `json:"lr" key:"optimizer.lr" flat:"lr"`
	Optimizer        string  `json:"optimizer" key:"optimizer.kind" flat:"optimizer"`
	Momentum         float64 `json:"momentum" key:"optimizer.momentum" flat:"momentum"`
	WeightDecay      float64 `json:"weight_decay" key:"optimizer.weight_decay" flat:"weight_decay"`
	ClipNorm         float64 `json:"clip_norm" key:"optimizer.clip_norm" flat:"clip_norm"`
	WarmupSteps      int     `json:"lr_warmup_steps" key:"optimizer.warmup_steps" flat:"lr_warmup_steps"`
	Seed             uint64  `json:"seed" key:"seed"`
	Dataset          string  `json:"dataset" key:"data.dataset" flat:"dataset"`
	DataDir          string  `json:"data_dir" key:"data.dir" flat:"data_dir"`
	SyntheticSize    int     `json:"synthetic_size" key:"data.synthetic_size" flat:"synthetic_size"`
	Context          int     `json:"context,omitempty" key:"data.context,omitempty" flat:"context"`
	Hidden           []int   `json:"hidden" key:"model.hidden"`
	Activation       string  `json:"activation" key:"model.activation"`
	Loss             string  `json:"loss" key:"model.loss"`
	Input            []int   `json:"input,omitempty" key:"model.input,omitempty"`
	Layers           Layers  `json:"layers,omitempty" key:"model.layers,omitempty"`
	WarmupBatches    int     `json:"warmup_batches" key:"graphs.warmup_batches" flat:"warmup_batches"`
	GraphPoolReuse   bool    `json:"graph_pool_reuse" key:"graphs.pool_reuse" flat:"graph_pool_reuse"`
	PrefetchToDevice bool    `json:"prefetch_to_device" key:"staging.prefetch_to_device" flat:"prefetch_to_device"`
	Ragged           string  `json:"ragged" key:"data.ragged" flat:"ragged"`
	Slots            int     `json:"staging_slots" key:"staging.slots" flat:"staging_slots"`
	Loaders          int     `json:"loaders" key:"data.loaders" flat:"loaders"`
	LogEvery         int     `json:"log_every" key:"schedule.log_every" flat:"log_every"`
	RunDir           string  `json:"run_dir" key:"run_dir"`
	Resume           bool    `json:"resume" key:"resume"`
	Rank             int     `json:"rank" key:"data.rank" flat:"rank"`
	World            int     `json:"world" key:"data.world" flat:"world"`
	MaxSteps         int     `json:"max_steps" key:"schedule.max_steps" flat:"max_steps"`
	// CheckpointEvery saves a checkpoint every this many steps inside an
	// epoch too; 0: at each epoch's end and at a stop only.
	CheckpointEvery int `json:"checkpoint_every,omitempty" key:"schedule.checkpoint_every,omitempty" flat:"checkpoint_every"`
	// CPUThreads is how many threads the CPU device's kernels use; 0
	// means the cores Go may use (GOMAXPROCS).
	CPUThreads int `json:"cpu_threads,omitempty" key:"cpu_threads,omitempty"`
	// SlowStageCopy is a test-only option: the CPU device pauses this many
	// milliseconds in every host-to-device copy. Only builds with -tags
	// testhooks accept a non-zero value (TestHooks).
	SlowStageCopyMS float64 `json:"slow_stage_copy_ms,omitempty" key:"staging.slow_copy_ms,omitempty" flat:"slow_stage_copy_ms"`
}

// Default returns the defaults: the 784-256-128-10 MLP with AdamW on
// Fashion-MNIST, graphs off unless asked for.
func Default() Spec {
	o := nn.DefaultOptimizer()
	return Spec{
		Device: "auto", Epochs: 10, BatchSize: 64, LR: o.LR, Optimizer: string(o.Kind), Momentum: o.Momentum,
		WeightDecay: o.WeightDecay, ClipNorm: o.ClipNorm, WarmupSteps: 200, Seed: 1, Dataset: "fashion-mnist",
		DataDir: data.DefaultFashionMNISTDir, SyntheticSize: 4096, Hidden: []int{256, 128}, Activation: "gelu",
		Loss: string(nn.LossCrossEntropy), WarmupBatches: 2, GraphPoolReuse: true, Ragged: string(data.RaggedPad),
		Slots: 4, Loaders: 2, LogEvery: 50, World: 1,
	}
}

// Validate checks every field, naming it by its configuration key in a
// field.Error. A process validates a spec once: the coordinator when it
// resolves the configuration, a worker when it receives the spec. The
// bounds of what the trainer runs (the schedule, the optimizer, staging)
// are the trainer's and nn's (trainer.Config.CheckSettings), written
// there once; those checked here are the job's own.
func (s Spec) Validate() error {
	if err := CheckDevice(s.Device); err != nil {
		return err
	}
	switch {
	case s.Dataset != "fashion-mnist" && s.Dataset != "synthetic" && s.Dataset != "text":
		return field.Errorf("data.dataset", "must be fashion-mnist, synthetic or text, got %q", s.Dataset)
	case s.Dataset == "synthetic" && (s.SyntheticSize < 20 || s.SyntheticSize > 1<<22):
		return field.Errorf("data.synthetic_size", "must be in 20..4194304, got %d", s.SyntheticSize)
	case s.Context < 0 || s.Context > maxContext:
		return field.Errorf("data.context", "must be in 0..%d (0: %d), got %d", maxContext, data.DefaultTextContext, s.Context)
	case s.Dataset == "text" && s.DataDir == "":
		return field.Errorf("data.dir", "must name a text file or a directory of them for dataset text, e.g. %s", data.DefaultFortunesDir)
	case len(s.Hidden) > 16:
		return field.Errorf("model.hidden", "at most 16 layers, got %d", len(s.Hidden))
	case s.CPUThreads < 0 || s.CPUThreads > 1024:
		return field.Errorf("cpu_threads", "must be in 0..1024 (0: the cores Go may use), got %d", s.CPUThreads)
	case !(s.SlowStageCopyMS >= 0 && s.SlowStageCopyMS <= 10000):
		return field.Errorf("staging.slow_copy_ms", "must be in 0..10000, got %g", s.SlowStageCopyMS)
	case s.SlowStageCopyMS != 0 && !TestHooks:
		return field.Errorf("staging.slow_copy_ms", "is a test switch, and this build has none (tolaria's tests build with -tags testhooks); remove it")
	}
	if err := s.trainerSettings().CheckSettings(); err != nil {
		return err
	}
	if err := nn.CheckHidden(s.Hidden); err != nil {
		return err
	}
	if _, err := nn.ParseActivation(s.Activation); err != nil {
		return field.Errorf("model.activation", "%w", err)
	}
	if err := nn.CheckLoss(nn.Loss(s.Loss)); err != nil {
		return err
	}
	if err := s.validateModel(); err != nil {
		return err
	}
	return s.validateTokens()
}

// CheckDevice checks a device's name (the key device): what every
// command's --device takes.
func CheckDevice(device string) error {
	if device != "auto" && device != "cpu" && device != "cuda" {
		return field.Errorf("device", "must be auto, cpu or cuda, got %q", device)
	}
	return nil
}

// maxContext bounds context: a window is one example of a batch record.
const maxContext = 1 << 16

// validateTokens pairs models that read token ids with the dataset that
// serves them: dataset text is windows of byte ids with the next byte the
// target at each position, which only a model starting with embedding
// reads; fashion-mnist and synthetic are feature vectors, which no such
// model reads. Shapes (the model's input T against context, its vocab)
// are checked when the spec is planned (nn.Arch.FitsTokens).
func (s Spec) validateTokens() error {
	tokens := len(s.Layers) > 0 && s.Layers[0].Kind == nn.KindEmbedding
	switch {
	case s.Dataset == "text" && len(s.Layers) == 0:
		return field.Errorf("model.layers", "is required for dataset text: its examples are windows of %s byte ids with the next byte the target at each position, "+
			"which the %s MLP cannot read; give layers starting with embedding: {vocab: %d, ...} and ending in lm_head (e.g. examples/char-transformer.yaml)",
			field.Name("data.context"), field.Name("model.hidden"), data.TextVocab)
	case s.Dataset == "text" && !tokens:
		return field.Errorf("model.layers", "starts with %s, but dataset text serves byte ids, which only a model starting with embedding reads; "+
			"start it with embedding: {vocab: %d, dim: ...} (e.g. examples/char-transformer.yaml)", s.Layers[0].Kind, data.TextVocab)
	case s.Dataset != "text" && tokens:
		return field.Errorf("data.dataset", "%s serves feature vectors, but %s starts with embedding, a model of token ids; train it on dataset text, "+
			"or start the model with a layer that reads features", s.Dataset, field.Name("model.layers"))
	case s.Dataset == "text" && s.Context != 0 && len(s.Input) == 1 && s.Input[0] != s.Context:
		return field.Errorf("data.context", "is %d, but %s is [%d]: the model reads %d token ids per example; give both the same length, or leave %s out to take the model's",
			s.Context, field.Name("model.input"), s.Input[0], s.Input[0], field.Name("data.context"))
	}
	return nil
}

func (s Spec) optimizer() nn.Optimizer {
	o := nn.DefaultOptimizer()
	o.Kind, o.LR, o.Momentum, o.WeightDecay, o.ClipNorm = nn.OptimizerKind(s.Optimizer), s.LR, s.Momentum, s.WeightDecay, s.ClipNorm
	o.WarmupSteps = s.WarmupSteps
	return o
}

// LoadData loads the train and test sets the spec names: Fashion-MNIST
// or synthetic vectors normalised with the training set's statistics
// (*data.Dataset), or text windows of byte ids as they are (*data.Text),
// its validation text the test set.
func (s Spec) LoadData() (train, test data.Examples, err error) { return s.LoadDataAdvancing(nil) }

// DataKey names the data the spec loads: specs with the same key load the
// same examples (LoadData), so a caller checking several specs may load
// once for them all.
func (s Spec) DataKey() string {
	switch s.Dataset {
	case "synthetic":
		return fmt.Sprint(s.Dataset, "\x00", s.SyntheticSize, "\x00", s.Seed)
	case "text":
		// A text's windows are its context's.
		return fmt.Sprint(s.Dataset, "\x00", s.DataDir, "\x00", s.TextConfig().Context)
	}
	return fmt.Sprint(s.Dataset, "\x00", s.DataDir)
}

// StageDataLoad names the data load's progress (see LoadDataAdvancing).
const StageDataLoad = "data load"

// LoadDataAdvancing is LoadData calling advance, when it is set, with
// StageDataLoad as the load moves: every MiB or so of a Fashion-MNIST
// file read, each set built and the normalisation done. A worker shows
// with it that a load of seconds is progress (worker.Conn.Advance).
func (s Spec) LoadDataAdvancing(advance func(stage string)) (train, test data.Examples, err error) {
	if s.Dataset == "text" {
		tr, te, err := s.LoadText()
		if err != nil {
			return nil, nil, err
		}
		if advance != nil {
			advance(StageDataLoad)
		}
		return tr, te, nil
	}
	tr, te, err := s.loadVectors(advance)
	if err != nil {
		return nil, nil, err
	}
	return tr, te, nil
}

// loadVectors loads fashion-mnist or synthetic, normalised.
func (s Spec) loadVectors(advance func(stage string)) (train, test *data.Dataset, err error) {
	var tick func()
	if advance != nil {
		tick = func() { advance(StageDataLoad) }
	}
	switch s.Dataset {
	case "synthetic":
		all, err := data.Synthetic(data.SyntheticConfig{N: s.SyntheticSize + s.SyntheticSize/5, Features: 64, Classes: 10, Seed: s.Seed, Noise: 2})
		if err != nil {
			return nil, nil, err
		}
		if train, test, err = all.Split(s.SyntheticSize); err != nil {
			return nil, nil, err
		}
	default:
		if train, err = data.LoadFashionMNISTAdvancing(s.DataDir, data.SplitTrain, tick); err != nil {
			return nil, nil, err
		}
		if test, err = data.LoadFashionMNISTAdvancing(s.DataDir, data.SplitTest, tick); err != nil {
			return nil, nil, err
		}
	}
	data.Normalize(train, train, test)
	if tick != nil {
		tick()
	}
	return train, test, nil
}

// TextConfig is the text dataset the spec names: data_dir's corpus in
// windows of context+1 bytes, its last tenth held out for validation.
// Context 0 takes the model's: model.input's T when it is given, else
// data.DefaultTextContext.
func (s Spec) TextConfig() data.TextConfig {
	return data.TextConfig{Path: s.DataDir, Context: s.textContext()}
}

// textContext is context, or model.input's length when context is 0.
func (s Spec) textContext() int {
	if s.Context == 0 && len(s.Input) == 1 {
		return s.Input[0]
	}
	return s.Context
}

// TokenNet is the spec's token model as its run trained it, without
// loading its data: model.layers on an input of the run's context (see
// TextConfig), checked against a byte vocabulary's [T, 256] logits. A
// spec of another dataset, or one without layers, is refused naming the
// key (data.dataset's refusal wraps nn.ErrNotTokenModel).
func (s Spec) TokenNet() (nn.Net, error) {
	if s.Dataset != "text" {
		return nn.Net{}, field.Errorf("data.dataset", "is %s, not text, so the run's model is %w; only a model trained on dataset text can be sampled (e.g. a run of examples/char-transformer.yaml)",
			s.Dataset, nn.ErrNotTokenModel)
	}
	t := s.textContext()
	if t == 0 {
		t = data.DefaultTextContext
	}
	_, net, err := s.model(data.Shape{Name: "text", Inputs: t, Positions: t, Classes: data.TextVocab, Tokens: true})
	return net, err
}

// DefaultDataDir is where dataset's files are when data_dir is not given:
// the fortunes for text, else Fashion-MNIST's directory (Default's).
func DefaultDataDir(dataset string) string {
	if dataset == "text" {
		return data.DefaultFortunesDir
	}
	return data.DefaultFashionMNISTDir
}

// LoadText loads the training and validation texts of dataset text (see
// data.LoadText), for a trainer that consumes sequences.
func (s Spec) LoadText() (train, valid *data.Text, err error) {
	if s.Dataset != "text" {
		return nil, nil, field.Errorf("data.dataset", "is %q, not text", s.Dataset)
	}
	return data.LoadText(s.TextConfig())
}

// Options are the parts of a run that are not configuration: where it
// reports.
type Options struct {
	Logger   *slog.Logger
	Observer trainer.Observer
	Progress func(trainer.Progress)
	// Parker, when set, may park the run between steps (trainer.Parker).
	Parker trainer.Parker
	// Advance, when set, is called as the run's work moves (see
	// trainer.Config.Advance).
	Advance func(stage string)
}

// Plan is a job resolved once: its spec and the trainer's plan for it
// (the configuration with the schedule set, the steps per epoch, and the
// verified checkpoint of a resumed run). Run takes it as it is.
type Plan struct {
	Spec    Spec
	Trainer *trainer.Plan
}

// Plan resolves a spec that Validate accepted, on the data it names
// (loaded with LoadData, or handed over by a caller that loaded it): the
// spec is not validated again.
func (s Spec) Plan(train, test data.Examples) (*Plan, error) {
	cfg, err := s.config(train, test)
	if err != nil {
		return nil, err
	}
	tp, err := trainer.NewPlan(cfg)
	if err != nil {
		return nil, err
	}
	return &Plan{Spec: s, Trainer: tp}, nil
}

// InRunDir returns a fresh job's plan with its run directory renamed (see
// trainer.Plan.InRunDir).
func (p *Plan) InRunDir(dir string) (*Plan, error) {
	tp, err := p.Trainer.InRunDir(dir)
	if err != nil {
		return nil, err
	}
	q := *p
	q.Spec.RunDir, q.Trainer = dir, tp
	return &q, nil
}

// Run trains the plan on dev. shared is the process's state (see
// trainer.Shared).
func (p *Plan) Run(ctx context.Context, dev device.Device, shared *trainer.Shared, opts Options) (trainer.Summary, error) {
	return p.Trainer.WithOutputs(opts.Logger, opts.Observer, opts.Progress, opts.Advance).WithParker(opts.Parker).Run(ctx, dev, shared)
}

// Config builds and validates the trainer configuration for already
// loaded data.
func (s Spec) Config(train, test data.Examples, opts Options) (trainer.Config, error) {
	cfg, err := s.config(train, test)
	if err != nil {
		return cfg, err
	}
	cfg.Logger, cfg.Observer, cfg.Progress, cfg.Advance, cfg.Parker = opts.Logger, opts.Observer, opts.Progress, opts.Advance, opts.Parker
	return cfg, cfg.Validate()
}

// config builds the trainer configuration, with the schedule's length.
func (s Spec) config(train, test data.Examples) (trainer.Config, error) {
	spec, net, err := s.model(train.Shape())
	if err != nil {
		return trainer.Config{}, err
	}
	cfg := s.trainerSettings()
	cfg.Spec, cfg.Net, cfg.Train, cfg.Test = spec, net, train, test
	steps, err := trainer.StepsPerEpoch(cfg)
	if err != nil {
		return cfg, err
	}
	cfg.Optimizer.TotalSteps = steps * s.Epochs
	cfg.Optimizer.WarmupSteps = min(cfg.Optimizer.WarmupSteps, cfg.Optimizer.TotalSteps/2)
	return cfg, nil
}

// trainerSettings is the trainer configuration of the spec's settings,
// without the model and the data.
func (s Spec) trainerSettings() trainer.Config {
	return trainer.Config{
		Optimizer: s.optimizer(), Epochs: s.Epochs, BatchSize: s.BatchSize, Seed: s.Seed, Ragged: data.Ragged(s.Ragged),
		EnableGraphs: s.EnableGraphs, WarmupBatches: s.WarmupBatches, GraphPoolReuse: s.GraphPoolReuse,
		PrefetchToDevice: s.PrefetchToDevice, Slots: s.Slots, Loaders: s.Loaders, LogEvery: s.LogEvery,
		RunDir: s.RunDir, Resume: s.Resume, Rank: s.Rank, World: s.World,
		MaxSteps: s.MaxSteps, CheckpointEvery: s.CheckpointEvery,
	}
}

// Model describes the spec's model for logs, e.g. "784-256-128-10", or
// its layers' canonical name (nn.Net.String).
func (s Spec) Model(inputs, outputs int) string {
	if len(s.Layers) > 0 {
		input := s.Input
		if len(input) == 0 {
			input = []int{inputs}
		}
		return s.net(input).String()
	}
	parts := []string{fmt.Sprint(inputs)}
	for _, h := range s.Hidden {
		parts = append(parts, fmt.Sprint(h))
	}
	return strings.Join(append(parts, fmt.Sprint(outputs)), "-")
}

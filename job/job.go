// Package job turns a plain, serialisable job specification into a
// training run: it validates the specification, loads the data, builds the
// trainer's configuration and runs it on a device. The coordinator sends a
// Spec to a worker; the worker calls Run.
package job

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// Spec is a training job as the user configured it. Field names are the
// configuration keys (flags use dashes, files and TOLARIA_* variables
// underscores).
type Spec struct {
	Device           string  `json:"device" yaml:"device"`
	EnableGraphs     bool    `json:"enable_graphs" yaml:"enable_graphs"`
	Epochs           int     `json:"epochs" yaml:"epochs"`
	BatchSize        int     `json:"batch_size" yaml:"batch_size"`
	LR               float64 `json:"lr" yaml:"lr"`
	Optimizer        string  `json:"optimizer" yaml:"optimizer"`
	Momentum         float64 `json:"momentum" yaml:"momentum"`
	WeightDecay      float64 `json:"weight_decay" yaml:"weight_decay"`
	ClipNorm         float64 `json:"clip_norm" yaml:"clip_norm"`
	WarmupSteps      int     `json:"lr_warmup_steps" yaml:"lr_warmup_steps"`
	Seed             uint64  `json:"seed" yaml:"seed"`
	Dataset          string  `json:"dataset" yaml:"dataset"`
	DataDir          string  `json:"data_dir" yaml:"data_dir"`
	SyntheticSize    int     `json:"synthetic_size" yaml:"synthetic_size"`
	Hidden           []int   `json:"hidden" yaml:"hidden"`
	Activation       string  `json:"activation" yaml:"activation"`
	Loss             string  `json:"loss" yaml:"loss"`
	WarmupBatches    int     `json:"warmup_batches" yaml:"warmup_batches"`
	GraphPoolReuse   bool    `json:"graph_pool_reuse" yaml:"graph_pool_reuse"`
	PrefetchToDevice bool    `json:"prefetch_to_device" yaml:"prefetch_to_device"`
	Ragged           string  `json:"ragged" yaml:"ragged"`
	Slots            int     `json:"staging_slots" yaml:"staging_slots"`
	Loaders          int     `json:"loaders" yaml:"loaders"`
	LogEvery         int     `json:"log_every" yaml:"log_every"`
	RunDir           string  `json:"run_dir" yaml:"run_dir"`
	Resume           bool    `json:"resume" yaml:"resume"`
	Rank             int     `json:"rank" yaml:"rank"`
	World            int     `json:"world" yaml:"world"`
	MaxSteps         int     `json:"max_steps" yaml:"max_steps"`
	// SlowStageCopy is a test-only option: the CPU device pauses this many
	// milliseconds in every host-to-device copy.
	SlowStageCopyMS float64 `json:"slow_stage_copy_ms,omitempty" yaml:"slow_stage_copy_ms,omitempty"`
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

// Validate checks every field, naming it in the error.
func (s Spec) Validate() error {
	switch {
	case s.Device != "auto" && s.Device != "cpu" && s.Device != "cuda":
		return fmt.Errorf("device: must be auto, cpu or cuda, got %q", s.Device)
	case s.Epochs < 1 || s.Epochs > 10000:
		return fmt.Errorf("epochs: must be in 1..10000, got %d", s.Epochs)
	case s.BatchSize < 1 || s.BatchSize > 65536:
		return fmt.Errorf("batch-size: must be in 1..65536, got %d", s.BatchSize)
	case !(s.LR > 0 && s.LR <= 10):
		return fmt.Errorf("lr: must be in (0, 10], got %g", s.LR)
	case s.Optimizer != string(nn.SGD) && s.Optimizer != string(nn.AdamW):
		return fmt.Errorf("optimizer: must be sgd or adamw, got %q", s.Optimizer)
	case s.Dataset != "fashion-mnist" && s.Dataset != "synthetic":
		return fmt.Errorf("dataset: must be fashion-mnist or synthetic, got %q", s.Dataset)
	case s.Dataset == "synthetic" && (s.SyntheticSize < 20 || s.SyntheticSize > 1<<22):
		return fmt.Errorf("synthetic-size: must be in 20..4194304, got %d", s.SyntheticSize)
	case len(s.Hidden) > 16:
		return fmt.Errorf("hidden: at most 16 layers, got %d", len(s.Hidden))
	case s.WarmupBatches < 0 || s.WarmupBatches > 1000:
		return fmt.Errorf("warmup-batches: must be in 0..1000, got %d", s.WarmupBatches)
	case s.WarmupSteps < 0:
		return fmt.Errorf("lr-warmup-steps: must be >= 0, got %d", s.WarmupSteps)
	case s.Slots < 2 || s.Slots > 64:
		return fmt.Errorf("staging-slots: must be in 2..64, got %d", s.Slots)
	case s.Loaders < 1 || s.Loaders > 64:
		return fmt.Errorf("loaders: must be in 1..64, got %d", s.Loaders)
	case s.LogEvery < 1:
		return fmt.Errorf("log-every: must be at least 1, got %d", s.LogEvery)
	case s.World < 1 || s.Rank < 0 || s.Rank >= s.World:
		return fmt.Errorf("rank/world: need 0 <= rank < world, got rank %d world %d", s.Rank, s.World)
	case s.Resume && s.RunDir == "":
		return fmt.Errorf("resume: needs --run-dir pointing at the run to resume")
	case s.MaxSteps < 0:
		return fmt.Errorf("max-steps: must be >= 0, got %d", s.MaxSteps)
	case !(s.SlowStageCopyMS >= 0 && s.SlowStageCopyMS <= 10000):
		return fmt.Errorf("slow-stage-copy-ms: must be in 0..10000, got %g", s.SlowStageCopyMS)
	}
	for i, h := range s.Hidden {
		if h < 1 || h > 65536 {
			return fmt.Errorf("hidden: layer %d must have 1..65536 units, got %d", i+1, h)
		}
	}
	if _, err := nn.ParseActivation(s.Activation); err != nil {
		return fmt.Errorf("activation: %w", err)
	}
	if s.Loss != string(nn.LossCrossEntropy) && s.Loss != string(nn.LossMSE) {
		return fmt.Errorf("loss: must be cross_entropy or mse, got %q", s.Loss)
	}
	if _, err := data.ParseRagged(s.Ragged); err != nil {
		return fmt.Errorf("ragged: must be pad, drop or eager, got %q", s.Ragged)
	}
	o := s.optimizer()
	if err := o.Validate(); err != nil {
		return err
	}
	return nil
}

func (s Spec) optimizer() nn.Optimizer {
	o := nn.DefaultOptimizer()
	o.Kind, o.LR, o.Momentum, o.WeightDecay, o.ClipNorm = nn.OptimizerKind(s.Optimizer), s.LR, s.Momentum, s.WeightDecay, s.ClipNorm
	o.WarmupSteps = s.WarmupSteps
	return o
}

// LoadData loads the train and test sets the spec names, normalised with
// the training set's statistics.
func (s Spec) LoadData() (train, test *data.Dataset, err error) {
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
		if train, err = data.LoadFashionMNIST(s.DataDir, data.SplitTrain); err != nil {
			return nil, nil, err
		}
		if test, err = data.LoadFashionMNIST(s.DataDir, data.SplitTest); err != nil {
			return nil, nil, err
		}
	}
	data.Normalize(train, train, test)
	return train, test, nil
}

// Options are the parts of a run that are not configuration.
type Options struct {
	Logger   *slog.Logger
	Observer trainer.Observer
	Progress func(trainer.Progress)
	// Data, when set, supplies the spec's data instead of Spec.LoadData:
	// a caller that has loaded and checked it already passes it on.
	Data func(Spec) (train, test *data.Dataset, err error)
}

// Config builds the trainer configuration for already loaded data.
func (s Spec) Config(train, test *data.Dataset, opts Options) (trainer.Config, error) {
	act, _ := nn.ParseActivation(s.Activation)
	cfg := trainer.Config{
		Spec:      nn.Spec{Inputs: train.Features, Hidden: s.Hidden, Outputs: train.Classes, Act: act, Loss: nn.Loss(s.Loss)},
		Optimizer: s.optimizer(), Epochs: s.Epochs, BatchSize: s.BatchSize, Seed: s.Seed, Ragged: data.Ragged(s.Ragged),
		EnableGraphs: s.EnableGraphs, WarmupBatches: s.WarmupBatches, GraphPoolReuse: s.GraphPoolReuse,
		PrefetchToDevice: s.PrefetchToDevice, Slots: s.Slots, Loaders: s.Loaders, LogEvery: s.LogEvery,
		RunDir: s.RunDir, Resume: s.Resume, Rank: s.Rank, World: s.World, Train: train, Test: test,
		MaxSteps: s.MaxSteps, Logger: opts.Logger, Observer: opts.Observer, Progress: opts.Progress,
	}
	steps, err := trainer.StepsPerEpoch(cfg)
	if err != nil {
		return cfg, err
	}
	cfg.Optimizer.TotalSteps = steps * s.Epochs
	cfg.Optimizer.WarmupSteps = min(cfg.Optimizer.WarmupSteps, cfg.Optimizer.TotalSteps/2)
	return cfg, cfg.Validate()
}

// Run loads the data and trains on dev. pool is the process-wide graph pool.
func Run(ctx context.Context, s Spec, dev device.Device, pool *graphs.Pool, opts Options) (trainer.Summary, error) {
	if err := s.Validate(); err != nil {
		return trainer.Summary{}, err
	}
	load := opts.Data
	if load == nil {
		load = Spec.LoadData
	}
	train, test, err := load(s)
	if err != nil {
		return trainer.Summary{}, err
	}
	cfg, err := s.Config(train, test, opts)
	if err != nil {
		return trainer.Summary{}, err
	}
	return trainer.Run(ctx, dev, pool, cfg)
}

// Model describes the spec's model for logs, e.g. "784-256-128-10".
func (s Spec) Model(inputs, outputs int) string {
	parts := []string{fmt.Sprint(inputs)}
	for _, h := range s.Hidden {
		parts = append(parts, fmt.Sprint(h))
	}
	return strings.Join(append(parts, fmt.Sprint(outputs)), "-")
}

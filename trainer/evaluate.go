package trainer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/staging"
)

// EvalConfig is the evaluation of one stride shard of a dataset with a
// checkpoint's parameters: examples Shard, Shard+Shards, Shard+2*Shards,
// ... of Data, in that order. An example is a vector with one class, or
// for a token model (Spec.Positions T > 0) a text window with a target at
// each of its T positions.
type EvalConfig struct {
	Spec nn.Spec
	// Net is the model as layers, as in Config: zero for an MLP given as
	// Spec; a net that is not an MLP is evaluated by nn.NetStep, Spec its
	// outline.
	Net       nn.Net
	BatchSize int
	Data      data.Examples
	Params    []float32 // the model's parameters (Checkpoint.Parameters)
	Running   []float32 // a net's running state (Checkpoint.RunningState); nil for an MLP
	Shard     int
	Shards    int
	Loaders   int // loader goroutines; 0 means 1
	Logger    *slog.Logger
	// AfterBatch, when set, is called after each batch with the number of
	// batches scored so far (the worker's test-only fault switch).
	AfterBatch func(batches int)
	// Advance, when set, is called as the work moves: once set up, then
	// after each batch (see Config.Advance).
	Advance func(stage string)
	// TopK, when positive, keeps each label's TopK most probable classes
	// (Scored.Top); at most the model's outputs, and only for a
	// cross-entropy model (an MSE model's outputs are no logits).
	TopK int
}

// Validate checks the configuration.
func (c EvalConfig) Validate() error {
	switch {
	case c.Data == nil:
		return errors.New("trainer: evaluation: no data")
	case c.BatchSize < 1:
		return fmt.Errorf("trainer: evaluation: batch size %d; want at least 1", c.BatchSize)
	case c.Shards < 1 || c.Shard < 0 || c.Shard >= c.Shards:
		return fmt.Errorf("trainer: evaluation: shard %d of %d; want 0 <= shard < shards", c.Shard, c.Shards)
	case c.Shards > c.Data.Len():
		return fmt.Errorf("trainer: evaluation: %d shards for %d examples; want at most one shard per example", c.Shards, c.Data.Len())
	case c.paramCount() != len(c.Params):
		return fmt.Errorf("%w: %d parameters for the model %s, which has %d", ErrCheckpoint, len(c.Params), c.modelName(), c.paramCount())
	case c.TopK < 0 || c.TopK > c.Spec.Outputs:
		return fmt.Errorf("trainer: evaluation: top_k %d; want 0 to the model's %d outputs", c.TopK, c.Spec.Outputs)
	case c.TopK > 0 && c.Spec.Loss == nn.LossMSE:
		return errors.New("trainer: evaluation: top_k needs a cross-entropy model: an MSE model's outputs are no logits")
	case c.runningLen() != len(c.Running):
		return fmt.Errorf("%w: %d running-state values for the model %s, which has %d", ErrCheckpoint, len(c.Running), c.modelName(), c.runningLen())
	}
	if err := fits(c.Spec, c.Data.Shape()); err != nil {
		return fmt.Errorf("trainer: evaluation: the model %s does not fit: %w", c.Spec, err)
	}
	if err := c.Spec.Validate(); err != nil {
		return err
	}
	return Config{Spec: c.Spec, Net: c.Net}.checkNet()
}

func (c EvalConfig) paramCount() int {
	if a, ok := netArch(c.Net); ok {
		return a.Params
	}
	return c.Spec.ParamCount()
}

func (c EvalConfig) runningLen() int {
	if a, ok := netArch(c.Net); ok {
		return a.RunningLen()
	}
	return 0
}

func (c EvalConfig) modelName() string { return Config{Spec: c.Spec, Net: c.Net}.ModelName() }

// EvalTopK is the top-k probabilities an evaluation of c's model can keep
// when k are asked for (EvalConfig.TopK): k capped at the model's
// outputs, and none for an MSE model, whose outputs are no logits.
func (c Config) EvalTopK(k int) int {
	if c.Spec.Loss == nn.LossMSE {
		return 0
	}
	return max(0, min(k, c.Spec.Outputs))
}

// Scored is one label's evaluation: an example's, or for a token model
// one position's of a window.
type Scored struct {
	// Index is the example's index in the dataset; for a token model of T
	// positions, window*T + position (ScoredIndex), so a window's T
	// records follow each other in position order.
	Index     int
	Label     int
	Predicted int
	Loss      float64
	// Top is, with EvalConfig.TopK k, the k most probable classes, most
	// probable first (of equal probabilities the lower class first), so
	// Top[0].Class is Predicted; nil without.
	Top []ClassProb
}

// ClassProb is a class and the probability the model gives it: the
// softmax of the row's logits, computed on the host in float64 as the
// loss is (nn.Spec.Score), so a label's probability is exp(-Loss) to
// rounding.
type ClassProb struct {
	Class int
	Prob  float64
}

// topK fills dst (its length k) with the row's k most probable classes,
// most probable first, ties to the lower class.
func topK(logits []float32, dst []ClassProb) {
	top := logits[0]
	for _, v := range logits {
		top = max(top, v)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - float64(top))
	}
	n := 0
	for j, v := range logits {
		// Insert j after every kept class of a logit at least v: a lower
		// class of an equal logit stays first.
		at := n
		for at > 0 && logits[dst[at-1].Class] < v {
			at--
		}
		if at >= len(dst) {
			continue
		}
		n = min(n+1, len(dst))
		copy(dst[at+1:n], dst[at:n-1])
		dst[at] = ClassProb{Class: j}
	}
	for i := range dst {
		dst[i].Prob = math.Exp(float64(logits[dst[i].Class])-float64(top)) / sum
	}
}

// ScoredIndex is the Index of the label at position of example, with
// positions labels per example (0 or 1: one label per example).
func ScoredIndex(example, position, positions int) int {
	return example*max(1, positions) + position
}

// Parameters are the model parameters the checkpoint holds.
func (h Checkpoint) Parameters() []float32 { return h.params }

// State is the optimizer state (and any further buffers of the
// parameters' size the writer saved) the checkpoint holds.
func (h Checkpoint) State() [][]float32 { return h.state }

// Evaluate scores every example of cfg's shard on dev: the forward pass
// runs on the device (batches staged as training stages them), the logits
// come back to the host, and each row's prediction and loss are computed
// there in float64 (nn.Spec.Score), so that a merge can sum the losses in
// example order whatever the number of shards. A token model's window
// gives a record per position, each scored from that position's logits
// against the byte after it. The result is in the shard's order, a
// window's positions in order. shared is the process's state.
func Evaluate(ctx context.Context, dev device.Device, shared *Shared, cfg EvalConfig) (_ []Scored, err error) {
	if shared == nil {
		return nil, ErrNoShared
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	release, err := shared.claim(dev)
	if err != nil {
		return nil, err
	}
	defer release()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	layout := nn.NewLayout(cfg.Spec, cfg.BatchSize)
	src, err := newSource(cfg.Data, layout, cfg.Spec, nil, 0, false, data.RaggedPad, cfg.Shard, cfg.Shards, 1)
	if err != nil {
		return nil, err
	}
	batches, err := src.plan(0)
	if err != nil {
		return nil, err
	}
	var cleanup []func() error
	defer func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanup[i]())
		}
	}()
	step, last, err := evalStep(dev, cfg, &cleanup)
	if err != nil {
		return nil, err
	}
	compute, err := dev.NewStream()
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, compute.Destroy)
	sc := staging.Config{BatchLen: layout.Len, Slots: evalSlots, Buffers: evalBuffers, Loaders: max(cfg.Loaders, 1),
		Guard: shared.Guard(), Logger: cfg.Logger.With("stager", "eval")}
	stager, err := staging.New(dev, sc, src)
	if err != nil {
		return nil, err
	}
	stager.Start(ctx)
	cleanup = append(cleanup, stager.Stop)
	advance := func(stage string) {
		if cfg.Advance != nil {
			cfg.Advance(stage)
		}
	}
	advance(StageSetup)
	labels := newLabeller(cfg.Data, cfg.BatchSize)
	per := cfg.Spec.Outputs
	logits := make([]float32, cfg.BatchSize*labels.perExample*per)
	rows := (cfg.Data.Len() - cfg.Shard + cfg.Shards - 1) / cfg.Shards * labels.perExample
	out := make([]Scored, 0, rows)
	// Every row's top k lies in one array, allocated once.
	tops := make([]ClassProb, rows*cfg.TopK)
	for n := 1; ; n++ {
		b, err := stager.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if err := compute.Wait(b.CopyDone); err != nil {
			return nil, err
		}
		if err := step.Eval(compute, layout.Views(stager.Input(b.K))); err != nil {
			return nil, err
		}
		if err := compute.Synchronize(); err != nil {
			return nil, err
		}
		if err := dev.Download(logits, last); err != nil {
			return nil, err
		}
		if err := compute.Record(stager.StepDone(b.K)); err != nil {
			return nil, err
		}
		stager.Release(b)
		indices := batches[b.Step].Indices
		y, err := labels.of(indices)
		if err != nil {
			return nil, err
		}
		for k := range len(indices) * labels.perExample {
			label := int(y[k])
			pred, loss := cfg.Spec.Score(logits[k*per:(k+1)*per], label)
			i := indices[k/labels.perExample]
			sc := Scored{Index: ScoredIndex(i, k%labels.perExample, cfg.Spec.Positions), Label: label, Predicted: pred, Loss: loss}
			if cfg.TopK > 0 {
				sc.Top = tops[len(out)*cfg.TopK : (len(out)+1)*cfg.TopK : (len(out)+1)*cfg.TopK]
				topK(logits[k*per:(k+1)*per], sc.Top)
			}
			out = append(out, sc)
		}
		advance(StageEvalBatch)
		if cfg.AfterBatch != nil {
			cfg.AfterBatch(n)
		}
	}
	return out, nil
}

// labeller reads a batch's labels on the host, as the loaders wrote them
// into the staged record: one per example, or one per position.
type labeller struct {
	ds         data.Examples
	perExample int
	x, y, mask []float32 // one batch's, reused
}

func newLabeller(ds data.Examples, batch int) *labeller {
	sh := ds.Shape()
	return &labeller{ds: ds, perExample: sh.Labels(), x: make([]float32, batch*sh.Inputs),
		y: make([]float32, batch*sh.Labels()), mask: make([]float32, batch)}
}

// of returns the labels of the examples indices, row after row.
func (l *labeller) of(indices []int) ([]float32, error) {
	if _, err := l.ds.Fill(indices, l.x, l.y, l.mask); err != nil {
		return nil, err
	}
	return l.y[:len(indices)*l.perExample], nil
}

// evalStep puts the parameters (and a net's running state) and a
// workspace for one batch on the device, and returns the step and where
// its evaluation leaves the logits; cleanup receives what frees them.
func evalStep(dev device.Device, cfg EvalConfig, cleanup *[]func() error) (nn.Stepper, device.Buffer, error) {
	opt := evalOptimizer()
	arch, isNet := netArch(cfg.Net)
	var m *nn.Model
	var err error
	if isNet {
		m, err = nn.NewNetModel(dev, arch, opt, 0)
	} else {
		m, err = nn.NewModel(dev, cfg.Spec, opt, 0)
	}
	if err != nil {
		return nil, device.Buffer{}, err
	}
	*cleanup = append(*cleanup, m.Free)
	if err := dev.Upload(m.Params, cfg.Params); err != nil {
		return nil, device.Buffer{}, err
	}
	if err := m.RestoreRunning(cfg.Running); err != nil {
		return nil, device.Buffer{}, err
	}
	sizes := nn.WorkspaceSizes(cfg.Spec, cfg.BatchSize)
	if isNet {
		if sizes, err = nn.NetWorkspaceSizes(arch, cfg.BatchSize); err != nil {
			return nil, device.Buffer{}, err
		}
	}
	var bufs []device.Buffer
	for _, n := range sizes {
		b, err := dev.Alloc(n)
		if err != nil {
			return nil, device.Buffer{}, err
		}
		*cleanup = append(*cleanup, func() error { return dev.Free(b) })
		bufs = append(bufs, b)
	}
	var step nn.Stepper
	var logits device.Buffer
	if isNet {
		st, err := nn.NewNetStep(m, bufs, cfg.BatchSize)
		if err != nil {
			return nil, device.Buffer{}, err
		}
		step, logits = st, st.Logits()
	} else {
		ws, err := nn.NewWorkspace(cfg.Spec, bufs)
		if err != nil {
			return nil, device.Buffer{}, err
		}
		step, logits = &nn.Step{M: m, W: ws, Batch: cfg.BatchSize}, ws.Z[len(ws.Z)-1]
	}
	// The statistics accumulate in place; start them from zero.
	_, eval := step.Accumulators()
	if err := dev.Upload(eval, make([]float32, device.StatsLen)); err != nil {
		return nil, device.Buffer{}, err
	}
	return step, logits, nil
}

// CheckpointForNet loads the checkpoint at path for inference with net
// alone, as sampling needs it: the file intact (its digest), written for
// this model, holding its parameter count. The data, optimizer and
// schedule it was trained with are not checked: none of them changes
// what the parameters compute.
func CheckpointForNet(net nn.Net, path string) (Checkpoint, error) {
	arch, err := net.Resolve()
	if err != nil {
		return Checkpoint{}, err
	}
	ck, err := loadCheckpoint(path, useRead)
	if err != nil {
		return Checkpoint{}, err
	}
	if ck.Model != net.String() {
		return Checkpoint{}, fmt.Errorf("%w: %s: it was written for model %s, not %s", ErrCheckpoint, path, ck.Model, net.String())
	}
	if ck.Params != arch.Params {
		return Checkpoint{}, fmt.Errorf("%w: %s: it holds %d parameters but the model %s has %d; it was not written by tolaria for this model",
			ErrCheckpoint, path, ck.Params, net.String(), arch.Params)
	}
	return ck, nil
}

// CheckpointForEval loads the checkpoint at path for scoring with cfg's
// model: the file intact (its digest), written for this model, holding its
// parameters and running state. The data, optimizer and schedule it was
// trained with are not checked: none of them changes what the parameters
// compute, and scoring a model on other data than it trained on is an
// evaluation's to allow (and to say so in its result).
func CheckpointForEval(cfg Config, path string) (Checkpoint, error) {
	ck, err := loadCheckpoint(path, useRead)
	if err != nil {
		return Checkpoint{}, err
	}
	want := cfg.headerFor("")
	switch {
	case ck.Model != want.Model:
		return Checkpoint{}, fmt.Errorf("%w: %s: it was written for model %s, not %s", ErrCheckpoint, path, ck.Model, want.Model)
	case ck.Params != want.Params || ck.Running != want.Running:
		return Checkpoint{}, fmt.Errorf("%w: %s: it holds %d parameters and %d running-state values but the model %s has %d and %d; it was not written by tolaria for this model",
			ErrCheckpoint, path, ck.Params, ck.Running, want.Model, want.Params, want.Running)
	}
	return ck, nil
}

// CheckpointFor loads the checkpoint at path and verifies it as a resumed
// run does: its digest, and that it was written for cfg's model,
// optimizer, data and shape, within the run's steps.
func CheckpointFor(cfg Config, path string) (Checkpoint, error) {
	steps, err := cfg.validate()
	if err != nil {
		return Checkpoint{}, err
	}
	ck, err := LoadCheckpoint(path)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := ck.matches(cfg.checkpointHeader()); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %s: %w", ErrCheckpoint, path, err)
	}
	if total := steps * cfg.Epochs; ck.Step > total {
		return Checkpoint{}, fmt.Errorf("%w: %s: the checkpoint is of step %d, past the run's %d steps", ErrCheckpoint, path, ck.Step, total)
	}
	return ck, nil
}

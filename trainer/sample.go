package trainer

import (
	"context"
	"errors"
	"fmt"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/nn"
)

// ErrNotTokenModel is the refusal to sample from a model that does not
// read token ids and give logits per position (nn.ErrNotTokenModel).
var ErrNotTokenModel = nn.ErrNotTokenModel

// SampleConfig is a run of nn.Decoder on a checkpoint: Tokens ids drawn
// after Prompt, from the generator keyed by Seed.
type SampleConfig struct {
	Prompt      []byte
	Tokens      int
	Temperature float32 // 0: the most likely id each time
	Seed        uint64
	Graphs      bool // capture the decode step once and replay it
	// Advance, when set, is told of each token drawn (a worker's work
	// counter, see worker.Conn.Advance).
	Advance func(stage string)
}

// SampleStage is the stage a sampling run advances through.
const SampleStage = "sample"

// CheckSampleable resolves net and says whether it can be sampled from: a
// token model (token ids in, logits per position out). A refusal wraps
// ErrNotTokenModel.
func CheckSampleable(net nn.Net) (nn.Arch, error) {
	if len(net.Layers) == 0 {
		return nn.Arch{}, fmt.Errorf("the model is an MLP, %w: sampling needs token ids in and logits per position out", ErrNotTokenModel)
	}
	arch, err := net.Resolve()
	if err != nil {
		return nn.Arch{}, err
	}
	return arch, nn.CheckTokenModel(arch)
}

// Sample draws cfg's tokens from the checkpoint ck of the net run's model
// on dev (a stream of its own; the model and the decoder freed after).
// Cancelling ctx stops it after the token in flight.
func Sample(ctx context.Context, dev device.Device, net nn.Net, ck Checkpoint, cfg SampleConfig) (_ []int, err error) {
	arch, err := CheckSampleable(net)
	if err != nil {
		return nil, err
	}
	if len(ck.Parameters()) != arch.Params || len(ck.RunningState()) != arch.RunningLen() {
		return nil, fmt.Errorf("%w: %d parameters and %d running values for the model %s, which has %d and %d",
			ErrCheckpoint, len(ck.Parameters()), len(ck.RunningState()), net, arch.Params, arch.RunningLen())
	}
	// The optimizer is never used; SGD without momentum holds the least state.
	opt := nn.DefaultOptimizer()
	opt.Kind, opt.Momentum = nn.SGD, 0
	m, err := nn.NewNetModel(dev, arch, opt, 0)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, m.Free()) }()
	if err := dev.Upload(m.Params, ck.Parameters()); err != nil {
		return nil, err
	}
	if err := m.RestoreRunning(ck.RunningState()); err != nil {
		return nil, err
	}
	d, err := nn.NewDecoder(dev, m, cfg.Temperature)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, d.Free()) }()
	d.AfterToken = func(int) error {
		if cfg.Advance != nil {
			cfg.Advance(SampleStage)
		}
		return ctx.Err()
	}
	s, err := dev.NewStream()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.Destroy()) }()
	if err := d.Start(cfg.Prompt, cfg.Seed); err != nil {
		return nil, err
	}
	return d.Sample(s, cfg.Tokens, cfg.Graphs)
}

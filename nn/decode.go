package nn

import (
	"errors"
	"fmt"
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// ErrNotTokenModel is returned by NewDecoder for a model whose input is
// not token ids or whose output is not logits per position.
var ErrNotTokenModel = errors.New("not a token model")

// PromptPad is the byte that fills the context window before a prompt
// shorter than the model's context: a newline, as at the start of a line
// of the corpus.
const PromptPad = '\n'

// Decoder is a token model's decode step at batch 1: the evaluation
// forward pass of the context window (dropout the identity), a draw of the
// next id from the last position's logits on the device (SampleLast, from
// the generator in RNG), the generator advanced by one counter, and the
// window shifted left with the id appended. Step enqueues it all, so it
// can be captured once and replayed per token with nothing read back but
// ID.
type Decoder struct {
	Context, Vocab int
	Temperature    float32
	Window         device.Buffer // Context ids, the model's input
	ID             device.Buffer // the last id drawn
	RNG            device.Buffer // the sampling generator (device.RNGLen words)
	// AfterToken, when set, is called by Sample after each id is read
	// back, with the number drawn so far; an error it returns stops the
	// sampling with that error.
	AfterToken func(n int) error

	dev  device.Device
	step *NetStep
	bufs []device.Buffer
}

// CheckTokenModel says whether a model can be decoded: token ids in,
// logits per position out. A refusal wraps ErrNotTokenModel.
func CheckTokenModel(a Arch) error {
	if !a.Tokens || len(a.Out) != 2 || len(a.Net.Input) != 1 || a.Out[0] != a.Net.Input[0] {
		return fmt.Errorf("nn: the model %s is %w (want token ids in and logits per position out)", a.Net, ErrNotTokenModel)
	}
	return nil
}

// NewDecoder makes m's decode step on dev. temperature 0 draws the most
// likely id (argmax); otherwise it must be positive and finite.
func NewDecoder(dev device.Device, m *Model, temperature float32) (_ *Decoder, err error) {
	a := m.Arch
	if err := CheckTokenModel(a); err != nil {
		return nil, err
	}
	if !(temperature >= 0) || math.IsInf(float64(temperature), 1) {
		return nil, fmt.Errorf("nn: temperature %v; want a finite value >= 0", temperature)
	}
	d := &Decoder{Context: a.Out[0], Vocab: a.Out[1], Temperature: temperature, dev: dev}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Free())
		}
	}()
	sizes, err := NetWorkspaceSizes(a, 1)
	if err != nil {
		return nil, err
	}
	for _, n := range append(sizes, d.Context, 1, device.RNGLen) {
		b, err := dev.Alloc(n)
		if err != nil {
			return nil, err
		}
		d.bufs = append(d.bufs, b)
	}
	k := len(sizes)
	d.Window, d.ID, d.RNG = d.bufs[k], d.bufs[k+1], d.bufs[k+2]
	if d.step, err = NewNetStep(m, d.bufs[:k], 1); err != nil {
		return nil, err
	}
	return d, nil
}

// Start loads the window with the prompt's last Context bytes (a shorter
// prompt left-padded with PromptPad) and keys the generator with seed
// from counter 0.
func (d *Decoder) Start(prompt []byte, seed uint64) error {
	w := make([]float32, d.Context)
	pad := d.Context - len(prompt)
	for i := range w {
		if i < pad {
			w[i] = PromptPad
		} else {
			w[i] = float32(prompt[i-pad])
		}
	}
	if err := d.dev.Upload(d.Window, w); err != nil {
		return err
	}
	rng := make([]float32, device.RNGLen)
	rng[device.RNGSeedLo] = math.Float32frombits(uint32(seed))
	rng[device.RNGSeedHi] = math.Float32frombits(uint32(seed >> 32))
	rng[device.RNGOffsetLo] = math.Float32frombits(0)
	rng[device.RNGOffsetHi] = math.Float32frombits(0)
	return d.dev.Upload(d.RNG, rng)
}

// Step enqueues one decode step on s. The stream must offer
// device.SampleKernels.
func (d *Decoder) Step(s device.Stream) error {
	sk, ok := s.(device.SampleKernels)
	if !ok {
		return fmt.Errorf("nn: the %s device cannot sample: its streams have no sampling kernels", d.dev.Name())
	}
	logits, err := d.step.Forward(s, d.Window)
	if err != nil {
		return err
	}
	last := logits.Slice((d.Context-1)*d.Vocab, d.Vocab)
	if err := sk.SampleLast(d.Vocab, d.Temperature, last, d.RNG, d.ID); err != nil {
		return err
	}
	if err := s.AdvanceRNG(d.RNG, 1); err != nil {
		return err
	}
	return sk.ShiftAppend(d.Context, d.ID, d.Window)
}

// Sample draws n ids after Start: the step captured once and replayed
// per id when graphs is set, enqueued afresh per id otherwise (the same
// ids either way). Each id is read back after its step.
func (d *Decoder) Sample(s device.Stream, n int, graphs bool) (_ []int, err error) {
	if n < 1 {
		return nil, fmt.Errorf("nn: %d tokens to sample; want at least 1", n)
	}
	run := func() error { return d.Step(s) }
	if graphs {
		if err := s.BeginCapture(device.CaptureGlobal); err != nil {
			return nil, err
		}
		if err := d.Step(s); err != nil {
			_, end := s.EndCapture()
			return nil, errors.Join(err, end)
		}
		g, err := s.EndCapture()
		if err != nil {
			return nil, err
		}
		exec, err := d.dev.Instantiate(g)
		err = errors.Join(err, g.Destroy())
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, exec.Destroy()) }()
		run = func() error { return s.Launch(exec) }
	}
	ids := make([]int, n)
	host := make([]float32, 1)
	for i := range ids {
		if err := run(); err != nil {
			return nil, err
		}
		if err := s.Synchronize(); err != nil {
			return nil, err
		}
		if err := d.dev.Download(host, d.ID); err != nil {
			return nil, err
		}
		ids[i] = int(host[0])
		if d.AfterToken != nil {
			if err := d.AfterToken(i + 1); err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
}

// Free releases the decoder's buffers.
func (d *Decoder) Free() error {
	var errs []error
	for _, b := range d.bufs {
		errs = append(errs, d.dev.Free(b))
	}
	d.bufs = nil
	return errors.Join(errs...)
}

package nn

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/tolaria-ml/tolaria/device"
)

// Model owns the parameters and the optimizer state on a device. They
// live in flat buffers so that clipping and the update are single kernels.
type Model struct {
	// Spec is the MLP's spec; for a net (NewNetModel) its outline: the
	// inputs per example, the classes and the loss, which lay out a batch.
	Spec   Spec
	Arch   Arch // the resolved net; zero for an MLP made by NewModel
	Opt    Optimizer
	dev    device.Device
	Params device.Buffer
	State  []device.Buffer // optimizer state, each as long as Params
	// Running is a net's state that the step updates but does not train
	// (Arch.RunningLen values): batchnorm's running statistics, then the
	// dropout generator's words. The zero Buffer when there is none.
	Running device.Buffer
}

// NewModel allocates and initialises a model: Kaiming-normal weights for
// hidden layers (fan-in, gain for the activation), Xavier-normal for the
// output layer, zero biases, zero optimizer state. The same seed gives the
// same parameters on every backend.
func NewModel(dev device.Device, spec Spec, opt Optimizer, seed uint64) (*Model, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Spec: spec, Opt: opt, dev: dev}
	n := spec.ParamCount()
	var err error
	if m.Params, err = dev.Alloc(n); err != nil {
		return nil, fmt.Errorf("nn: parameters: %w", err)
	}
	for range opt.StateBuffers() {
		b, err := dev.Alloc(n)
		if err != nil {
			m.Free()
			return nil, fmt.Errorf("nn: optimizer state: %w", err)
		}
		m.State = append(m.State, b)
	}
	if err := dev.Upload(m.Params, InitParams(spec, seed)); err != nil {
		m.Free()
		return nil, err
	}
	zero := make([]float32, n)
	for _, b := range m.State {
		if err := dev.Upload(b, zero); err != nil {
			m.Free()
			return nil, err
		}
	}
	return m, nil
}

// NewNetModel allocates and initialises the model of a resolved net: its
// parameters (Arch.InitParams), zero optimizer state and its running state
// (Arch.InitRunning). The same seed gives the same values on every
// backend.
func NewNetModel(dev device.Device, a Arch, opt Optimizer, seed uint64) (*Model, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	if a.Params == 0 {
		return nil, fmt.Errorf("nn: the net %s has no parameters to train", a.Net)
	}
	m := &Model{Spec: a.Outline(), Arch: a, Opt: opt, dev: dev}
	fail := func(what string, err error) (*Model, error) {
		m.Free()
		return nil, fmt.Errorf("nn: %s: %w", what, err)
	}
	var err error
	if m.Params, err = dev.Alloc(a.Params); err != nil {
		return fail("parameters", err)
	}
	for range opt.StateBuffers() {
		b, err := dev.Alloc(a.Params)
		if err != nil {
			return fail("optimizer state", err)
		}
		m.State = append(m.State, b)
	}
	if n := a.RunningLen(); n > 0 {
		if m.Running, err = dev.Alloc(n); err != nil {
			return fail("running state", err)
		}
		if err := dev.Upload(m.Running, a.InitRunning(seed)); err != nil {
			return fail("running state", err)
		}
	}
	if err := dev.Upload(m.Params, a.InitParams(seed)); err != nil {
		return fail("parameters", err)
	}
	zero := make([]float32, a.Params)
	for _, b := range m.State {
		if err := dev.Upload(b, zero); err != nil {
			return fail("optimizer state", err)
		}
	}
	return m, nil
}

// rng is the dropout generator's words in Running.
func (m *Model) rng() device.Buffer { return m.Running.Slice(m.Arch.State, device.RNGLen) }

// SnapshotRunning downloads the running state (nil when there is none).
func (m *Model) SnapshotRunning() ([]float32, error) {
	if m.Running.IsZero() {
		return nil, nil
	}
	v := make([]float32, m.Running.Len())
	return v, m.dev.Download(v, m.Running)
}

// RestoreRunning uploads a running state taken by SnapshotRunning.
func (m *Model) RestoreRunning(v []float32) error {
	if len(v) != m.Running.Len() {
		return fmt.Errorf("nn: restore: %d running-state values given, model %s has %d", len(v), m.name(), m.Running.Len())
	}
	if len(v) == 0 {
		return nil
	}
	return m.dev.Upload(m.Running, v)
}

// name is the model's name in messages.
func (m *Model) name() string {
	if m.Arch.Params > 0 {
		return m.Arch.Net.String()
	}
	return m.Spec.String()
}

// InitParams returns the initial parameters for spec and seed.
func InitParams(spec Spec, seed uint64) []float32 {
	p := make([]float32, spec.ParamCount())
	rng := rand.New(rand.NewPCG(seed, 0x746f6c61726961)) // "tolaria"
	layers := spec.Layers()
	for i, l := range layers {
		std := math.Sqrt(2 / float64(l.In)) // Kaiming, ReLU/GELU gain
		if i == len(layers)-1 {
			std = math.Sqrt(2 / float64(l.In+l.Out)) // Xavier for the output layer
		}
		for j := range l.In * l.Out {
			p[l.WeightAt+j] = float32(rng.NormFloat64() * std)
		}
	}
	return p
}

// Free releases the model's device memory.
func (m *Model) Free() error {
	var errs []error
	if !m.Params.IsZero() {
		errs = append(errs, m.dev.Free(m.Params))
	}
	for _, b := range m.State {
		errs = append(errs, m.dev.Free(b))
	}
	if !m.Running.IsZero() {
		errs = append(errs, m.dev.Free(m.Running))
	}
	m.Params, m.State, m.Running = device.Buffer{}, nil, device.Buffer{}
	return errors.Join(errs...)
}

// Snapshot downloads the parameters and the optimizer state.
func (m *Model) Snapshot() (params []float32, state [][]float32, err error) {
	params = make([]float32, m.Params.Len())
	if err := m.dev.Download(params, m.Params); err != nil {
		return nil, nil, err
	}
	for _, b := range m.State {
		s := make([]float32, b.Len())
		if err := m.dev.Download(s, b); err != nil {
			return nil, nil, err
		}
		state = append(state, s)
	}
	return params, state, nil
}

// Restore uploads parameters and optimizer state taken by Snapshot.
func (m *Model) Restore(params []float32, state [][]float32) error {
	if len(params) != m.Params.Len() {
		return fmt.Errorf("nn: restore: %d parameters given, model %s has %d", len(params), m.name(), m.Params.Len())
	}
	if len(state) != len(m.State) {
		return fmt.Errorf("nn: restore: %d optimizer state buffers given, %s needs %d", len(state), m.Opt.Kind, len(m.State))
	}
	if err := m.dev.Upload(m.Params, params); err != nil {
		return err
	}
	for i, b := range m.State {
		if len(state[i]) != b.Len() {
			return fmt.Errorf("nn: restore: optimizer state %d has %d values, want %d", i, len(state[i]), b.Len())
		}
		if err := m.dev.Upload(b, state[i]); err != nil {
			return err
		}
	}
	return nil
}

// ParamsSHA256 is the hex SHA-256 of the parameters' little-endian bytes.
func ParamsSHA256(params []float32) string {
	h := sha256.New()
	var b [4]byte
	for _, v := range params {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

package nn_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// newDecoder makes the decode step of a freshly initialised tiny
// transformer (with dropout, which evaluation leaves out).
func newDecoder(t *testing.T, temperature float32) (device.Device, device.Stream, *nn.Decoder, *nn.Model) {
	t.Helper()
	dev, err := cpu.Open(cpu.Config{Threads: 2})
	must(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	arch, err := tinyTransformer(0.25).Resolve()
	must(t, err)
	m, err := nn.NewNetModel(dev, arch, nn.DefaultOptimizer(), 5)
	must(t, err)
	t.Cleanup(func() { _ = m.Free() })
	d, err := nn.NewDecoder(dev, m, temperature)
	must(t, err)
	t.Cleanup(func() { _ = d.Free() })
	s, err := dev.NewStream()
	must(t, err)
	t.Cleanup(func() { _ = s.Destroy() })
	return dev, s, d, m
}

// TestDecoderReplayEqualsEager: the captured step replayed gives the ids
// the eager step gives from the same prompt and seed, and the same seed
// gives the same ids again.
func TestDecoderReplayEqualsEager(t *testing.T) {
	_, s, d, _ := newDecoder(t, 1)
	draw := func(seed uint64, graphs bool) []int {
		must(t, d.Start([]byte{1, 2, 3}, seed))
		ids, err := d.Sample(s, 40, graphs)
		must(t, err)
		return ids
	}
	replayed, eager, again := draw(9, true), draw(9, false), draw(9, true)
	if !slices.Equal(replayed, eager) || !slices.Equal(replayed, again) {
		t.Fatalf("seed 9: replayed %v, eager %v, replayed again %v", replayed, eager, again)
	}
	for _, id := range replayed {
		if id < 0 || id >= tinyV {
			t.Fatalf("id %d outside the vocabulary of %d", id, tinyV)
		}
	}
	if other := draw(10, true); slices.Equal(other, replayed) {
		t.Errorf("seeds 9 and 10 drew the same 40 ids %v", other)
	}
}

// TestDecoderGreedyIsTheForwardArgmax: at temperature 0 each id is the
// first largest logit of the last position of the window before it, as
// the model's own forward pass gives them, and the window moves on by it.
func TestDecoderGreedyIsTheForwardArgmax(t *testing.T) {
	dev, s, d, m := newDecoder(t, 0)
	sizes, err := nn.NetWorkspaceSizes(m.Arch, 1)
	must(t, err)
	var bufs []device.Buffer
	for _, n := range sizes {
		b, err := dev.Alloc(n)
		must(t, err)
		bufs = append(bufs, b)
	}
	st, err := nn.NewNetStep(m, bufs, 1)
	must(t, err)
	x, err := dev.Alloc(tinyT)
	must(t, err)
	prompt := []byte{9, 9, 4, 7, 1, 2} // longer than T: the last five count
	must(t, d.Start(prompt, 1))
	got := make([]float32, tinyT)
	must(t, dev.Download(got, d.Window))
	if want := []float32{9, 4, 7, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("window after Start %v, want the prompt's last %d bytes %v", got, tinyT, want)
	}
	window := got
	ids, err := d.Sample(s, 6, true)
	must(t, err)
	for i, id := range ids {
		must(t, dev.Upload(x, window))
		logits, err := st.Forward(s, x)
		must(t, err)
		must(t, s.Synchronize())
		all := make([]float32, tinyT*tinyV)
		must(t, dev.Download(all, logits))
		last := all[(tinyT-1)*tinyV:]
		want := 0
		for v, l := range last {
			if l > last[want] {
				want = v
			}
		}
		if id != want {
			t.Fatalf("id %d: %d, want the argmax %d of %v", i, id, want, last)
		}
		window = append(window[1:], float32(id))
	}
}

// TestDecoderRefusals: a model that is not a token model, a temperature
// below zero, and no tokens.
func TestDecoderRefusals(t *testing.T) {
	dev, s, d, tok := newDecoder(t, 1)
	arch, err := nn.Net{Input: nn.Shape{6}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{nn.Linear(3)}}.Resolve()
	must(t, err)
	m, err := nn.NewNetModel(dev, arch, nn.DefaultOptimizer(), 1)
	must(t, err)
	defer m.Free()
	if _, err := nn.NewDecoder(dev, m, 1); !errors.Is(err, nn.ErrNotTokenModel) {
		t.Errorf("a vector model: %v, want ErrNotTokenModel", err)
	}
	if _, err := nn.NewDecoder(dev, tok, -0.5); err == nil {
		t.Error("temperature -0.5 was accepted")
	}
	if _, err := d.Sample(s, 0, true); err == nil {
		t.Error("0 tokens were accepted")
	}
}

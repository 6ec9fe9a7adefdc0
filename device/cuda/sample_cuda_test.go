//go:build cuda

package cuda

import (
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// decodeOn draws 40 ids from a small transformer's decode step on dev,
// captured and replayed or eager.
func decodeOn(t *testing.T, dev device.Device, params []float32, graphs bool) []int {
	t.Helper()
	arch, err := sampleNet().Resolve()
	check(t, "Resolve", err)
	m, err := nn.NewNetModel(dev, arch, nn.DefaultOptimizer(), 3)
	check(t, "NewNetModel", err)
	defer m.Free()
	check(t, "Upload", dev.Upload(m.Params, params))
	d, err := nn.NewDecoder(dev, m, 0.9)
	check(t, "NewDecoder", err)
	defer d.Free()
	s := mustStream(t, dev)
	check(t, "Start", d.Start([]byte("ab"), 42))
	ids, err := d.Sample(s, 40, graphs)
	check(t, "Sample", err)
	return ids
}

func sampleNet() nn.Net {
	return nn.Net{Input: nn.Shape{8}, Loss: nn.LossCrossEntropy, Layers: []nn.LayerSpec{
		nn.Embedding(256, 16), nn.Positional(), nn.TransformerBlock(2, 32), nn.LayerNorm(), nn.LMHead(),
	}}
}

// The decode step on the GPU, replayed and eager, draws the ids the CPU
// device draws from the same parameters, prompt and seed. (The draws
// agree unless a uniform falls within rounding of a CDF boundary, which
// the fixed seed here does not.)
func TestDecodeMatchesCPUDevice(t *testing.T) {
	arch, err := sampleNet().Resolve()
	check(t, "Resolve", err)
	params := arch.InitParams(5)
	host, err := cpu.Open(cpu.Config{})
	check(t, "cpu.Open", err)
	defer host.Close()
	want := decodeOn(t, host, params, false)
	gpu := openTest(t)
	for _, graphs := range []bool{true, false} {
		if got := decodeOn(t, gpu, params, graphs); !slices.Equal(got, want) {
			t.Errorf("graphs %v: the GPU drew %v, the CPU device %v", graphs, got, want)
		}
	}
}

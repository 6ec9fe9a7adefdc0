package nn_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
)

// TestScoreIsTheKernelsRowLoss: a row's Score is the loss the CPU device's
// kernel accumulates for that row alone, and its prediction the first
// maximum (right when the kernel counts the row correct), for both losses.
func TestScoreIsTheKernelsRowLoss(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const cols = 5
	rng := rand.New(rand.NewPCG(3, 4))
	for _, loss := range []nn.Loss{nn.LossCrossEntropy, nn.LossMSE} {
		spec := nn.Spec{Inputs: 1, Outputs: cols, Loss: loss}
		for trial := range 50 {
			logits := make([]float32, cols)
			for j := range logits {
				logits[j] = float32(rng.NormFloat64() * 4)
			}
			if trial == 0 {
				logits[1], logits[3] = 9, 9 // a tie: the first maximum wins
			}
			label := rng.IntN(cols)
			y := []float32{float32(label)}
			if loss == nn.LossMSE {
				y = make([]float32, cols)
				y[label] = 1
			}
			bufs := upload(t, dev, logits, y, []float32{1}, make([]float32, cols), make([]float32, device.StatsLen))
			if loss == nn.LossMSE {
				err = s.MSE(1, cols, bufs[0], bufs[1], bufs[2], bufs[4])
			} else {
				err = s.SoftmaxXent(1, cols, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4])
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			stats := make([]float32, device.StatsLen)
			if err := dev.Download(stats, bufs[4]); err != nil {
				t.Fatal(err)
			}
			pred, got := spec.Score(logits, label)
			if float32(got) != stats[device.StatLossSum] {
				t.Errorf("%s row %v label %d: Score %v, kernel %v", loss, logits, label, got, stats[device.StatLossSum])
			}
			if loss == nn.LossCrossEntropy && (pred == label) != (stats[device.StatCorrect] == 1) {
				t.Errorf("row %v label %d: predicted %d, kernel's correct count %v", logits, label, pred, stats[device.StatCorrect])
			}
			if trial == 0 && pred != 1 {
				t.Errorf("a tie of classes 1 and 3 predicts %d", pred)
			}
			for _, b := range bufs {
				_ = dev.Free(b)
			}
		}
		if _, l := spec.Score([]float32{1, 2, 3, 4, 5}, cols); !math.IsNaN(l) {
			t.Errorf("%s: a label out of range scores %v", loss, l)
		}
	}
}

func upload(t *testing.T, dev device.Device, vs ...[]float32) []device.Buffer {
	t.Helper()
	var out []device.Buffer
	for _, v := range vs {
		b, err := dev.Alloc(len(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Upload(b, v); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

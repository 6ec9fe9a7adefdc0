package cpu

import (
	"math"

	"github.com/tolaria-ml/tolaria/device"
)

// sampleLast is SampleLast's draw on the host (device.SampleKernels
// documents it): one serial pass, every weight and sum in double.
func sampleLast(temperature float32, logits, rng []float32) int {
	best := 0
	for v, l := range logits {
		if l > logits[best] {
			best = v
		}
	}
	if temperature == 0 {
		return best
	}
	k0, k1, offset := rngState(rng)
	w0, _, _, _ := philox4x32(uint32(offset), uint32(offset>>32), 0, 0, k0, k1)
	u := float64(w0) * 0x1p-32
	t, top := float64(temperature), float64(logits[best])
	total := 0.0
	for _, l := range logits {
		total += math.Exp((float64(l) - top) / t)
	}
	target, run, last := u*total, 0.0, best
	for v, l := range logits {
		e := math.Exp((float64(l) - top) / t)
		if e > 0 {
			last = v
		}
		if run += e; run > target {
			return v
		}
	}
	return last
}

func (s *stream) SampleLast(vocab int, temperature float32, logits, rng, id device.Buffer) error {
	return s.launch("SampleLast", device.CheckSampleLast(vocab, temperature, logits, rng, id), serial(func(v [][]float32) {
		v[2][0] = float32(sampleLast(temperature, v[0][:vocab], v[1]))
	}), logits, rng, id)
}

func (s *stream) ShiftAppend(n int, id, window device.Buffer) error {
	return s.launch("ShiftAppend", device.CheckShiftAppend(n, id, window), serial(func(v [][]float32) {
		w := v[1][:n]
		copy(w, w[1:])
		w[n-1] = v[0][0]
	}), id, window)
}

package nn

import "math"

// Score is one example's prediction and loss from its logits (or, for
// MSE, its outputs): the index of the first maximum, and the row loss
// computed as the CPU device's loss kernels compute it, in float64. An
// evaluation that keeps every example's figures (sharded evaluation) uses
// it so that the sum over examples can be taken in any order it chooses.
// label outside [0, Outputs) gives a NaN loss, as the kernels do.
func (s Spec) Score(logits []float32, label int) (predicted int, loss float64) {
	for j, v := range logits {
		if v > logits[predicted] {
			predicted = j
		}
	}
	if label < 0 || label >= len(logits) {
		return predicted, math.NaN()
	}
	if s.Loss == LossMSE {
		var sq float64
		for j, v := range logits {
			t := 0.0
			if j == label {
				t = 1
			}
			e := float64(v) - t
			sq += e * e
		}
		return predicted, sq / float64(len(logits))
	}
	top := float64(logits[predicted])
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - top)
	}
	return predicted, top - float64(logits[label]) + math.Log(sum)
}

package trainer

import (
	"reflect"
	"testing"

	"github.com/tolaria-ml/tolaria/nn"
)

// TestTopK: the most probable classes first, ties to the lower class.
func TestTopK(t *testing.T) {
	for _, c := range []struct {
		logits []float32
		want   []int
	}{
		{[]float32{1, 3, 2}, []int{1, 2, 0}},
		{[]float32{1, 3, 2}, []int{1}},
		{[]float32{2, 2, 2, 2}, []int{0, 1, 2}},
		{[]float32{0, 5, 1, 5, 1}, []int{1, 3, 2, 4}},
		{[]float32{-1, -1, 4}, []int{2, 0}},
	} {
		dst := make([]ClassProb, len(c.want))
		topK(c.logits, dst)
		got := make([]int, len(dst))
		for i, d := range dst {
			got[i] = d.Class
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("top %d of %v: %v, want %v", len(c.want), c.logits, got, c.want)
		}
	}
	dst := make([]ClassProb, 2)
	topK([]float32{0, 0}, dst)
	if dst[0].Prob != 0.5 || dst[1].Prob != 0.5 {
		t.Errorf("two equal logits: %+v", dst)
	}
}

// TestEvalTopK: capped at the outputs; none for an MSE model.
func TestEvalTopK(t *testing.T) {
	ce := Config{Spec: nn.Spec{Outputs: 3, Loss: nn.LossCrossEntropy}}
	mse := Config{Spec: nn.Spec{Outputs: 3, Loss: nn.LossMSE}}
	if ce.EvalTopK(5) != 3 || ce.EvalTopK(2) != 2 || ce.EvalTopK(0) != 0 || mse.EvalTopK(5) != 0 {
		t.Errorf("EvalTopK: %d %d %d %d", ce.EvalTopK(5), ce.EvalTopK(2), ce.EvalTopK(0), mse.EvalTopK(5))
	}
}

package trainer

import (
	"slices"
	"testing"
)

// TestOneHot: MSE targets are expanded from class labels in place, the
// labels sharing memory with the targets' start; a padding row (mask 0)
// gets all zeros.
func TestOneHot(t *testing.T) {
	targets := make([]float32, 4*3)
	labels := targets[:4]
	copy(labels, []float32{2, 0, 1, 2})
	oneHot(targets, labels, []float32{1, 1, 1, 0}, 3)
	want := []float32{0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0}
	if !slices.Equal(targets, want) {
		t.Fatalf("targets %v, want %v", targets, want)
	}
}

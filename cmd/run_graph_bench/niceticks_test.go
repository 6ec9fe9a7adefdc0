package main

import (
	"slices"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []string
	}{
		{0, 2.75, []string{"0.0", "0.5", "1.0", "1.5", "2.0", "2.5"}},
		{0, 1.25, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2"}},
		{0, 28.6, []string{"0", "5", "10", "15", "20", "25"}},
		{0, 125, []string{"0", "20", "40", "60", "80", "100", "120"}},
		{0, 1, []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
	}
	for _, tt := range tests {
		var got []string
		for _, tk := range niceTicks(tt.lo, tt.hi) {
			got = append(got, tk.Label)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("niceTicks(%g, %g) = %v, want %v", tt.lo, tt.hi, got, tt.want)
		}
	}
}

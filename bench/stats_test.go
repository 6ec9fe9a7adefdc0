package bench

import (
	"math"
	"slices"
	"testing"
)

func TestQuantile(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"single value", []float64{3}, 0.9, 3},
		{"median of odd count", []float64{5, 1, 3}, 0.5, 3},
		{"median of even count interpolates", []float64{4, 1, 3, 2}, 0.5, 2.5},
		{"p90 of 1..10", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 0.9, 9.1},
		{"p90 of 1..11 is a sample", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 0.9, 10},
		{"minimum", []float64{2, 1, 3}, 0, 1},
		{"maximum", []float64{2, 1, 3}, 1, 3},
		{"q clamped below", []float64{2, 1, 3}, -1, 1},
		{"q clamped above", []float64{2, 1, 3}, 2, 3},
		{"ties", []float64{1, 1, 1, 5}, 0.5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.xs)
			if got := Quantile(tt.xs, tt.q); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("Quantile(%v, %g) = %g, want %g", tt.xs, tt.q, got, tt.want)
			}
			if !slices.Equal(in, tt.xs) {
				t.Errorf("Quantile modified its input: %v, was %v", tt.xs, in)
			}
		})
	}
}

func TestMedianAndP90(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100..1, unsorted
	}
	if got := Median(xs); got != 50.5 {
		t.Errorf("Median(1..100) = %g, want 50.5", got)
	}
	if got := P90(xs); math.Abs(got-90.1) > 1e-9 {
		t.Errorf("P90(1..100) = %g, want 90.1", got)
	}
}

func TestEmptySamples(t *testing.T) {
	for name, f := range map[string]func([]float64) float64{"Median": Median, "P90": P90, "Mean": Mean} {
		if got := f(nil); !math.IsNaN(got) {
			t.Errorf("%s(nil) = %g, want NaN", name, got)
		}
	}
	if got := Summarise(nil); got != (Dist{}) {
		t.Errorf("Summarise(nil) = %+v, want zeros (JSON cannot hold NaN)", got)
	}
}

func TestSummarise(t *testing.T) {
	got := Summarise([]float64{1, 2, 3, 4, 10})
	want := Dist{Median: 3, P90: 7.6, Mean: 4, N: 5}
	if math.Abs(got.P90-want.P90) > 1e-9 {
		t.Errorf("P90 = %g, want %g", got.P90, want.P90)
	}
	got.P90 = want.P90
	if got != want {
		t.Errorf("Summarise = %+v, want %+v", got, want)
	}
}

func TestWindowed(t *testing.T) {
	tests := []struct {
		xs   []float64
		w    int
		want []float64
	}{
		{[]float64{1, 3, 1, 3, 1, 3}, 2, []float64{2, 2, 2, 2, 2}},
		{[]float64{0, 0, 8, 0, 0, 8}, 3, []float64{8.0 / 3, 8.0 / 3, 8.0 / 3, 8.0 / 3}},
		{[]float64{1, 2, 3}, 1, []float64{1, 2, 3}},
		{[]float64{1, 2, 3}, 3, []float64{2}},
		{[]float64{1, 2}, 3, nil},
		{[]float64{1, 2}, 0, nil},
	}
	for _, tt := range tests {
		got := Windowed(tt.xs, tt.w)
		if len(got) != len(tt.want) {
			t.Errorf("Windowed(%v, %d) = %v, want %v", tt.xs, tt.w, got, tt.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-tt.want[i]) > 1e-12 {
				t.Errorf("Windowed(%v, %d) = %v, want %v", tt.xs, tt.w, got, tt.want)
				break
			}
		}
	}
}

func TestRatio(t *testing.T) {
	for _, tt := range []struct{ a, b, want float64 }{
		{2, 1, 2}, {1, 0, 0}, {0, 1, 0}, {-1, 1, 0}, {math.NaN(), 1, 0},
	} {
		if got := ratio(tt.a, tt.b); got != tt.want {
			t.Errorf("ratio(%g, %g) = %g, want %g", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestRoundSig(t *testing.T) {
	for _, tt := range []struct{ x, want float64 }{
		{0.04317449999999992, 0.0431745}, {123456789, 123457000}, {0, 0}, {-0.0012345678, -0.00123457}, {1, 1},
	} {
		if got := roundSig(tt.x, 6); math.Abs(got-tt.want) > 1e-15*math.Max(1, math.Abs(tt.want)) {
			t.Errorf("roundSig(%g, 6) = %g, want %g", tt.x, got, tt.want)
		}
	}
}

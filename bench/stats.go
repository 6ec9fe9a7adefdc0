package bench

import (
	"math"
	"slices"
	"time"
)

// Quantile returns the q-quantile (0 <= q <= 1) of xs by linear
// interpolation between closest ranks (the "R-7" definition used by NumPy
// and most spreadsheets). It returns NaN for an empty sample and does not
// modify xs.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	q = min(max(q, 0), 1)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (h-float64(lo))*(s[hi]-s[lo])
}

// Median is Quantile(xs, 0.5).
func Median(xs []float64) float64 { return Quantile(xs, 0.5) }

// P90 is Quantile(xs, 0.9).
func P90(xs []float64) float64 { return Quantile(xs, 0.9) }

// Mean is the arithmetic mean, NaN for an empty sample.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Dist summarises a sample of durations in milliseconds.
type Dist struct {
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	Mean   float64 `json:"mean_ms"`
	N      int     `json:"n"`
}

// Summarise returns the distribution of xs (milliseconds); zeros when xs
// is empty, so that JSON never holds NaN.
func Summarise(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	return Dist{Median: Median(xs), P90: P90(xs), Mean: Mean(xs), N: len(xs)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio is a/b, or 0 when either is not positive, so JSON never holds
// NaN or Inf.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// Windowed returns the means of every run of w consecutive values of xs
// (a sliding window): len(xs)-w+1 values, or nil when xs is shorter
// than w. The bench reports step times over windows because the
// pipelined loop issues steps in bursts (one per staging input buffer):
// a single step's interval is either almost nothing or several steps
// long, and only a window spanning the burst is the time per step.
func Windowed(xs []float64, w int) []float64 {
	if w < 1 || len(xs) < w {
		return nil
	}
	out := make([]float64, 0, len(xs)-w+1)
	var sum float64
	for i, x := range xs {
		sum += x
		if i >= w {
			sum -= xs[i-w]
		}
		if i >= w-1 {
			out = append(out, sum/float64(w))
		}
	}
	return out
}

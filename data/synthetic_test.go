package data

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestSyntheticValidate(t *testing.T) {
	good := SyntheticConfig{N: 100, Features: 4, Classes: 3, Seed: 1, Noise: 0.1}
	tests := []struct {
		name   string
		mutate func(*SyntheticConfig)
		ok     bool
	}{
		{"good", func(*SyntheticConfig) {}, true},
		{"zero noise", func(c *SyntheticConfig) { c.Noise = 0 }, true},
		{"N equals Classes", func(c *SyntheticConfig) { c.N = 3 }, true},
		{"N below Classes", func(c *SyntheticConfig) { c.N = 2 }, false},
		{"no features", func(c *SyntheticConfig) { c.Features = 0 }, false},
		{"one class", func(c *SyntheticConfig) { c.Classes = 1 }, false},
		{"negative noise", func(c *SyntheticConfig) { c.Noise = -1 }, false},
		{"NaN noise", func(c *SyntheticConfig) { c.Noise = math.NaN() }, false},
		{"infinite noise", func(c *SyntheticConfig) { c.Noise = math.Inf(1) }, false},
	}
	for _, tt := range tests {
		c := good
		tt.mutate(&c)
		err := c.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v; want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v is not ErrInvalid", tt.name, err)
		}
		if _, serr := Synthetic(c); (serr == nil) != tt.ok {
			t.Errorf("%s: Synthetic error = %v; want ok %v", tt.name, serr, tt.ok)
		}
	}
}

func TestSynthetic(t *testing.T) {
	tests := []SyntheticConfig{
		{N: 1000, Features: 16, Classes: 10, Seed: 7, Noise: 0.5},
		{N: 1001, Features: 3, Classes: 4, Seed: 0, Noise: 1},
		{N: 2, Features: 1, Classes: 2, Seed: 3, Noise: 0},
	}
	for _, c := range tests {
		a, err := Synthetic(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if a.Len() != c.N || a.Features != c.Features || a.Classes != c.Classes {
			t.Errorf("%+v: got %d examples, %d features, %d classes", c, a.Len(), a.Features, a.Classes)
		}
		b, _ := Synthetic(c)
		if !slices.Equal(a.X, b.X) || !slices.Equal(a.Y, b.Y) {
			t.Errorf("%+v: two calls with the same config differ", c)
		}
		other := c
		other.Seed++
		if o, _ := Synthetic(other); slices.Equal(a.X, o.X) {
			t.Errorf("%+v: seed %d gives the same X", c, other.Seed)
		}
		counts := make([]int, c.Classes)
		for _, y := range a.Y {
			counts[y]++
		}
		if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 1 {
			t.Errorf("%+v: class counts %v differ by more than one", c, counts)
		}
	}
}

// TestSyntheticLearnable checks the clusters can be told apart: a nearest-class-mean
// classifier fitted on the data gets nearly every example right at modest noise.
func TestSyntheticLearnable(t *testing.T) {
	d, err := Synthetic(SyntheticConfig{N: 2000, Features: 16, Classes: 10, Seed: 11, Noise: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	f := d.Features
	means := make([]float64, d.Classes*f)
	counts := make([]float64, d.Classes)
	for i, y := range d.Y {
		counts[y]++
		for j := range f {
			means[int(y)*f+j] += float64(d.X[i*f+j])
		}
	}
	for c := range d.Classes {
		for j := range f {
			means[c*f+j] /= counts[c]
		}
	}
	correct := 0
	for i, y := range d.Y {
		best, bestDist := -1, math.Inf(1)
		for c := range d.Classes {
			var dist float64
			for j := range f {
				diff := float64(d.X[i*f+j]) - means[c*f+j]
				dist += diff * diff
			}
			if dist < bestDist {
				best, bestDist = c, dist
			}
		}
		if best == int(y) {
			correct++
		}
	}
	if acc := float64(correct) / float64(d.Len()); acc < 0.95 {
		t.Errorf("nearest-mean accuracy %.3f; want at least 0.95", acc)
	}
}

func TestSyntheticLabelsShuffled(t *testing.T) {
	d, err := Synthetic(SyntheticConfig{N: 100, Features: 2, Classes: 2, Seed: 5, Noise: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Round-robin labels would make consecutive batches perfectly balanced and hide
	// shuffling bugs downstream.
	alternating := true
	for i := range d.Y {
		if d.Y[i] != int32(i%2) {
			alternating = false
			break
		}
	}
	if alternating {
		t.Errorf("labels follow i %% Classes; want a seeded random order")
	}
}

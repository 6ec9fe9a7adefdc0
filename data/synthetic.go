package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// SyntheticConfig describes a generated classification set: N examples of Features
// values in Classes Gaussian clusters, with Noise the per-feature standard deviation
// around unit-variance centroids.
type SyntheticConfig struct {
	N, Features, Classes int
	Seed                 uint64
	Noise                float64
}

// Validate reports the first field that cannot make a dataset.
func (c SyntheticConfig) Validate() error {
	switch {
	case c.Features < 1:
		return fmt.Errorf("%w: synthetic config: Features is %d; want at least 1", ErrInvalid, c.Features)
	case c.Classes < 2:
		return fmt.Errorf("%w: synthetic config: Classes is %d; want at least 2", ErrInvalid, c.Classes)
	case c.N < c.Classes:
		return fmt.Errorf("%w: synthetic config: N is %d; want at least Classes (%d) so every class has an example",
			ErrInvalid, c.N, c.Classes)
	case math.IsNaN(c.Noise) || math.IsInf(c.Noise, 0) || c.Noise < 0:
		return fmt.Errorf("%w: synthetic config: Noise is %v; want a finite value >= 0", ErrInvalid, c.Noise)
	}
	return nil
}

// PCG stream constants keep the synthetic draws apart from Order's (seed, epoch) streams,
// so a dataset and an epoch order made from the same seed are unrelated.
const (
	syntheticCentroidStream = 0x73796e7468000001
	syntheticLabelStream    = 0x73796e7468000002
	syntheticSampleStream   = 0x73796e7468000003
)

// Synthetic makes a learnable classification set, the same for the same config: each
// class has a centroid drawn from a standard normal, and each example is its class's
// centroid plus Gaussian noise. Labels are balanced (counts differ by at most one) and in
// a seeded random order.
func Synthetic(c SyntheticConfig) (*Dataset, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	centroidRNG := rand.New(rand.NewPCG(c.Seed, syntheticCentroidStream))
	centroids := make([]float64, c.Classes*c.Features)
	for i := range centroids {
		centroids[i] = centroidRNG.NormFloat64()
	}

	perm := make([]int, c.N)
	for i := range perm {
		perm[i] = i
	}
	permute(rand.NewPCG(c.Seed, syntheticLabelStream), perm)

	d := &Dataset{
		Name:     fmt.Sprintf("synthetic/seed=%d", c.Seed),
		Features: c.Features,
		Classes:  c.Classes,
		X:        make([]float32, c.N*c.Features),
		Y:        make([]int32, c.N),
	}
	sampleRNG := rand.New(rand.NewPCG(c.Seed, syntheticSampleStream))
	for i := range d.Y {
		class := perm[i] % c.Classes
		d.Y[i] = int32(class)
		centroid := centroids[class*c.Features : (class+1)*c.Features]
		row := d.X[i*c.Features : (i+1)*c.Features]
		for j, mu := range centroid {
			row[j] = float32(mu + c.Noise*sampleRNG.NormFloat64())
		}
	}
	return d, nil
}

package data

import (
	"fmt"
	"math"
)

// Dataset holds N examples of Features float32 values each and a class label per example.
type Dataset struct {
	Name     string
	Features int
	Classes  int
	X        []float32 // N*Features, row-major
	Y        []int32   // N labels in [0, Classes)
	// Files are the files the examples were read from, as read (Sources);
	// nil for a dataset made in memory.
	Files []SourceFile
}

// Len returns the number of examples.
func (d *Dataset) Len() int { return len(d.Y) }

// Shape is an example's: Features values and one class.
func (d *Dataset) Shape() Shape { return Shape{Name: d.Name, Inputs: d.Features, Classes: d.Classes} }

// Validate checks that the slices agree with Features and that every label is a class.
func (d *Dataset) Validate() error {
	if d.Features < 1 {
		return fmt.Errorf("%w: dataset %q: Features is %d; want at least 1", ErrInvalid, d.Name, d.Features)
	}
	if d.Classes < 1 {
		return fmt.Errorf("%w: dataset %q: Classes is %d; want at least 1", ErrInvalid, d.Name, d.Classes)
	}
	if len(d.X) != len(d.Y)*d.Features {
		return fmt.Errorf("%w: dataset %q: len(X) is %d; want len(Y)*Features = %d*%d",
			ErrInvalid, d.Name, len(d.X), len(d.Y), d.Features)
	}
	for i, y := range d.Y {
		if y < 0 || int(y) >= d.Classes {
			return fmt.Errorf("%w: dataset %q: label %d at index %d; want [0,%d)", ErrInvalid, d.Name, y, i, d.Classes)
		}
	}
	return nil
}

// Fill writes the rows named by indices into the caller's buffers for one full batch,
// whose size is len(y): x holds len(y)*Features values, y the class index as float32, mask
// 1 for a real row and 0 for padding. Rows past len(indices) are padding: features 0,
// label 0, mask 0. It returns the number of real rows. Buffers are reused across steps,
// so every element is written.
func (d *Dataset) Fill(indices []int, x, y, mask []float32) (int, error) {
	batch := len(y)
	switch {
	case len(mask) != batch:
		return 0, fmt.Errorf("%w: Fill: len(mask) is %d but len(y) is %d; both must be the batch size", ErrInvalid, len(mask), batch)
	case len(x) != batch*d.Features:
		return 0, fmt.Errorf("%w: Fill: len(x) is %d; want batch size %d * Features %d = %d",
			ErrInvalid, len(x), batch, d.Features, batch*d.Features)
	case len(indices) > batch:
		return 0, fmt.Errorf("%w: Fill: %d indices do not fit a batch of %d", ErrInvalid, len(indices), batch)
	case len(d.X) != len(d.Y)*d.Features:
		return 0, fmt.Errorf("%w: Fill: dataset %q has len(X) %d, not len(Y)*Features = %d",
			ErrInvalid, d.Name, len(d.X), len(d.Y)*d.Features)
	}
	n := d.Len()
	for _, idx := range indices {
		if idx < 0 || idx >= n {
			return 0, fmt.Errorf("%w: Fill: index %d outside dataset %q of %d examples", ErrInvalid, idx, d.Name, n)
		}
	}

	f := d.Features
	for row, idx := range indices {
		copy(x[row*f:(row+1)*f], d.X[idx*f:(idx+1)*f])
		y[row] = float32(d.Y[idx])
		mask[row] = 1
	}
	valid := len(indices)
	clear(x[valid*f:])
	clear(y[valid:])
	clear(mask[valid:])
	return valid, nil
}

// Normalize standardises X in place with one scalar mean and standard deviation computed
// on from (the train split) and applied to every dataset in ds, so test data sees the
// train statistics: Normalize(train, train, test). A constant or empty from gives std 1,
// so the call never divides by zero.
func Normalize(from *Dataset, ds ...*Dataset) (mean, std float32) {
	m, s := meanStd(from.X)
	mean, std = float32(m), float32(s)
	inv := float32(1 / s)
	for _, d := range ds {
		for i, v := range d.X {
			d.X[i] = (v - mean) * inv
		}
	}
	return mean, std
}

// meanStd uses two passes in float64: a one-pass sum of squares loses most of its digits
// on 47 million pixels.
func meanStd(xs []float32) (mean, std float64) {
	if len(xs) == 0 {
		return 0, 1
	}
	var sum float64
	for _, v := range xs {
		sum += float64(v)
	}
	mean = sum / float64(len(xs))
	var sq float64
	for _, v := range xs {
		dv := float64(v) - mean
		sq += dv * dv
	}
	std = math.Sqrt(sq / float64(len(xs)))
	if std == 0 || math.IsNaN(std) || math.IsInf(std, 0) {
		std = 1
	}
	return mean, std
}

// Split returns the first n examples and the rest as two datasets sharing
// d's memory, for carving a test set out of one synthetic draw.
func (d *Dataset) Split(n int) (head, tail *Dataset, err error) {
	if n <= 0 || n >= d.Len() {
		return nil, nil, fmt.Errorf("%w: split at %d needs 0 < n < %d", ErrInvalid, n, d.Len())
	}
	f := d.Features
	head = &Dataset{Name: d.Name, Features: f, Classes: d.Classes, X: d.X[: n*f : n*f], Y: d.Y[:n:n], Files: d.Files}
	tail = &Dataset{Name: d.Name, Features: f, Classes: d.Classes, X: d.X[n*f:], Y: d.Y[n:], Files: d.Files}
	return head, tail, nil
}

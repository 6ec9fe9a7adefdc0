package data

import (
	"errors"
	"io"
	"io/fs"
	"math"
	"slices"
	"testing"
)

// tiny is a 4-example dataset whose row i holds i*10 + feature.
func tiny() *Dataset {
	d := &Dataset{Name: "tiny", Features: 3, Classes: 3, Y: []int32{0, 1, 2, 1}}
	for i := range d.Y {
		for j := range d.Features {
			d.X = append(d.X, float32(i*10+j))
		}
	}
	return d
}

func TestFill(t *testing.T) {
	tests := []struct {
		name     string
		indices  []int
		batch    int
		wantX    []float32
		wantY    []float32
		wantMask []float32
	}{
		{
			name: "full", indices: []int{3, 0}, batch: 2,
			wantX: []float32{30, 31, 32, 0, 1, 2}, wantY: []float32{1, 0}, wantMask: []float32{1, 1},
		},
		{
			name: "padded", indices: []int{2}, batch: 3,
			wantX:    []float32{20, 21, 22, 0, 0, 0, 0, 0, 0},
			wantY:    []float32{2, 0, 0},
			wantMask: []float32{1, 0, 0},
		},
		{
			name: "all padding", indices: nil, batch: 2,
			wantX: make([]float32, 6), wantY: []float32{0, 0}, wantMask: []float32{0, 0},
		},
		{
			name: "repeated index", indices: []int{1, 1}, batch: 2,
			wantX: []float32{10, 11, 12, 10, 11, 12}, wantY: []float32{1, 1}, wantMask: []float32{1, 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tiny()
			// Stale values from a previous batch must not survive in padding rows.
			x := slices.Repeat([]float32{-7}, tt.batch*d.Features)
			y := slices.Repeat([]float32{-7}, tt.batch)
			mask := slices.Repeat([]float32{-7}, tt.batch)
			n, err := d.Fill(tt.indices, x, y, mask)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tt.indices) {
				t.Errorf("valid rows = %d; want %d", n, len(tt.indices))
			}
			if !slices.Equal(x, tt.wantX) || !slices.Equal(y, tt.wantY) || !slices.Equal(mask, tt.wantMask) {
				t.Errorf("got x %v y %v mask %v; want x %v y %v mask %v", x, y, mask, tt.wantX, tt.wantY, tt.wantMask)
			}
		})
	}
}

func TestFillErrors(t *testing.T) {
	tests := []struct {
		name             string
		indices          []int
		xLen, yLen, mLen int
		breakDataset     bool
	}{
		{name: "mask size", indices: []int{0}, xLen: 6, yLen: 2, mLen: 3},
		{name: "x size", indices: []int{0}, xLen: 5, yLen: 2, mLen: 2},
		{name: "too many indices", indices: []int{0, 1, 2}, xLen: 6, yLen: 2, mLen: 2},
		{name: "index too big", indices: []int{4}, xLen: 6, yLen: 2, mLen: 2},
		{name: "negative index", indices: []int{-1}, xLen: 6, yLen: 2, mLen: 2},
		{name: "inconsistent dataset", indices: []int{3}, xLen: 6, yLen: 2, mLen: 2, breakDataset: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tiny()
			if tt.breakDataset {
				d.X = d.X[:5]
			}
			_, err := d.Fill(tt.indices, make([]float32, tt.xLen), make([]float32, tt.yLen), make([]float32, tt.mLen))
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error = %v; want ErrInvalid", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Dataset)
		ok     bool
	}{
		{"valid", func(*Dataset) {}, true},
		{"no features", func(d *Dataset) { d.Features = 0 }, false},
		{"no classes", func(d *Dataset) { d.Classes = 0 }, false},
		{"one class", func(d *Dataset) { d.Classes, d.Y = 1, []int32{0, 0, 0, 0} }, true},
		{"short X", func(d *Dataset) { d.X = d.X[:11] }, false},
		{"label too big", func(d *Dataset) { d.Y[2] = 3 }, false},
		{"negative label", func(d *Dataset) { d.Y[0] = -1 }, false},
	}
	for _, tt := range tests {
		d := tiny()
		tt.mutate(d)
		if err := d.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v; want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name              string
		train, test       []float32
		wantMean, wantStd float32
		wantTrain         []float32
		wantTest          []float32
	}{
		{
			name: "train statistics applied to test", train: []float32{1, 3, 1, 3}, test: []float32{2, 5},
			wantMean: 2, wantStd: 1, wantTrain: []float32{-1, 1, -1, 1}, wantTest: []float32{0, 3},
		},
		{
			// std 2: the statistics are computed, not defaulted to 1.
			name: "train statistics with std 2", train: []float32{0, 4, 0, 4}, test: []float32{6},
			wantMean: 2, wantStd: 2, wantTrain: []float32{-1, 1, -1, 1}, wantTest: []float32{2},
		},
		{
			name: "constant train keeps std 1", train: []float32{4, 4}, test: []float32{5},
			wantMean: 4, wantStd: 1, wantTrain: []float32{0, 0}, wantTest: []float32{1},
		},
		{
			name: "empty train", train: nil, test: []float32{5},
			wantMean: 0, wantStd: 1, wantTrain: nil, wantTest: []float32{5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			train := &Dataset{Features: 1, Classes: 1, X: slices.Clone(tt.train)}
			test := &Dataset{Features: 1, Classes: 1, X: slices.Clone(tt.test)}
			mean, std := Normalize(train, train, test)
			if mean != tt.wantMean || std != tt.wantStd {
				t.Errorf("mean, std = %v, %v; want %v, %v", mean, std, tt.wantMean, tt.wantStd)
			}
			if !slices.Equal(train.X, tt.wantTrain) || !slices.Equal(test.X, tt.wantTest) {
				t.Errorf("train %v test %v; want %v %v", train.X, test.X, tt.wantTrain, tt.wantTest)
			}
		})
	}
}

func TestNormalizeSynthetic(t *testing.T) {
	d, err := Synthetic(SyntheticConfig{N: 500, Features: 8, Classes: 4, Seed: 1, Noise: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	Normalize(d, d)
	mean, std := meanStd(d.X)
	if math.Abs(mean) > 1e-5 || math.Abs(std-1) > 1e-5 {
		t.Errorf("after Normalize: mean %v std %v; want 0 and 1", mean, std)
	}
}

func BenchmarkFill(b *testing.B) {
	d, err := Synthetic(SyntheticConfig{N: 4096, Features: 784, Classes: 10, Seed: 1, Noise: 1})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 128
	plan, err := Plan(Order(d.Len(), 1, 0, true), batch, RaggedPad)
	if err != nil {
		b.Fatal(err)
	}
	x := make([]float32, batch*d.Features)
	y := make([]float32, batch)
	mask := make([]float32, batch)
	b.SetBytes(int64(len(x)+len(y)+len(mask)) * 4)
	i := 0
	for b.Loop() {
		if _, err := d.Fill(plan[i%len(plan)].Indices, x, y, mask); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestSplit: the head holds the first n examples, the tail the rest, both
// share d's memory, and appending to the head cannot overwrite the tail.
func TestSplit(t *testing.T) {
	d := tiny()
	head, tail, err := d.Split(1)
	if err != nil {
		t.Fatal(err)
	}
	if head.Len() != 1 || tail.Len() != 3 || head.Features != 3 || tail.Classes != 3 {
		t.Fatalf("Split(1): head %d examples, tail %d; want 1 and 3 with d's shape", head.Len(), tail.Len())
	}
	if !slices.Equal(head.X, []float32{0, 1, 2}) || !slices.Equal(head.Y, []int32{0}) {
		t.Errorf("head = %v %v; want example 0", head.X, head.Y)
	}
	if !slices.Equal(tail.X, d.X[3:]) || !slices.Equal(tail.Y, []int32{1, 2, 1}) {
		t.Errorf("tail = %v %v; want examples 1-3", tail.X, tail.Y)
	}
	for _, ds := range []*Dataset{head, tail} {
		if err := ds.Validate(); err != nil {
			t.Errorf("a split part does not validate: %v", err)
		}
	}
	head.X = append(head.X, 99, 99, 99)
	head.Y = append(head.Y, 2)
	if tail.X[0] != 10 || tail.Y[0] != 1 {
		t.Errorf("appending to the head overwrote the tail: %v %v", tail.X[:3], tail.Y[:1])
	}
	for _, n := range []int{0, -1, 4, 5} {
		if _, _, err := tiny().Split(n); !errors.Is(err, ErrInvalid) {
			t.Errorf("Split(%d) of 4 examples: %v; want ErrInvalid", n, err)
		}
	}
}

// TestFileErrorUnwrapsKindAndCause: errors.Is finds both the kind
// (ErrCorrupt, ...) and the underlying cause.
func TestFileErrorUnwrapsKindAndCause(t *testing.T) {
	err := error(&FileError{Path: "p", Kind: ErrCorrupt, Detail: "damaged gzip stream", Err: io.ErrUnexpectedEOF})
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("errors.Is(%v): kind %v, cause %v; want both true", err, errors.Is(err, ErrCorrupt), errors.Is(err, io.ErrUnexpectedEOF))
	}
	noKind := error(&FileError{Path: "p", Detail: "read failed", Err: fs.ErrPermission})
	if !errors.Is(noKind, fs.ErrPermission) || errors.Is(noKind, ErrCorrupt) {
		t.Errorf("errors.Is(%v, fs.ErrPermission) = false or ErrCorrupt = true", noKind)
	}
}

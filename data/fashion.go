package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Split names one part of a dataset.
type Split string

// Splits of Fashion-MNIST.
const (
	SplitTrain Split = "train"
	SplitTest  Split = "test"
)

// ParseSplit accepts the split names used on the command line.
func ParseSplit(s string) (Split, error) {
	switch Split(s) {
	case SplitTrain, SplitTest:
		return Split(s), nil
	}
	return "", fmt.Errorf("%w: unknown split %q; use %q or %q", ErrInvalid, s, SplitTrain, SplitTest)
}

// DefaultFashionMNISTDir is where Debian's dataset-fashion-mnist package installs the files.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// FashionMNISTClasses is the number of clothing classes.
const FashionMNISTClasses = 10

const (
	hintFashionMissing = "install with: apt-get install dataset-fashion-mnist, or pass --data-dir"
	hintFashionCorrupt = "re-install the dataset-fashion-mnist package or pass --data-dir"
)

// FashionMNISTFiles returns the image and label file paths of a split under dir.
func FashionMNISTFiles(dir string, split Split) (images, labels string, err error) {
	var prefix string
	switch split {
	case SplitTrain:
		prefix = "train"
	case SplitTest:
		prefix = "t10k"
	default:
		return "", "", fmt.Errorf("%w: unknown split %q; use %q or %q", ErrInvalid, split, SplitTrain, SplitTest)
	}
	return filepath.Join(dir, prefix+"-images-idx3-ubyte.gz"),
		filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"), nil
}

// LoadFashionMNIST reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from dir, with
// pixel values scaled to [0,1].
func LoadFashionMNIST(dir string, split Split) (*Dataset, error) {
	return LoadFashionMNISTAdvancing(dir, split, nil)
}

// LoadFashionMNISTAdvancing is LoadFashionMNIST calling advance, when it is set, as the
// work moves: after each read of a compressed file (about one per MiB) and once the set is
// built. A worker so shows that a load of seconds is progress, not a wedge.
func LoadFashionMNISTAdvancing(dir string, split Split, advance func()) (*Dataset, error) {
	imagesPath, labelsPath, err := FashionMNISTFiles(dir, split)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(imagesPath); errors.Is(err, syscall.ENOTDIR) {
		// The directory is a file: say so, not "no such file" and how to
		// install a package the user may well have.
		fe := openError(imagesPath, err).(*FileError)
		fe.Hint = fmt.Sprintf("give --data-dir the directory holding %s, %s and the other Fashion-MNIST files", filepath.Base(imagesPath), filepath.Base(labelsPath))
		return nil, fe
	}
	images, err := readIDXImages(imagesPath, advance)
	if err != nil {
		return nil, withFashionHint(err)
	}
	labels, labelsSource, err := readIDXLabels(labelsPath, advance)
	if err != nil {
		return nil, withFashionHint(err)
	}
	if len(labels) != images.Count {
		return nil, &FileError{Path: labelsPath, Kind: ErrCorrupt, Hint: hintFashionCorrupt, Detail: fmt.Sprintf(
			"count mismatch: holds %d labels but %s holds %d images", len(labels), imagesPath, images.Count)}
	}

	d := &Dataset{
		Name:     "fashion-mnist/" + string(split),
		Features: images.Rows * images.Cols,
		Classes:  FashionMNISTClasses,
		X:        make([]float32, len(images.Pixels)),
		Y:        make([]int32, len(labels)),
		Files:    []SourceFile{images.Source, labelsSource},
	}
	for i, l := range labels {
		if int(l) >= d.Classes {
			return nil, &FileError{Path: labelsPath, Kind: ErrCorrupt, Hint: hintFashionCorrupt, Detail: fmt.Sprintf(
				"label out of range: label %d at index %d, want [0,%d)", l, i, d.Classes)}
		}
		d.Y[i] = int32(l)
	}
	// A table beats a division per pixel and gives exactly the same values.
	var scale [256]float32
	for i := range scale {
		scale[i] = float32(i) / 255
	}
	for i, p := range images.Pixels {
		d.X[i] = scale[p]
	}
	if advance != nil {
		advance()
	}
	return d, nil
}

// withFashionHint swaps the readers' generic advice for advice about the Debian package.
func withFashionHint(err error) error {
	var fe *FileError
	if !errors.As(err, &fe) {
		return err
	}
	switch fe.Kind {
	case ErrMissing:
		fe.Hint = hintFashionMissing
	case ErrCorrupt:
		fe.Hint = hintFashionCorrupt
	}
	return err
}

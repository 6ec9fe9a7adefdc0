package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// idxBytes builds an uncompressed IDX file: magic, big-endian dims, payload.
func idxBytes(magic uint32, dims []uint32, payload []byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, magic)
	_ = binary.Write(&b, binary.BigEndian, dims)
	b.Write(payload)
	return b.Bytes()
}

func gzipBytes(t testing.TB, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeFile(t testing.TB, path string, content []byte) {
	t.Helper()
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixture is a small Fashion-MNIST-shaped split: n images of rows x cols and n labels.
type fixture struct {
	n, rows, cols int
	pixels        []byte
	labels        []byte
}

func newFixture(n, rows, cols int) fixture {
	f := fixture{n: n, rows: rows, cols: cols, pixels: make([]byte, n*rows*cols), labels: make([]byte, n)}
	for i := range f.pixels {
		f.pixels[i] = byte(i * 7)
	}
	for i := range f.labels {
		f.labels[i] = byte(i % FashionMNISTClasses)
	}
	return f
}

func (f fixture) imagesRaw() []byte {
	return idxBytes(IDXImagesMagic, []uint32{uint32(f.n), uint32(f.rows), uint32(f.cols)}, f.pixels)
}

func (f fixture) labelsRaw() []byte {
	return idxBytes(IDXLabelsMagic, []uint32{uint32(f.n)}, f.labels)
}

// writeSplit writes a valid split into dir under the Fashion-MNIST file names and
// returns the two paths.
func (f fixture) writeSplit(t testing.TB, dir string, split Split) (images, labels string) {
	t.Helper()
	images, labels, err := FashionMNISTFiles(dir, split)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, images, gzipBytes(t, f.imagesRaw()))
	writeFile(t, labels, gzipBytes(t, f.labelsRaw()))
	return images, labels
}

func TestLoadFashionMNISTFixture(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(13, 4, 3)
	f.writeSplit(t, dir, SplitTest)

	d, err := LoadFashionMNIST(dir, SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 13 || d.Features != 12 || d.Classes != 10 || d.Name != "fashion-mnist/test" {
		t.Fatalf("got Len %d Features %d Classes %d Name %q; want 13, 12, 10, fashion-mnist/test",
			d.Len(), d.Features, d.Classes, d.Name)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, p := range f.pixels {
		if want := float32(p) / 255; d.X[i] != want {
			t.Fatalf("X[%d] = %v; want %v", i, d.X[i], want)
		}
	}
	for i, l := range f.labels {
		if d.Y[i] != int32(l) {
			t.Fatalf("Y[%d] = %d; want %d", i, d.Y[i], l)
		}
	}
}

func TestLoadFashionMNISTErrors(t *testing.T) {
	f := newFixture(5, 2, 2)
	badLabels := newFixture(5, 2, 2)
	badLabels.labels[3] = 10
	fewer := newFixture(4, 2, 2)
	// A labels file of 10 labels is long enough (18 bytes) to be read as an
	// images header (16 bytes), so the swap shows as a bad magic number.
	big := newFixture(10, 2, 2)
	imagesGz := gzipBytes(t, f.imagesRaw())

	tests := []struct {
		name     string
		images   []byte // nil: file not written
		labels   []byte
		kind     error
		badFile  string // "images" or "labels": the file the message must name
		contains []string
	}{
		{
			name: "images missing", images: nil, labels: gzipBytes(t, f.labelsRaw()),
			kind: ErrMissing, badFile: "images",
			contains: []string{"no such file", "apt-get install dataset-fashion-mnist", "--data-dir"},
		},
		{
			name: "labels missing", images: imagesGz, labels: nil,
			kind: ErrMissing, badFile: "labels",
			contains: []string{"apt-get install dataset-fashion-mnist"},
		},
		{
			name: "images not gzip", images: f.imagesRaw(), labels: gzipBytes(t, f.labelsRaw()),
			kind: ErrCorrupt, badFile: "images", contains: []string{"not gzip", "re-install"},
		},
		{
			name: "empty file", images: []byte{}, labels: gzipBytes(t, f.labelsRaw()),
			kind: ErrCorrupt, badFile: "images", contains: []string{"empty"},
		},
		{
			name: "images bad magic", images: gzipBytes(t, idxBytes(0x12345678, []uint32{5, 2, 2}, f.pixels)),
			labels: gzipBytes(t, f.labelsRaw()),
			kind:   ErrCorrupt, badFile: "images", contains: []string{"bad magic 0x12345678, want 0x00000803"},
		},
		{
			name: "files swapped", images: gzipBytes(t, big.labelsRaw()), labels: gzipBytes(t, big.imagesRaw()),
			kind: ErrCorrupt, badFile: "images",
			contains: []string{"bad magic 0x00000801, want 0x00000803", "1 dimensions where 3 were expected; were the images and labels files swapped?"},
		},
		{
			name: "images truncated pixels", images: gzipBytes(t, f.imagesRaw()[:16+7]),
			labels: gzipBytes(t, f.labelsRaw()),
			kind:   ErrCorrupt, badFile: "images",
			contains: []string{"truncated: header says 5 images of 2x2 but file holds 7 bytes of pixels"},
		},
		{
			name: "images truncated header", images: gzipBytes(t, f.imagesRaw()[:10]),
			labels: gzipBytes(t, f.labelsRaw()),
			kind:   ErrCorrupt, badFile: "images", contains: []string{"IDX header"},
		},
		{
			name: "labels truncated", images: imagesGz, labels: gzipBytes(t, f.labelsRaw()[:10]),
			kind: ErrCorrupt, badFile: "labels",
			contains: []string{"header says 5 labels but file holds 2 bytes of labels"},
		},
		{
			name: "gzip stream cut short", images: imagesGz[:len(imagesGz)-12],
			labels: gzipBytes(t, f.labelsRaw()),
			kind:   ErrCorrupt, badFile: "images", contains: []string{"truncated"},
		},
		{
			name: "gzip checksum wrong", images: flipCRC(imagesGz), labels: gzipBytes(t, f.labelsRaw()),
			kind: ErrCorrupt, badFile: "images", contains: []string{"damaged gzip stream"},
		},
		{
			name: "trailing data", images: gzipBytes(t, append(f.imagesRaw(), 1, 2, 3)),
			labels: gzipBytes(t, f.labelsRaw()),
			kind:   ErrCorrupt, badFile: "images", contains: []string{"trailing data"},
		},
		{
			name: "implausible header", images: gzipBytes(t, idxBytes(IDXImagesMagic, []uint32{1 << 30, 1 << 20, 28}, nil)),
			labels: gzipBytes(t, f.labelsRaw()),
			kind:   ErrCorrupt, badFile: "images", contains: []string{"ask for more than"},
		},
		{
			name: "count mismatch", images: imagesGz, labels: gzipBytes(t, fewer.labelsRaw()),
			kind: ErrCorrupt, badFile: "labels",
			contains: []string{"count mismatch: holds 4 labels but", "holds 5 images", "images-idx3"},
		},
		{
			name: "label out of range", images: imagesGz, labels: gzipBytes(t, badLabels.labelsRaw()),
			kind: ErrCorrupt, badFile: "labels",
			contains: []string{"label out of range: label 10 at index 3, want [0,10)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			imagesPath, labelsPath, err := FashionMNISTFiles(dir, SplitTrain)
			if err != nil {
				t.Fatal(err)
			}
			if tt.images != nil {
				writeFile(t, imagesPath, tt.images)
			}
			if tt.labels != nil {
				writeFile(t, labelsPath, tt.labels)
			}
			d, err := LoadFashionMNIST(dir, SplitTrain)
			if err == nil {
				t.Fatalf("got dataset of %d examples; want error", d.Len())
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error %q is not %v", err, tt.kind)
			}
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Errorf("error %q is not a *FileError", err)
			}
			want := map[string]string{"images": imagesPath, "labels": labelsPath}[tt.badFile]
			msg := err.Error()
			if !strings.HasPrefix(msg, "data: "+want+": ") {
				t.Errorf("error %q does not start by naming %s", msg, want)
			}
			// The path holds the test's name ("files_swapped"), so look
			// for the expected words after it.
			rest := strings.TrimPrefix(msg, "data: "+want+": ")
			for _, s := range tt.contains {
				if !strings.Contains(rest, s) {
					t.Errorf("error %q does not contain %q", msg, s)
				}
			}
		})
	}
}

// flipCRC corrupts the CRC-32 in a gzip trailer, which only shows once the stream is read
// to its end.
func flipCRC(gz []byte) []byte {
	out := bytes.Clone(gz)
	out[len(out)-8] ^= 0xff
	return out
}

func TestReadIDXGenericHint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x-labels-idx1-ubyte.gz")
	_, err := ReadIDXLabels(path)
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), path) {
		t.Fatalf("got %v; want ErrMissing naming %s", err, path)
	}
	if strings.Contains(err.Error(), "dataset-fashion-mnist") {
		t.Errorf("generic reader error %q mentions the Fashion-MNIST package", err)
	}
}

// TestDataDirThatIsAFile: a data directory that is a file is refused as
// such, naming the file and asking for the directory (not the file's
// permissions, nor the package to install); the refusal is ErrMissing,
// so a worker reports it as the user's input. A path under the file is
// refused naming the file too.
func TestDataDirThatIsAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(file, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{file, filepath.Join(file, "fashion")} {
		_, err := LoadFashionMNIST(dir, SplitTrain)
		want := "data: " + file + ": is a file, not a directory; give --data-dir the directory holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz"
		if !errors.Is(err, ErrMissing) || err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("data dir %s: %v\nwant ErrMissing beginning %q", dir, err, want)
		}
		_, err = ReadIDXLabels(filepath.Join(dir, "x-labels-idx1-ubyte.gz"))
		want = "data: " + file + ": is a file, not a directory; give the directory holding x-labels-idx1-ubyte.gz"
		if !errors.Is(err, ErrMissing) || err == nil || err.Error() != want {
			t.Errorf("reading under %s: %v\nwant %q", dir, err, want)
		}
	}
}

func TestLoadFashionMNISTBadSplit(t *testing.T) {
	_, err := LoadFashionMNIST(t.TempDir(), "validation")
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"validation"`) {
		t.Fatalf("got %v; want ErrInvalid naming the split", err)
	}
}

func TestParseSplit(t *testing.T) {
	tests := []struct {
		in      string
		want    Split
		wantErr bool
	}{
		{"train", SplitTrain, false},
		{"test", SplitTest, false},
		{"t10k", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := ParseSplit(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseSplit(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestLoadRealFashionMNIST(t *testing.T) {
	if _, err := os.Stat(DefaultFashionMNISTDir); err != nil {
		t.Skipf("%s not present (install with: apt-get install dataset-fashion-mnist): %v", DefaultFashionMNISTDir, err)
	}
	if testing.Short() {
		t.Skip("skipping the real dataset in -short mode")
	}
	tests := []struct {
		split Split
		n     int
	}{
		{SplitTrain, 60000},
		{SplitTest, 10000},
	}
	for _, tt := range tests {
		t.Run(string(tt.split), func(t *testing.T) {
			d, err := LoadFashionMNIST(DefaultFashionMNISTDir, tt.split)
			if err != nil {
				t.Fatal(err)
			}
			if d.Len() != tt.n || d.Features != 784 || d.Classes != 10 {
				t.Fatalf("got %d examples of %d features in %d classes; want %d of 784 in 10",
					d.Len(), d.Features, d.Classes, tt.n)
			}
			if err := d.Validate(); err != nil {
				t.Fatal(err)
			}
			// Fashion-MNIST is exactly balanced: 6000 or 1000 of each class.
			counts := make([]int, d.Classes)
			for _, y := range d.Y {
				counts[y]++
			}
			for c, got := range counts {
				if got != tt.n/10 {
					t.Errorf("class %d has %d examples; want %d", c, got, tt.n/10)
				}
			}
			lo, hi := d.X[0], d.X[0]
			for _, v := range d.X {
				lo, hi = min(lo, v), max(hi, v)
			}
			if lo != 0 || hi != 1 {
				t.Errorf("pixels span [%v,%v]; want [0,1]", lo, hi)
			}
		})
	}
}

func BenchmarkLoadFashionMNISTTrain(b *testing.B) {
	if _, err := os.Stat(DefaultFashionMNISTDir); err != nil {
		b.Skipf("%s not present: %v", DefaultFashionMNISTDir, err)
	}
	for b.Loop() {
		if _, err := LoadFashionMNIST(DefaultFashionMNISTDir, SplitTrain); err != nil {
			b.Fatal(err)
		}
	}
}

func TestReadPayloadGrows(t *testing.T) {
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i)
	}
	tests := []struct {
		name    string
		have    int
		total   uint64
		upfront uint64
		wantN   int
		wantErr bool
	}{
		{"fits upfront", 1000, 1000, 4096, 1000, false},
		{"grows from a small start", 1000, 1000, 3, 1000, false},
		{"short source", 10, 1000, 3, 10, true},
		{"empty", 0, 0, 3, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n, err := readPayload(bytes.NewReader(src[:tt.have]), tt.total, tt.upfront)
			if n != tt.wantN || (err != nil) != tt.wantErr {
				t.Fatalf("n, err = %d, %v; want %d, error %v", n, err, tt.wantN, tt.wantErr)
			}
			if err == nil && !bytes.Equal(got, src[:tt.total]) {
				t.Errorf("payload differs from source")
			}
		})
	}
}

// TestIDXPayloadLimitIsInclusive: a header may ask for exactly
// maxIDXPayload bytes (the file is then read, and here found truncated);
// one more is refused before anything is read.
func TestIDXPayloadLimitIsInclusive(t *testing.T) {
	for _, tt := range []struct {
		name string
		dims []uint32
		want string
	}{
		{"at the limit", []uint32{1 << 16, 1 << 16, 1}, "truncated: header says 65536 images of 65536x1"},
		{"past the limit", []uint32{1<<16 + 1, 1 << 16, 1}, "ask for more than 4294967296 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "images.gz")
			writeFile(t, path, gzipBytes(t, idxBytes(IDXImagesMagic, tt.dims, []byte{1, 2, 3})))
			_, err := ReadIDXImages(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("header %v: %v; want ErrCorrupt saying %q", tt.dims, err, tt.want)
			}
		})
	}
}

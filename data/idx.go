package data

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
)

// IDX magic numbers: two zero bytes, data type 0x08 (unsigned byte), then the number of
// dimensions.
const (
	IDXImagesMagic uint32 = 0x00000803
	IDXLabelsMagic uint32 = 0x00000801
)

// maxIDXPayload bounds the allocation a header may ask for, so a corrupt header gives an
// error instead of an out-of-memory crash.
const maxIDXPayload = 1 << 32

// maxUpfront bounds the first allocation for a payload; larger payloads grow as bytes
// actually arrive, so a lying header in a small file cannot make us allocate gigabytes.
const maxUpfront = 64 << 20

// Generic advice; LoadFashionMNIST replaces it with package-specific advice.
const (
	hintMissingGeneric = "check the path"
	hintCorruptGeneric = "download the file again"
)

// IDXImages is the content of an idx3 unsigned-byte image file.
type IDXImages struct {
	Count, Rows, Cols int
	Pixels            []byte // Count*Rows*Cols, row-major
	// Source is the file as read: its size and the SHA-256 of its bytes.
	Source SourceFile
}

// ReadIDXImages reads a gzip-compressed idx3 image file.
func ReadIDXImages(path string) (*IDXImages, error) { return readIDXImages(path, nil) }

func readIDXImages(path string, advance func()) (*IDXImages, error) {
	dims, payload, src, err := readIDX(path, IDXImagesMagic, func(d []int) string {
		return fmt.Sprintf("%d images of %dx%d", d[0], d[1], d[2])
	}, "pixels", advance)
	if err != nil {
		return nil, err
	}
	return &IDXImages{Count: dims[0], Rows: dims[1], Cols: dims[2], Pixels: payload, Source: src}, nil
}

// ReadIDXLabels reads a gzip-compressed idx1 label file and returns one byte per label.
func ReadIDXLabels(path string) ([]byte, error) {
	labels, _, err := readIDXLabels(path, nil)
	return labels, err
}

func readIDXLabels(path string, advance func()) ([]byte, SourceFile, error) {
	_, payload, src, err := readIDX(path, IDXLabelsMagic, func(d []int) string {
		return fmt.Sprintf("%d labels", d[0])
	}, "labels", advance)
	return payload, src, err
}

// readIDX decodes one gzip-compressed IDX file of unsigned bytes whose dimension count is
// the low byte of magic. describe renders the header for messages and unit names the
// payload's bytes. advance, when set, is called after each read of the
// compressed file (about one per MiB). It returns the file as read: every
// byte of it goes through the SHA-256 its SourceFile carries.
func readIDX(path string, magic uint32, describe func([]int) string, unit string, advance func()) ([]int, []byte, SourceFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, SourceFile{}, openError(path, err)
	}
	defer f.Close()
	hashed := newSourceHash(path, f)
	var src io.Reader = hashed
	if advance != nil {
		src = advancingReader{r: hashed, advance: advance}
	}

	buffered := bufio.NewReaderSize(src, 1<<20)
	zr, err := gzip.NewReader(buffered)
	if err != nil {
		return nil, nil, SourceFile{}, gzipOpenError(path, err)
	}
	defer zr.Close()

	ndims := int(magic & 0xff)
	header := make([]byte, 4+4*ndims)
	if _, err := io.ReadFull(zr, header); err != nil {
		return nil, nil, SourceFile{}, readError(path, err,
			fmt.Sprintf("truncated: file ends inside the %d-byte IDX header", len(header)))
	}
	if got := binary.BigEndian.Uint32(header); got != magic {
		return nil, nil, SourceFile{}, corrupt(path, badMagicDetail(got, magic))
	}
	dims := make([]int, ndims)
	total := uint64(1)
	for i := range dims {
		d := binary.BigEndian.Uint32(header[4+4*i:])
		dims[i] = int(d)
		total *= uint64(d)
		if total > maxIDXPayload {
			return nil, nil, SourceFile{}, corrupt(path, fmt.Sprintf(
				"header dimensions %v ask for more than %d bytes, which no IDX dataset holds", headerDims(header, ndims), uint64(maxIDXPayload)))
		}
	}

	payload, n, err := readPayload(zr, total, maxUpfront)
	if err != nil {
		return nil, nil, SourceFile{}, readError(path, err, fmt.Sprintf(
			"truncated: header says %s but file holds %d bytes of %s", describe(dims), n, unit))
	}
	// Reading to the end is what makes gzip verify its checksum, and it catches files
	// whose header undercounts their content.
	var extra [1]byte
	switch _, err := io.ReadFull(zr, extra[:]); {
	case err == nil:
		return nil, nil, SourceFile{}, corrupt(path, fmt.Sprintf(
			"trailing data: header says %s but file holds more than %d bytes of %s", describe(dims), total, unit))
	case !errors.Is(err, io.EOF):
		return nil, nil, SourceFile{}, readError(path, err, "truncated: the gzip stream ends before its trailer")
	}
	// The gzip reader stops at its last member's end; whatever follows is
	// part of the file the digest names.
	if _, err := io.Copy(io.Discard, buffered); err != nil {
		return nil, nil, SourceFile{}, readError(path, err, "cannot read the file to its end")
	}
	return dims, payload, hashed.file(), nil
}

// advancingReader calls advance after every read.
type advancingReader struct {
	r       io.Reader
	advance func()
}

func (a advancingReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	a.advance()
	return n, err
}

// readPayload reads exactly total bytes, allocating at most upfront before any arrive, and
// returns how many arrived when it fails.
func readPayload(r io.Reader, total, upfront uint64) ([]byte, int, error) {
	buf := make([]byte, 0, max(min(total, upfront), 1))
	for uint64(len(buf)) < total {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(total-uint64(len(buf)), uint64(len(buf)))))
		}
		end := int(min(uint64(cap(buf)), total))
		n, err := io.ReadFull(r, buf[len(buf):end])
		buf = buf[:len(buf)+n]
		if err != nil {
			return nil, len(buf), err
		}
	}
	return buf, len(buf), nil
}

func headerDims(header []byte, ndims int) []uint32 {
	d := make([]uint32, ndims)
	for i := range d {
		d[i] = binary.BigEndian.Uint32(header[4+4*i:])
	}
	return d
}

func badMagicDetail(got, want uint32) string {
	detail := fmt.Sprintf("bad magic 0x%08x, want 0x%08x", got, want)
	if got&^0xff == want&^0xff {
		detail += fmt.Sprintf(" (an IDX file with %d dimensions where %d were expected; were the images and labels files swapped?)", got&0xff, want&0xff)
	} else {
		detail += " (not an unsigned-byte IDX file)"
	}
	return detail
}

func corrupt(path, detail string) error {
	return &FileError{Path: path, Kind: ErrCorrupt, Detail: detail, Hint: hintCorruptGeneric}
}

func openError(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return &FileError{Path: path, Kind: ErrMissing, Detail: "no such file", Hint: hintMissingGeneric}
	}
	if errors.Is(err, syscall.ENOTDIR) {
		// A file stands where a directory of the path should: name it,
		// not the permissions, which are not what is wrong.
		return &FileError{Path: fileAlong(path), Kind: ErrMissing, Detail: "is a file, not a directory",
			Hint: "give the directory holding " + filepath.Base(path)}
	}
	return &FileError{Path: path, Detail: "cannot open", Err: unwrapPathError(err), Hint: "check the file's permissions"}
}

// fileAlong is the file among path's directories, which made opening
// path fail with ENOTDIR; path's directory when none is found (it was
// replaced since).
func fileAlong(path string) string {
	for p := filepath.Dir(path); ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
		if filepath.Dir(p) == p {
			return filepath.Dir(path)
		}
	}
}

func gzipOpenError(path string, err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return corrupt(path, "empty file, want a gzip-compressed IDX file")
	case errors.Is(err, gzip.ErrHeader):
		return corrupt(path, "not gzip: want a gzip-compressed IDX file (.gz)")
	}
	return readError(path, err, "cannot read gzip header")
}

// readError classifies a failed read: short reads and damaged compression mean the file
// is corrupt; anything else is an I/O error reported as is.
func readError(path string, err error, truncatedDetail string) error {
	var flateErr flate.CorruptInputError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return corrupt(path, truncatedDetail)
	case errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader), errors.As(err, &flateErr):
		e := corrupt(path, "damaged gzip stream").(*FileError)
		e.Err = err
		return e
	}
	return &FileError{Path: path, Detail: "read failed", Err: unwrapPathError(err), Hint: hintCorruptGeneric}
}

// unwrapPathError drops the *fs.PathError wrapper because FileError already names the
// path; the cause alone reads better.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

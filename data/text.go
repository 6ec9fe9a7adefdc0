package data

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// TextVocab is the vocabulary of a text dataset: every byte value is a token, so a model
// over Text embeds 256 token ids and predicts 256 classes whatever the corpus holds. UTF-8
// text is read as its bytes; binary data is read as it is.
const TextVocab = 256

// DefaultFortunesDir is where Debian's fortunes and fortunes-min packages install their
// English fortune cookies: plain text, one cookie after another between lines holding a
// lone %, beside strfile's .dat indices (which LoadText skips).
const DefaultFortunesDir = "/usr/share/games/fortunes"

// DefaultTextContext is the input bytes per example when a TextConfig leaves Context 0.
const DefaultTextContext = 128

// DefaultTextValidFraction is the share of a corpus, taken from its end, kept for
// validation when a TextConfig leaves ValidFraction 0.
const DefaultTextValidFraction = 0.1

const hintFortunesMissing = "install with: apt-get install fortunes"

// Examples is what a batch source needs of a dataset: how many examples an epoch orders
// (see Order, Shard and Plan) and a way to write chosen ones into one batch's reused
// buffers. Dataset (a vector and a class per example) and Text (a window of token ids and
// the next token at each position) both provide it; they differ in how many x and y
// values one example fills.
type Examples interface {
	Len() int
	Fill(indices []int, x, y, mask []float32) (int, error)
	// Shape says how many values one example fills, so a trainer can check
	// a model against the data before it lays out a batch.
	Shape() Shape
}

// Shape is what one example of an Examples fills in a batch: Inputs x
// values and, for a dataset of one class per example (Positions 0), one
// label, else Positions labels, one per position; labels are classes in
// [0, Classes). Tokens marks x values that are token ids, which are never
// normalised.
type Shape struct {
	Name      string // the dataset's name, for messages and checkpoints
	Inputs    int
	Positions int
	Classes   int
	Tokens    bool
}

// Labels is the number of y values one example fills.
func (s Shape) Labels() int { return max(1, s.Positions) }

var (
	_ Examples = (*Dataset)(nil)
	_ Examples = (*Text)(nil)
)

// TextConfig describes a byte-level text dataset on disk.
type TextConfig struct {
	// Path is a file, or a directory whose regular files are read in sorted path order
	// (see ReadTextCorpus).
	Path string
	// Context is the input bytes per example; an example is a window of Context+1
	// bytes. 0 means DefaultTextContext.
	Context int
	// Stride is the bytes from one window's start to the next; 0 means Context, so
	// consecutive windows share one byte and every byte after the first is a target
	// once per epoch. A smaller stride gives more, overlapping windows.
	Stride int
	// ValidFraction is the share of the corpus, from its end, kept for validation: in
	// (0, 1), 0 meaning DefaultTextValidFraction.
	ValidFraction float64
}

// withDefaults fills the fields whose zero means a default.
func (c TextConfig) withDefaults() TextConfig {
	if c.Context == 0 {
		c.Context = DefaultTextContext
	}
	if c.Stride == 0 {
		c.Stride = c.Context
	}
	if c.ValidFraction == 0 {
		c.ValidFraction = DefaultTextValidFraction
	}
	return c
}

// Validate reports the first field that cannot make a dataset; zero fields take their
// defaults first.
func (c TextConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Path == "":
		return fmt.Errorf("%w: text config: Path is empty; give a text file or a directory of them", ErrInvalid)
	case c.Context < 1:
		return fmt.Errorf("%w: text config: Context is %d; want at least 1", ErrInvalid, c.Context)
	case c.Stride < 1:
		return fmt.Errorf("%w: text config: Stride is %d; want at least 1 (0: Context)", ErrInvalid, c.Stride)
	case !(c.ValidFraction > 0 && c.ValidFraction < 1):
		return fmt.Errorf("%w: text config: ValidFraction is %v; want a value in (0, 1)", ErrInvalid, c.ValidFraction)
	}
	return nil
}

// Text is a byte corpus served as fixed windows: window i is Bytes[i*Stride :
// i*Stride+Context+1], whose first Context bytes are the inputs and whose last Context
// bytes are the targets, each the byte after its input. Bytes left after the last whole
// window (fewer than Stride) are not served. An epoch's window order is Order(Len(),
// seed, epoch, shuffle), as for a Dataset: a permutation of the window starts drawn from
// (seed, epoch) alone.
type Text struct {
	Name    string
	Context int
	Stride  int
	Bytes   []byte
	// Files are the corpus's files, as read (Sources); nil for a text made
	// in memory.
	Files []SourceFile
}

// NewText serves b as windows of context+1 bytes, one every stride bytes (0: context).
func NewText(name string, b []byte, context, stride int) (*Text, error) {
	if stride == 0 {
		stride = context
	}
	t := &Text{Name: name, Context: context, Stride: stride, Bytes: b}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// Validate checks that the text serves at least one window.
func (t *Text) Validate() error {
	switch {
	case t.Context < 1:
		return fmt.Errorf("%w: text %q: Context is %d; want at least 1", ErrInvalid, t.Name, t.Context)
	case t.Stride < 1:
		return fmt.Errorf("%w: text %q: Stride is %d; want at least 1", ErrInvalid, t.Name, t.Stride)
	case len(t.Bytes) < t.Context+1:
		return fmt.Errorf("%w: text %q: %d bytes are shorter than one window of Context+1 = %d bytes",
			ErrInvalid, t.Name, len(t.Bytes), t.Context+1)
	}
	return nil
}

// Shape is a window's: Context token ids in, Context next-byte targets
// out, over TextVocab classes.
func (t *Text) Shape() Shape {
	return Shape{Name: t.Name, Inputs: t.Context, Positions: t.Context, Classes: TextVocab, Tokens: true}
}

// Len returns the number of windows: the examples of an epoch.
func (t *Text) Len() int {
	if t.Context < 1 || t.Stride < 1 || len(t.Bytes) < t.Context+1 {
		return 0
	}
	return (len(t.Bytes)-t.Context-1)/t.Stride + 1
}

// Window returns window i's Context+1 bytes, sharing the text's memory.
func (t *Text) Window(i int) []byte {
	start := i * t.Stride
	return t.Bytes[start : start+t.Context+1 : start+t.Context+1]
}

// Fill writes the windows named by indices into the caller's buffers for one full batch,
// whose size is len(mask): x holds len(mask)*Context input token ids, y as many target
// ids (row r's targets are row r's inputs shifted by one byte), both as float32 byte
// values (exact), and mask 1 for a real row and 0 for padding; a row's mask covers all
// of its Context positions, since a window is never partial. Rows past len(indices) are
// padding: ids 0 and mask 0. It returns the number of real rows. Buffers are reused
// across steps, so every element is written.
func (t *Text) Fill(indices []int, x, y, mask []float32) (int, error) {
	batch, c := len(mask), t.Context
	switch {
	case len(x) != batch*c:
		return 0, fmt.Errorf("%w: Fill: len(x) is %d; want batch size %d * Context %d = %d", ErrInvalid, len(x), batch, c, batch*c)
	case len(y) != batch*c:
		return 0, fmt.Errorf("%w: Fill: len(y) is %d; want batch size %d * Context %d = %d", ErrInvalid, len(y), batch, c, batch*c)
	case len(indices) > batch:
		return 0, fmt.Errorf("%w: Fill: %d indices do not fit a batch of %d", ErrInvalid, len(indices), batch)
	}
	n := t.Len()
	for _, idx := range indices {
		if idx < 0 || idx >= n {
			return 0, fmt.Errorf("%w: Fill: window %d outside text %q of %d windows", ErrInvalid, idx, t.Name, n)
		}
	}
	for row, idx := range indices {
		w := t.Window(idx)
		xr, yr := x[row*c:(row+1)*c], y[row*c:(row+1)*c]
		for j := range c {
			xr[j] = float32(w[j])
			yr[j] = float32(w[j+1])
		}
		mask[row] = 1
	}
	valid := len(indices)
	clear(x[valid*c:])
	clear(y[valid*c:])
	clear(mask[valid:])
	return valid, nil
}

// LoadText reads the corpus at c.Path (ReadTextCorpus) and splits it by position: the
// last ValidFraction of its bytes (rounded down) is the validation text, the rest the
// training text, each served as its own windows so that no window straddles the split.
func LoadText(c TextConfig) (train, valid *Text, err error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	c = c.withDefaults()
	corpus, files, err := readTextCorpus(c.Path)
	if err != nil {
		return nil, nil, err
	}
	trainBytes, validBytes := SplitText(corpus, c.ValidFraction)
	if need := c.Context + 1; len(trainBytes) < need || len(validBytes) < need {
		return nil, nil, &FileError{Path: c.Path, Kind: ErrInvalid, Detail: fmt.Sprintf(
			"corpus too short: its %d bytes split into %d for training and %d for validation, and each part needs at least one window of context+1 = %d bytes",
			len(corpus), len(trainBytes), len(validBytes), need), Hint: "use a shorter context or a larger corpus"}
	}
	name := "text/" + filepath.Base(filepath.Clean(c.Path))
	if train, err = NewText(name+"/train", trainBytes, c.Context, c.Stride); err != nil {
		return nil, nil, err
	}
	if valid, err = NewText(name+"/valid", validBytes, c.Context, c.Stride); err != nil {
		return nil, nil, err
	}
	train.Files, valid.Files = files, files
	return train, valid, nil
}

// SplitText cuts corpus by position: valid is its last floor(len*validFraction) bytes,
// train the bytes before them. Both share corpus's memory, train capped so an append
// cannot spill into valid.
func SplitText(corpus []byte, validFraction float64) (train, valid []byte) {
	nValid := int(math.Floor(float64(len(corpus)) * validFraction))
	nValid = min(max(nValid, 0), len(corpus))
	cut := len(corpus) - nValid
	return corpus[:cut:cut], corpus[cut:]
}

// ReadTextCorpus reads path as bytes: a file as it is, or every regular file under a
// directory, recursively, concatenated in sorted path order with nothing between them.
// Under a directory it skips symbolic links (fortunes installs name.u8 links to name),
// names starting with a dot, and strfile indices: name.dat beside a regular file name,
// as fortune's packages install them. It returns the files read, in order.
func ReadTextCorpus(path string) (corpus []byte, files []string, err error) {
	corpus, sources, err := readTextCorpus(path)
	for _, f := range sources {
		files = append(files, f.Path)
	}
	return corpus, files, err
}

// readTextCorpus is ReadTextCorpus returning each file as read.
func readTextCorpus(path string) (corpus []byte, files []SourceFile, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, textPathError(path, err)
	}
	if !st.IsDir() {
		if !st.Mode().IsRegular() {
			// A pipe, device or socket would be read until it ends, which
			// may be never.
			return nil, nil, &FileError{Path: path, Kind: ErrInvalid, Detail: fmt.Sprintf("is a %s, not a regular file or a directory", fileKind(st.Mode())),
				Hint: "give a text file or a directory of text files"}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, &FileError{Path: path, Detail: "cannot read the text file", Err: unwrapPathError(err)}
		}
		return b, []SourceFile{sourceOfBytes(path, b)}, nil
	}
	paths, err := textFiles(path)
	if err != nil {
		return nil, nil, err
	}
	if len(paths) == 0 {
		return nil, nil, &FileError{Path: path, Kind: ErrMissing,
			Detail: "the directory holds no regular file to read (symbolic links, dot-files and strfile .dat indices are skipped)",
			Hint:   "give a text file or a directory of text files"}
	}
	for _, f := range paths {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, &FileError{Path: f, Detail: "cannot read a file of the text corpus", Err: unwrapPathError(err)}
		}
		corpus = append(corpus, b...)
		files = append(files, sourceOfBytes(f, b))
	}
	return corpus, files, nil
}

// textFiles lists the regular files under dir that ReadTextCorpus reads, sorted by path
// (WalkDir's order is lexical per directory, which differs: "a/b" before "a.txt").
func textFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &FileError{Path: p, Detail: "cannot list the text corpus", Err: unwrapPathError(err)}
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() && !isStrfileIndex(p) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	return files, nil
}

// isStrfileIndex reports whether p is name.dat beside a regular file name: the random
// access index strfile writes for a fortune file, binary and not part of the text.
func isStrfileIndex(p string) bool {
	base, ok := strings.CutSuffix(p, ".dat")
	if !ok || filepath.Base(base) == "" {
		return false
	}
	st, err := os.Lstat(base)
	return err == nil && st.Mode().IsRegular()
}

// textPathError reports a corpus path that cannot be opened, with advice about the
// Debian package when it is the fortunes directory.
func textPathError(path string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) {
		return &FileError{Path: fileAlong(path), Kind: ErrMissing, Detail: "is a file, not a directory",
			Hint: "give the corpus itself (a text file) or a directory of text files"}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return &FileError{Path: path, Detail: "cannot open the text corpus", Err: unwrapPathError(err)}
	}
	hint := "give a text file or a directory of text files"
	if filepath.Clean(path) == DefaultFortunesDir {
		hint = hintFortunesMissing
	}
	return &FileError{Path: path, Kind: ErrMissing, Detail: "no such file or directory", Hint: hint}
}

// fileKind names a file mode's type for a message.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

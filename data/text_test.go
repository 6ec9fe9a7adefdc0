package data

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestTextConfigValidate(t *testing.T) {
	good := TextConfig{Path: "corpus.txt"}
	tests := []struct {
		name   string
		mutate func(*TextConfig)
		ok     bool
	}{
		{"defaults", func(*TextConfig) {}, true},
		{"explicit", func(c *TextConfig) { c.Context, c.Stride, c.ValidFraction = 8, 1, 0.5 }, true},
		{"no path", func(c *TextConfig) { c.Path = "" }, false},
		{"negative context", func(c *TextConfig) { c.Context = -1 }, false},
		{"negative stride", func(c *TextConfig) { c.Stride = -2 }, false},
		{"all validation", func(c *TextConfig) { c.ValidFraction = 1 }, false},
		{"negative fraction", func(c *TextConfig) { c.ValidFraction = -0.1 }, false},
		{"NaN fraction", func(c *TextConfig) { c.ValidFraction = math.NaN() }, false},
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
	}
}

func TestSplitText(t *testing.T) {
	corpus := []byte("0123456789")
	for _, tt := range []struct {
		fraction     float64
		train, valid string
	}{
		{0.1, "012345678", "9"},
		{0.25, "01234567", "89"}, // 2.5 bytes round down
		{0.5, "01234", "56789"},
		{0.05, "0123456789", ""},
	} {
		train, valid := SplitText(corpus, tt.fraction)
		if string(train) != tt.train || string(valid) != tt.valid {
			t.Errorf("fraction %v: split %q | %q; want %q | %q", tt.fraction, train, valid, tt.train, tt.valid)
		}
		if cap(train) != len(train) {
			t.Errorf("fraction %v: train has room to append over valid (cap %d, len %d)", tt.fraction, cap(train), len(train))
		}
	}
}

func TestTextWindows(t *testing.T) {
	for _, tt := range []struct {
		context, stride int
		want            []string
	}{
		{3, 0, []string{"abcd", "defg", "ghij"}}, // stride = context: windows share one byte
		{3, 4, []string{"abcd", "efgh"}},         // "ij" is shorter than a stride: not served
		{8, 1, []string{"abcdefghi", "bcdefghij"}},
		{9, 0, []string{"abcdefghij"}},
	} {
		text, err := NewText("letters", []byte("abcdefghij"), tt.context, tt.stride)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for i := range text.Len() {
			got = append(got, string(text.Window(i)))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("context %d stride %d: windows %q; want %q", tt.context, tt.stride, got, tt.want)
		}
	}
	if _, err := NewText("letters", []byte("abcdefghij"), 10, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("10 bytes for a window of 11: got %v; want ErrInvalid", err)
	}
}

func TestTextFill(t *testing.T) {
	text, err := NewText("letters", []byte("abcdefghij"), 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 3
	x, y, mask := make([]float32, batch*3), make([]float32, batch*3), make([]float32, batch)
	for i := range x {
		x[i], y[i] = -1, -1 // stale values of an earlier step
	}
	for i := range mask {
		mask[i] = -1
	}
	valid, err := text.Fill([]int{2, 0}, x, y, mask)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(s string) []float32 {
		var out []float32
		for _, b := range []byte(s) {
			out = append(out, float32(b))
		}
		return out
	}
	wantX := append(append(ids("ghi"), ids("abc")...), 0, 0, 0)
	wantY := append(append(ids("hij"), ids("bcd")...), 0, 0, 0)
	if valid != 2 || !slices.Equal(x, wantX) || !slices.Equal(y, wantY) || !slices.Equal(mask, []float32{1, 1, 0}) {
		t.Fatalf("Fill = %d\nx %v\ny %v\nmask %v\nwant 2\nx %v\ny %v\nmask [1 1 0]", valid, x, y, mask, wantX, wantY)
	}

	for _, tt := range []struct {
		name       string
		indices    []int
		x, y, mask int
	}{
		{"short x", []int{0}, 8, 9, 3},
		{"short y", []int{0}, 9, 6, 3},
		{"too many indices", []int{0, 1, 2, 0}, 9, 9, 3},
		{"window past the end", []int{3}, 9, 9, 3},
		{"negative window", []int{-1}, 9, 9, 3},
	} {
		_, err := text.Fill(tt.indices, make([]float32, tt.x), make([]float32, tt.y), make([]float32, tt.mask))
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v; want ErrInvalid", tt.name, err)
		}
	}
}

// TestTextEpochOrder: an epoch's window order follows from (seed, epoch) alone, and with
// stride = context an epoch's windows predict every byte after the first exactly once.
func TestTextEpochOrder(t *testing.T) {
	corpus := make([]byte, 1001)
	for i := range corpus {
		corpus[i] = byte(i * 7)
	}
	text, err := NewText("bytes", corpus, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	epoch := func(seed uint64, e int) []float32 {
		order := Order(text.Len(), seed, e, true)
		x, y, mask := make([]float32, len(order)*10), make([]float32, len(order)*10), make([]float32, len(order))
		if _, err := text.Fill(order, x, y, mask); err != nil {
			t.Fatal(err)
		}
		return y
	}
	a, b := epoch(5, 0), epoch(5, 0)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed and epoch served different targets")
	}
	if slices.Equal(a, epoch(5, 1)) || slices.Equal(a, epoch(6, 0)) {
		t.Fatal("another epoch or seed served the same order")
	}
	got := slices.Clone(a)
	slices.Sort(got)
	var want []float32
	for _, c := range corpus[1:] {
		want = append(want, float32(c))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatal("one epoch's targets are not the corpus's bytes after the first, each once")
	}
}

// writeTree makes files under a temporary directory: name -> content, or a name ending in
// "@" -> the symbolic link's target.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if link, ok := strings.CutSuffix(name, "@"); ok {
			if err := os.Symlink(content, filepath.Join(dir, link)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadTextCorpus(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"b.txt":          "B",
		"a/x":            "X",
		"a.txt":          "A",
		"cookies":        "C",
		"cookies.dat":    "\x00\x00\x00\x02index", // strfile's index of cookies: skipped
		"cookies.u8@":    "cookies",               // a link: skipped
		"table.dat":      "T",                     // no file "table" beside it: read
		".hidden":        "H",
		".git/config":    "G",
		"binary":         "\x00\xff\x80",
		"a/deep/nest.md": "N",
	})
	corpus, files, err := ReadTextCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, f := range files {
		r, _ := filepath.Rel(dir, f)
		rel = append(rel, r)
	}
	// Sorted by path: "a.txt" < "a/deep/nest.md" < "a/x", as a sort of the paths gives.
	wantFiles := []string{"a.txt", "a/deep/nest.md", "a/x", "b.txt", "binary", "cookies", "table.dat"}
	if !slices.Equal(rel, wantFiles) {
		t.Errorf("files %q; want %q", rel, wantFiles)
	}
	if want := "ANXB\x00\xff\x80CT"; string(corpus) != want {
		t.Errorf("corpus %q; want %q", corpus, want)
	}

	one, files, err := ReadTextCorpus(filepath.Join(dir, "cookies.dat"))
	if err != nil || string(one) != "\x00\x00\x00\x02index" || len(files) != 1 {
		t.Errorf("a file named as the path is read whatever its name: got %q %v %v", one, files, err)
	}
}

func TestLoadTextErrors(t *testing.T) {
	empty := t.TempDir()
	onlySkipped := writeTree(t, map[string]string{".notes": "hidden", "f": "", "f.dat": "idx", "l@": "f"})
	short := writeTree(t, map[string]string{"f": strings.Repeat("x", 40)})
	// A pipe nobody writes to would block a read forever.
	fifo := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		c       TextConfig
		kind    error
		message string
	}{
		{"missing", TextConfig{Path: filepath.Join(empty, "nope")}, ErrMissing, "no such file or directory"},
		{"empty directory", TextConfig{Path: empty}, ErrMissing, "no regular file"},
		{"an empty file beside skipped ones", TextConfig{Path: onlySkipped, Context: 1}, ErrInvalid, "corpus too short"},
		// 40 bytes: 36 train, 4 valid; a window of 5 fits train but not valid.
		{"validation shorter than a window", TextConfig{Path: short, Context: 4}, ErrInvalid, "corpus too short"},
		{"bad config", TextConfig{Path: short, Stride: -1}, ErrInvalid, "Stride"},
		{"a named pipe", TextConfig{Path: fifo}, ErrInvalid, "is a named pipe, not a regular file or a directory"},
		// A path through a file names the file, not "cannot open".
		{"a path under a file", TextConfig{Path: filepath.Join(short, "f", "more")}, ErrMissing,
			filepath.Join(short, "f") + ": is a file, not a directory; give the corpus itself (a text file) or a directory of text files"},
	} {
		_, _, err := LoadText(tt.c)
		if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.message) {
			t.Errorf("%s: got %v; want %v mentioning %q", tt.name, err, tt.kind, tt.message)
		}
	}
	if err := textPathError(DefaultFortunesDir, os.ErrNotExist); !strings.Contains(err.Error(), "apt-get install fortunes") {
		t.Errorf("a missing fortunes directory should say which package installs it: %v", err)
	}
	if _, _, err := LoadText(TextConfig{Path: short, Context: 3}); err != nil {
		t.Errorf("40 bytes with context 3: %v", err)
	}
}

func TestLoadTextSplitsByPosition(t *testing.T) {
	corpus := make([]byte, 256*4) // every byte value: binary data is text too
	for i := range corpus {
		corpus[i] = byte(i)
	}
	dir := writeTree(t, map[string]string{"part1": string(corpus[:500]), "part2": string(corpus[500:])})
	train, valid, err := LoadText(TextConfig{Path: dir, Context: 16, ValidFraction: 0.25})
	if err != nil {
		t.Fatal(err)
	}
	if string(train.Bytes) != string(corpus[:768]) || string(valid.Bytes) != string(corpus[768:]) {
		t.Fatalf("split %d | %d bytes; want the last quarter (256 bytes) for validation", len(train.Bytes), len(valid.Bytes))
	}
	base := filepath.Base(dir)
	if train.Name != "text/"+base+"/train" || valid.Name != "text/"+base+"/valid" || train.Stride != 16 {
		t.Errorf("names %q %q stride %d", train.Name, valid.Name, train.Stride)
	}
	// (768-17)/16+1 = 47 training windows, (256-17)/16+1 = 15 validation windows.
	if train.Len() != 47 || valid.Len() != 15 {
		t.Errorf("windows %d and %d; want 47 and 15", train.Len(), valid.Len())
	}
}

// TestFortunesCorpus reads the corpus of Debian's fortunes package, which
// scripts/install-deps.sh test installs, and checks that counting models learn from it.
func TestFortunesCorpus(t *testing.T) {
	if _, err := os.Stat(DefaultFortunesDir); err != nil {
		t.Skipf("%s: %v (apt-get install fortunes)", DefaultFortunesDir, err)
	}
	corpus, files, err := ReadTextCorpus(DefaultFortunesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".dat") || strings.HasSuffix(f, ".u8") {
			t.Fatalf("read %s, an index or a link", f)
		}
	}
	train, valid, err := LoadText(TextConfig{Path: DefaultFortunesDir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := TextBaselines(train.Bytes, valid.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files, %d bytes (%d train, %d valid; %d and %d windows of %d): nats/byte uniform %.4f unigram %.4f bigram %.4f",
		len(files), len(corpus), len(train.Bytes), len(valid.Bytes), train.Len(), valid.Len(), train.Context+1, b.Uniform, b.Unigram, b.Bigram)
	if len(corpus) < 1<<20 || !(b.Bigram < b.Unigram && b.Unigram < b.Uniform) {
		t.Fatalf("%d bytes, baselines %+v; want over a MiB of English on which a bigram beats a unigram beats uniform", len(corpus), b)
	}
}

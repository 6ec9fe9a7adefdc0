package data

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// digestOf is the SourceFile of path computed independently of the loaders.
func digestOf(t *testing.T, path string) SourceFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return SourceFile{Path: path, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

func TestFashionMNISTSources(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(13, 4, 3)
	images, labels := f.writeSplit(t, dir, SplitTest)
	d, err := LoadFashionMNIST(dir, SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	want := []SourceFile{digestOf(t, images), digestOf(t, labels)}
	if !slices.Equal(Sources(d), want) {
		t.Fatalf("sources %v, want %v", Sources(d), want)
	}
	head, tail, err := d.Split(5)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(head.Files, want) || !slices.Equal(tail.Files, want) {
		t.Fatal("a split of a dataset lost the files it was read from")
	}
}

// A gzip file with bytes after its last member: the digest covers the whole
// file, not only what the decompressor consumed.
func TestIDXSourceCoversTheWholeFile(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(3, 2, 2)
	path := filepath.Join(dir, "x.gz")
	// Two gzip members are one valid stream: the digest must cover both.
	raw := f.labelsRaw()
	z := append(gzipBytes(t, raw[:5]), gzipBytes(t, raw[5:])...)
	writeFile(t, path, z)
	_, src, err := readIDXLabels(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := digestOf(t, path); src != want {
		t.Fatalf("source %v, want %v", src, want)
	}
}

func TestTextSources(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.txt"), []byte(strings.Repeat("second file ", 40)))
	writeFile(t, filepath.Join(dir, "a.txt"), []byte(strings.Repeat("first file ", 40)))
	train, valid, err := LoadText(TextConfig{Path: dir, Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	want := []SourceFile{digestOf(t, filepath.Join(dir, "a.txt")), digestOf(t, filepath.Join(dir, "b.txt"))}
	if !slices.Equal(Sources(train), want) || !slices.Equal(Sources(valid), want) {
		t.Fatalf("sources %v and %v, want %v", Sources(train), Sources(valid), want)
	}
	if got := SourcesOf(train, valid); !slices.Equal(got, want) {
		t.Fatalf("SourcesOf %v, want each file once: %v", got, want)
	}
	one := filepath.Join(dir, "a.txt")
	if got, err := HashFile(one); err != nil || got != want[0] {
		t.Fatalf("HashFile %v, %v; want %v", got, err, want[0])
	}
}

func TestCompareSources(t *testing.T) {
	a := SourceFile{Path: "a", Size: 3, SHA256: "aaaa"}
	b := SourceFile{Path: "b", Size: 4, SHA256: "bbbb"}
	b2 := SourceFile{Path: "b", Size: 4, SHA256: "cccc"}
	c := SourceFile{Path: "c", Size: 5, SHA256: "dddd"}
	if got := CompareSources([]SourceFile{a, b}, []SourceFile{b, a}); got != nil {
		t.Fatalf("same files in another order: %v", got)
	}
	got := CompareSources([]SourceFile{a, b}, []SourceFile{b2, c})
	if len(got) != 3 {
		t.Fatalf("changes %v, want 3", got)
	}
	text := DescribeChanges(got)
	for _, want := range []string{
		"a was read before (3 bytes, SHA-256 aaaa) but is not now",
		"b was 4 bytes, SHA-256 bbbb, and is now 4 bytes, SHA-256 cccc",
		"c is read now but was not before (5 bytes, SHA-256 dddd)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("%q lacks %q", text, want)
		}
	}
	if Sources(&Dataset{}) != nil || SourcesOf() != nil {
		t.Error("examples made in memory have no source files")
	}
}

package data

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SourceFile is one file a set of examples was read from, as it was read:
// its path, its size and the SHA-256 of the bytes the loader consumed (the
// same bytes it parsed, so a file replaced between a check and a read
// cannot pass for the one checked).
type SourceFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// String is the file as messages name it: its path, size and a short digest.
func (f SourceFile) String() string {
	return fmt.Sprintf("%s (%d bytes, SHA-256 %s)", f.Path, f.Size, shortDigest(f.SHA256))
}

func shortDigest(s string) string {
	if len(s) > 12 {
		return s[:12] + "..."
	}
	return s
}

// Sources lists the files an Examples was read from, in the order they were
// read; nil for examples made in memory (the synthetic dataset, a test's).
func Sources(e Examples) []SourceFile {
	switch d := e.(type) {
	case *Dataset:
		return d.Files
	case *Text:
		return d.Files
	}
	return nil
}

// SourcesOf joins the files several sets were read from, each path once, in
// the order first read: a dataset's train and test sets (a text corpus's two
// parts share their files).
func SourcesOf(sets ...Examples) []SourceFile {
	var out []SourceFile
	for _, e := range sets {
		for _, f := range Sources(e) {
			if !slices.ContainsFunc(out, func(g SourceFile) bool { return g.Path == f.Path }) {
				out = append(out, f)
			}
		}
	}
	return out
}

// SourceChange is one difference between two lists of source files: a file
// whose size or content differs, or one that only one list names.
type SourceChange struct {
	Path string
	Was  *SourceFile // nil: the file is new
	Now  *SourceFile // nil: the file is gone
}

// String says what changed, in a sentence's worth of words.
func (c SourceChange) String() string {
	switch {
	case c.Was == nil:
		return fmt.Sprintf("%s is read now but was not before (%d bytes, SHA-256 %s)", c.Path, c.Now.Size, shortDigest(c.Now.SHA256))
	case c.Now == nil:
		return fmt.Sprintf("%s was read before (%d bytes, SHA-256 %s) but is not now", c.Path, c.Was.Size, shortDigest(c.Was.SHA256))
	}
	return fmt.Sprintf("%s was %d bytes, SHA-256 %s, and is now %d bytes, SHA-256 %s",
		c.Path, c.Was.Size, shortDigest(c.Was.SHA256), c.Now.Size, shortDigest(c.Now.SHA256))
}

// CompareSources lists how now differs from was, file by file: by path,
// then size and digest; nil when both name the same files with the same
// bytes. The order is was's, then the files only now names.
func CompareSources(was, now []SourceFile) []SourceChange {
	var out []SourceChange
	find := func(list []SourceFile, path string) *SourceFile {
		if i := slices.IndexFunc(list, func(f SourceFile) bool { return f.Path == path }); i >= 0 {
			return &list[i]
		}
		return nil
	}
	for i := range was {
		w := &was[i]
		n := find(now, w.Path)
		if n == nil || n.Size != w.Size || n.SHA256 != w.SHA256 {
			out = append(out, SourceChange{Path: w.Path, Was: w, Now: n})
		}
	}
	for i := range now {
		if find(was, now[i].Path) == nil {
			out = append(out, SourceChange{Path: now[i].Path, Now: &now[i]})
		}
	}
	return out
}

// DescribeChanges joins changes into one line.
func DescribeChanges(changes []SourceChange) string {
	parts := make([]string, len(changes))
	for i, c := range changes {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// HashFile reads path whole and returns it as a SourceFile.
func HashFile(path string) (SourceFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return SourceFile{}, err
	}
	defer f.Close()
	h := newSourceHash(path, f)
	if _, err := io.Copy(io.Discard, h); err != nil {
		return SourceFile{}, err
	}
	return h.file(), nil
}

// sourceHash is a reader that hashes and counts every byte read through it.
type sourceHash struct {
	path string
	r    io.Reader
	h    hash.Hash
	n    int64
}

func newSourceHash(path string, r io.Reader) *sourceHash {
	return &sourceHash{path: path, r: r, h: sha256.New()}
}

func (s *sourceHash) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.h.Write(p[:n])
	s.n += int64(n)
	return n, err
}

// file is what was read through s so far.
func (s *sourceHash) file() SourceFile {
	return SourceFile{Path: s.path, Size: s.n, SHA256: hex.EncodeToString(s.h.Sum(nil))}
}

// sourceOfBytes is the SourceFile of a file read whole into b.
func sourceOfBytes(path string, b []byte) SourceFile {
	sum := sha256.Sum256(b)
	return SourceFile{Path: path, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

// RelativeTo names each file by its path under dir (the data directory
// the files were found in; a corpus of one file, dir itself, by its base
// name), so that the files of one dataset in two directories compare by
// name.
func RelativeTo(dir string, files []SourceFile) []SourceFile {
	out := make([]SourceFile, len(files))
	for i, f := range files {
		out[i] = f
		if f.Path == dir {
			out[i].Path = filepath.Base(f.Path)
		} else if rel, err := filepath.Rel(dir, f.Path); err == nil && !strings.HasPrefix(rel, "..") {
			out[i].Path = rel
		}
	}
	return out
}

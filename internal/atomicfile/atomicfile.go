// Package atomicfile replaces a file so that a reader sees either the old
// content or the new, never a mix, and a crash leaves one of the two: the
// new content goes to a temporary file in the same directory, which is
// synced, renamed over the target, and then the directory is synced so
// the rename itself survives a crash. Run directories, checkpoints and
// benchmark reports are all written this way.
//
// github.com/google/renameio does the first three steps but, by its own
// statement, only for atomicity: it never syncs the directory, so a rename
// may not survive a power loss. A checkpoint that a resumed run trusts
// needs durability too, hence this small package.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tempSuffix ends a temporary file's name; it starts with a dot too.
const tempSuffix = ".tmp"

// IsTemp reports whether name (a base name) is one of Write's temporary
// files: one that a kill during a write can leave behind, and that the
// owner of the directory may remove once no write is in progress.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.HasSuffix(name, tempSuffix) && len(name) > len("."+tempSuffix)
}

// WriteFile replaces path with data, with permissions perm.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with what write writes, with permissions perm. The
// directory must exist. When write fails, path is left as it was and the
// temporary file is removed.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// Same directory: a rename within one file system is atomic, and a
	// leading dot keeps the temporary file out of casual listings.
	tmp, err := os.CreateTemp(dir, "."+base+".*"+tempSuffix)
	if err != nil {
		return err
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; the target gets what was asked for.
	if err := os.Chmod(tmp.Name(), perm); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	renamed = true
	return SyncDir(dir)
}

// SyncDir flushes a directory's entries (a rename, a new file) to disk.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

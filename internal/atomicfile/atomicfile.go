// Package atomicfile replaces a file so that a reader sees either the old
// content or the new, never a mix, and a crash leaves one of the two. Run
// directories, checkpoints and benchmark reports are all written this way.
//
// github.com/google/renameio writes the new content to a temporary file in
// the same directory, syncs it and renames it over the target. It leaves
// the directory unsynced, by its own statement, so the rename itself may
// not survive a power loss; a checkpoint that a resumed run trusts needs
// that too, so Write syncs the directory after the rename.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/renameio/v2"
)

// IsTemp reports whether name (a base name) is one of Write's temporary
// files: one that a kill during a write can leave behind, and that the
// owner of the directory may remove once no write is in progress.
// renameio names them a dot, the target's name and a random decimal
// number; tolaria's own writer before it named them a dot, the target's
// name, a random number and ".tmp", which run directories written then
// may still hold.
func IsTemp(name string) bool {
	base, ok := strings.CutPrefix(name, ".")
	if !ok || strings.HasPrefix(base, "nfs") {
		// .nfs…: an NFS client's name for a removed file still open,
		// which only the client may remove.
		return false
	}
	// renameio's number is a random int64: under 6 digits one time in 10^13.
	minDigits := 6
	if b, old := strings.CutSuffix(base, ".tmp"); old {
		base, minDigits = b, 1
	}
	stem := strings.TrimRight(base, "0123456789")
	return stem != "" && len(base)-len(stem) >= minDigits
}

// WriteFile replaces path with data, with permissions perm.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write replaces path with what write writes, with permissions perm (the
// umask does not apply). The directory must exist. When write fails, path
// is left as it was and the temporary file is removed.
func Write(path string, perm fs.FileMode, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	// The temporary file goes in the target's directory: a rename within
	// one file system is atomic.
	f, err := renameio.NewPendingFile(path, renameio.WithTempDir(dir), renameio.WithStaticPermissions(perm))
	if err != nil {
		return err
	}
	defer f.Cleanup() // a no-op once the file has replaced path
	if err := write(f); err != nil {
		return err
	}
	if err := f.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
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

package atomicfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "summary.json")
	for _, c := range []struct {
		content string
		perm    os.FileMode
	}{{"first\n", 0o644}, {"second, longer\n", 0o600}} {
		if err := WriteFile(path, []byte(c.content), c.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != c.content {
			t.Fatalf("read %q, %v; want %q", got, err, c.content)
		}
		st, _ := os.Stat(path)
		if st.Mode().Perm() != c.perm {
			t.Errorf("mode %v, want %v", st.Mode().Perm(), c.perm)
		}
	}
	onlyFiles(t, dir, "summary.json")
}

func TestFailedWriteKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.tlck")
	if err := WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	err := Write(path, 0o644, func(w io.Writer) error {
		_, _ = w.Write([]byte("half of the new"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the writer's error", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("after a failed write the file holds %q", got)
	}
	onlyFiles(t, dir, "checkpoint.tlck")
}

func TestWriteNeedsTheDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "report.json")
	if err := WriteFile(path, []byte("x"), 0o644); err == nil {
		t.Fatal("wrote into a directory that does not exist")
	}
	if err := SyncDir(filepath.Dir(path)); err == nil {
		t.Fatal("synced a directory that does not exist")
	}
}

// TestReaderSeesOneVersionOrTheOther: a reader polling the file while it
// is replaced again and again only ever reads a whole version.
func TestReaderSeesOneVersionOrTheOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events")
	versions := [][]byte{bytes.Repeat([]byte("a"), 1<<20), bytes.Repeat([]byte("b"), 1<<20)}
	if err := WriteFile(path, versions[0], 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad []int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			got, err := os.ReadFile(path)
			if err != nil || !(bytes.Equal(got, versions[0]) || bytes.Equal(got, versions[1])) {
				bad = append(bad, len(got))
			}
		}
	}()
	for i := range 40 {
		if err := WriteFile(path, versions[i%2], 0o644); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("the reader saw %d partial files (lengths %v)", len(bad), bad[:min(len(bad), 5)])
	}
}

func onlyFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if len(got) != len(want) || (len(want) > 0 && got[0] != want[0]) {
		t.Fatalf("directory holds %v, want %v (no temporary file left behind)", got, want)
	}
}

// TestIsTempKnowsTheWritersTemporaryFiles lists the directory while Write
// is writing and checks that IsTemp recognises the temporary file there,
// and nothing else: so a directory's owner that removes what IsTemp names
// removes a killed write's leftovers and never a real file.
func TestIsTempKnowsTheWritersTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"summary.json", "checkpoint-000120.tlck", "events.jsonl", "replay.buf", ".lock"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var temps []string
	err := Write(filepath.Join(dir, "summary.json"), 0o644, func(w io.Writer) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if IsTemp(e.Name()) {
				temps = append(temps, e.Name())
			}
		}
		_, err = w.Write([]byte("new"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(temps) != 1 || !strings.HasPrefix(temps[0], ".summary.json") {
		t.Fatalf("during a write IsTemp named %v; want the one temporary file, .summary.json…", temps)
	}
	// Run directories written before tolaria used renameio hold names
	// like this one.
	for name, want := range map[string]bool{".summary.json.3141592.tmp": true, ".summary.json": false, "summary.json.tmp": false, ".tmp": false, ".v2": false, ".nfs0000000000a1b2c300000004": false} {
		if got := IsTemp(name); got != want {
			t.Errorf("IsTemp(%q) = %t, want %t", name, got, want)
		}
	}
}

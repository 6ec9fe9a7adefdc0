package jobserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// TestClassifyTellsAnUnreadCheckpoint: a checkpoint refused for its
// content and one that could not be read are both KindCheckpoint, the
// second marked Unread, so a coordinator retries it and advises nothing
// that would discard the file.
func TestClassifyTellsAnUnreadCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), trainer.CheckpointFile)
	if err := os.WriteFile(path, []byte("not a checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, content := trainer.LoadCheckpoint(path)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	_, unread := trainer.LoadCheckpoint(path)
	for _, c := range []struct {
		name   string
		err    error
		unread bool
	}{
		{"content", content, false},
		{"unread", unread, true},
		{"unread, wrapped", fmt.Errorf("resuming: %w", unread), true},
	} {
		we := classify(c.err)
		if we.Kind != worker.KindCheckpoint || we.Unread != c.unread || we.Message != c.err.Error() {
			t.Errorf("%s: %+v, want kind %s, unread %v, the message as it is", c.name, we, worker.KindCheckpoint, c.unread)
		}
	}
	if we := classify(errors.New("x")); we.Unread {
		t.Errorf("a failure: %+v, marked unread", we)
	}
}

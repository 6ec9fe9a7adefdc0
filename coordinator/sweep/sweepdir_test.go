package sweep

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
)

// TestASweepDirectoryHoldingASweepSaysResume: a new sweep given the
// directory of an earlier one is told it holds a sweep and how to
// continue it; a directory of other files only that it is not empty.
func TestASweepDirectoryHoldingASweepSaysResume(t *testing.T) {
	held := t.TempDir()
	if err := os.WriteFile(filepath.Join(held, ResultsJSON), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := planSweepDir(held, time.Now())
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), held+" holds a sweep") || !strings.Contains(err.Error(), "continue it with resume") {
		t.Errorf("a sweep's directory: %v", err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = planSweepDir(other, time.Now())
	if !errors.Is(err, refusal.ErrConfig) || !strings.Contains(err.Error(), "is not empty") || strings.Contains(err.Error(), "resume") {
		t.Errorf("a directory of other files: %v", err)
	}
}

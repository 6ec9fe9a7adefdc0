package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestDeviceMemoryFlag: --device-memory NaN is refused as not a size
// (exit 2) before anything else is looked at, and 0 is taken: it means
// what the device reports, as the flag's help says.
func TestDeviceMemoryFlag(t *testing.T) {
	proc := process{shared: trainer.NewShared(), started: time.Now()}
	defer proc.shared.Close()
	missing := filepath.Join(t.TempDir(), "no-such-sweep.yaml")
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), proc, []string{"sweep", missing, "--device-memory", "NaN"}, &stdout, &stderr)
	if msg := stderr.String(); code != exitUsage || !strings.Contains(msg, `--device-memory: "NaN" is not a size`) || strings.Contains(msg, "negative") {
		t.Fatalf("--device-memory NaN: exit %d\n%s", code, msg)
	}
	stderr.Reset()
	code = run(context.Background(), proc, []string{"sweep", missing, "--device-memory", "0"}, &stdout, &stderr)
	if msg := stderr.String(); code != exitUsage || strings.Contains(msg, "device-memory") || !strings.Contains(msg, "no-such-sweep.yaml") {
		t.Fatalf("--device-memory 0 should pass to the sweep file's refusal: exit %d\n%s", code, msg)
	}
	help := new(bytes.Buffer)
	if code := run(context.Background(), proc, []string{"sweep", "--help"}, help, &stderr); code != exitOK {
		t.Fatalf("sweep --help: exit %d", code)
	}
	if h := strings.Join(strings.Fields(help.String()), " "); !strings.Contains(h, "0 or unset: what the device reports free") {
		t.Errorf("sweep --help does not say what --device-memory 0 means:\n%s", help)
	}
}

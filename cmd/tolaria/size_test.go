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

// TestParseSize: sizes in IEC and SI units read as documented, 0 is a
// size (what --device-memory takes for "what the device reports"), and
// everything that is not a size is refused with what to give, never read
// as another number (NaN once came out as -2^63).
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "8GiB": 8 << 30, "512MiB": 512 << 20, "225KiB": 225 << 10,
		"16GB": 16e9, "1.5GiB": 3 << 29, "2 mib": 2 << 20, " 4KB ": 4000,
	} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"NaN", "nan", "Inf", "+Inf", "-1", "-1GiB", "", " ", "abc", "8 parsecs", "1,5GB", "0x10", "16EiB", "99999999999999999999999"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d; want a refusal", in, got)
		} else if !strings.Contains(err.Error(), "8GiB") {
			t.Errorf("parseBytes(%q): %v; want the refusal to say what to give", in, err)
		}
	}
}

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

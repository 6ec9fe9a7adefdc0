package trainer

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sealed lays out a checkpoint file around header and payload with a
// correct SHA-256, as only a deliberate forger would for a bad header.
func sealed(header string, headerSize int, payload []byte) []byte {
	raw := []byte(checkpointMagic)
	raw = binary.LittleEndian.AppendUint32(raw, uint32(headerSize))
	raw = append(raw, header...)
	raw = append(raw, payload...)
	sum := sha256.Sum256(raw)
	return append(raw, sum[:]...)
}

// TestCheckpointRefusesWhatNoWriterProduces: past the checksum, LoadCheckpoint
// still refuses (never panics on) files that SaveCheckpoint cannot write:
// too short to hold a digest, an empty header, a header size beyond the file, a payload of
// another size than the header promises, no parameters, negative states.
func TestCheckpointRefusesWhatNoWriterProduces(t *testing.T) {
	header := `{"params":1,"states":0}`
	for _, c := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"the magic alone", []byte(checkpointMagic), "truncated"},
		{"one byte short of a digest", append([]byte(checkpointMagic), make([]byte, 4+sha256.Size-1)...), "truncated"},
		{"an empty header, the shortest sealed file", sealed("", 0, nil), "unreadable header"},
		{"header size one past the file", sealed(header, len(header)+1, nil), "header size 24 exceeds the file"},
		{"no payload", sealed(header, len(header), nil), "payload is 0 bytes, header promises 4"},
		{"no parameters", sealed(`{"params":0,"states":0}`, 23, nil), "payload is 0 bytes, header promises 0"},
		{"negative states", sealed(`{"params":1,"states":-1}`, 24, nil), "payload is 0 bytes, header promises 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), CheckpointFile)
			if err := os.WriteFile(path, c.raw, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadCheckpoint(path)
			if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v; want a refusal saying %q", err, c.want)
			}
		})
	}
}

// TestCheckpointWithoutOptimizerState: an optimizer with no state (plain
// SGD) saves zero state vectors, and that checkpoint loads.
func TestCheckpointWithoutOptimizerState(t *testing.T) {
	dir := t.TempDir()
	if err := SaveCheckpoint(dir, Checkpoint{Model: "m", Step: 3}, []float32{1, 2}, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := LoadCheckpoint(filepath.Join(dir, CheckpointFile))
	if err != nil {
		t.Fatalf("a checkpoint without optimizer state: %v", err)
	}
	if ck.States != 0 || len(ck.params) != 2 || ck.Step != 3 {
		t.Fatalf("loaded %+v", ck)
	}
}

// TestUnsupportedFormatNamesTheVersion: the refusal of another format
// names its version when it is one to eight digits, and says "v?"
// otherwise.
func TestUnsupportedFormatNamesTheVersion(t *testing.T) {
	for rest, want := range map[string]string{
		"10\n...":        "format v10 is not read",
		"90\n":           "format v90 is not read",
		"12345678\n":     "format v12345678 is not read",
		"123456789\n":    "format v? is not read",
		"\n":             "format v? is not read",
		"1/\n":           "format v? is not read",
		"1:\n":           "format v? is not read",
		"no newline 123": "format v? is not read",
	} {
		if got := unsupportedFormat([]byte(rest), useResume); !strings.Contains(got, want) {
			t.Errorf("unsupportedFormat(%q) = %q; want it to say %q", rest, got, want)
		}
	}
}

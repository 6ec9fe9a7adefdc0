package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestEveryCheckpointHeaderFieldIsVerified edits each field of a
// checkpoint's header in turn, found by walking the header itself so a
// field added later is edited too, and keeps the file well formed
// otherwise (the header size follows the edit). Every edit is refused as
// the README documents: exit 2, a message naming the checkpoint and its
// checksum, and nothing written in the run directory.
func TestEveryCheckpointHeaderFieldIsVerified(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	// Stopped in the second epoch (8 steps each): the header then holds the totals of a
	// finished epoch and the training accumulators of an unfinished one.
	if r := tolaria(t, dir, nil, quick(run, "--batch-size", "128", "--max-steps", "12")...); r.code != 0 {
		t.Fatalf("first part: exit %d: %s", r.code, r.stderr)
	}
	path := filepath.Join(run, trainer.CheckpointFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edits := headerEdits(t, orig)
	for _, must := range []string{"step", "totals.steps", "totals.epoch_seconds[0]", "train_stats[0]"} {
		if _, ok := edits[must]; !ok {
			t.Fatalf("the header has no field %s to edit; fields: %v", must, slices.Sorted(maps.Keys(edits)))
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fields edited: %v", slices.Sorted(maps.Keys(edits)))
		}
	})
	for _, field := range slices.Sorted(maps.Keys(edits)) {
		if err := os.WriteFile(path, edits[field], 0o644); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, run)
		r := tolaria(t, dir, nil, "train", "--resume", "--run-dir", run)
		if r.code != 2 || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "checksum mismatch") {
			t.Errorf("header field %s edited: exit %d, want 2 with a checksum refusal naming %s:\n%s", field, r.code, path, r.stderr)
		}
		sameFiles(t, before, snapshot(t, run))
	}
	// The unedited checkpoint still resumes: the refusals came from the edits.
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := tolaria(t, dir, nil, "train", "--resume", "--run-dir", run); r.code != 0 {
		t.Fatalf("resume of the unedited checkpoint: exit %d: %s", r.code, r.stderr)
	}
}

// headerEdits returns, for each field of the checkpoint file's JSON
// header (nested fields and array elements included), the file with that
// field's value changed and the header size updated to match. The layout
// is the one docs/architecture.md describes: a magic line ending in '\n',
// a little-endian uint32 header size, the header, then the rest.
func headerEdits(t *testing.T, file []byte) map[string][]byte {
	t.Helper()
	magicEnd := bytes.IndexByte(file, '\n') + 1
	if !bytes.HasPrefix(file, []byte("TOLARIA-CKPT")) || magicEnd == 0 || len(file) < magicEnd+4 {
		t.Fatalf("not a checkpoint: %q", file[:min(len(file), 32)])
	}
	size := int(binary.LittleEndian.Uint32(file[magicEnd:]))
	start := magicEnd + 4
	header, rest := file[start:start+size], file[start+size:]
	leaves, err := jsonLeaves(header)
	if err != nil {
		t.Fatalf("checkpoint header %s: %v", header, err)
	}
	edits := map[string][]byte{}
	for _, l := range leaves {
		edited := slices.Concat(header[:l.start], editValue(header[l.start:l.end]), header[l.end:])
		var sizeBuf [4]byte
		binary.LittleEndian.PutUint32(sizeBuf[:], uint32(len(edited)))
		if !json.Valid(edited) {
			t.Fatalf("editing %s made the header invalid JSON: %s", l.path, edited)
		}
		edits[l.path] = slices.Concat(file[:magicEnd], sizeBuf[:], edited, rest)
	}
	return edits
}

// editValue changes a JSON value's text into another value of its kind.
func editValue(v []byte) []byte {
	s := string(v)
	switch {
	case s == "true":
		return []byte("false")
	case s == "false":
		return []byte("true")
	case s == "null":
		return []byte("0")
	case s == "{}":
		return []byte(`{"edited":1}`)
	case s == "[]":
		return []byte("[0]")
	case strings.HasPrefix(s, `"`):
		return []byte(s[:len(s)-1] + `x"`)
	default:
		// A number ends with a digit: change it (5 to 4, 9 to 8, 0 to 1).
		last := s[len(s)-1]
		return []byte(s[:len(s)-1] + string(last^1))
	}
}

// jsonLeaf is a value without members in a JSON document: a scalar or an
// empty object or array, with its byte span.
type jsonLeaf struct {
	path       string
	start, end int
}

func jsonLeaves(doc []byte) ([]jsonLeaf, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var leaves []jsonLeaf
	var walk func(path string) error
	walk = func(path string) error {
		// A value starts after the separators the decoder has not yet
		// consumed.
		start := int(dec.InputOffset())
		for start < len(doc) && strings.IndexByte(" \t\r\n:,", doc[start]) >= 0 {
			start++
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		delim, isDelim := tok.(json.Delim)
		if !isDelim {
			leaves = append(leaves, jsonLeaf{path, start, int(dec.InputOffset())})
			return nil
		}
		members := 0
		for ; dec.More(); members++ {
			child := fmt.Sprintf("%s[%d]", path, members)
			if delim == '{' {
				key, err := dec.Token()
				if err != nil {
					return err
				}
				child = strings.TrimPrefix(path+"."+key.(string), ".")
			}
			if err := walk(child); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return err
		}
		if members == 0 && path != "" {
			leaves = append(leaves, jsonLeaf{path, start, int(dec.InputOffset())})
		}
		return nil
	}
	return leaves, walk("")
}

// TestCraftedCheckpointIsRefusedBeforeWriting: a checkpoint made by hand
// with its digest recomputed, holding one parameter fewer than the run's
// model (and its optimizer state to match, so the file itself is well
// formed), is refused with exit 2 naming the checkpoint and the counts,
// and the run directory is left as it was: no config.resume-*.yaml, no
// events line.
func TestCraftedCheckpointIsRefusedBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if r := tolaria(t, dir, nil, quick(run, "--batch-size", "128", "--max-steps", "12")...); r.code != 0 {
		t.Fatalf("first part: exit %d: %s", r.code, r.stderr)
	}
	path := filepath.Join(run, trainer.CheckpointFile)
	ck, err := trainer.LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	params := ck.Parameters()
	var state [][]float32
	for _, s := range ck.State() {
		state = append(state, s[:len(s)-1])
	}
	if err := trainer.SaveCheckpoint(run, ck, params[:len(params)-1], state); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, run)
	r := tolaria(t, dir, nil, "train", "--resume", "--run-dir", run)
	if r.code != 2 || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, fmt.Sprintf("holds %d parameters", len(params)-1)) {
		t.Errorf("crafted checkpoint: exit %d, want 2 with a refusal naming %s and its parameter count:\n%s", r.code, path, r.stderr)
	}
	sameFiles(t, before, snapshot(t, run))
}

package data

import (
	"strings"
	"testing"
)

// TestFingerprint: the same content gives the same fingerprint however it
// was made; any changed value, label, byte or layout gives another.
func TestFingerprint(t *testing.T) {
	d := &Dataset{Name: "a", Features: 2, Classes: 3, X: []float32{1, 2, 3, 4}, Y: []int32{0, 2}}
	same := &Dataset{Name: "another name", Features: 2, Classes: 3, X: []float32{1, 2, 3, 4}, Y: []int32{0, 2}}
	fp := Fingerprint(d)
	if !strings.HasPrefix(fp, "xxh64:") || len(fp) != len("xxh64:")+16 || Fingerprint(same) != fp {
		t.Fatalf("fingerprints %q and %q of the same content", fp, Fingerprint(same))
	}
	for name, other := range map[string]*Dataset{
		"a value":  {Features: 2, Classes: 3, X: []float32{1, 2, 3, 4.0001}, Y: []int32{0, 2}},
		"a label":  {Features: 2, Classes: 3, X: []float32{1, 2, 3, 4}, Y: []int32{0, 1}},
		"classes":  {Features: 2, Classes: 4, X: []float32{1, 2, 3, 4}, Y: []int32{0, 2}},
		"features": {Features: 4, Classes: 3, X: []float32{1, 2, 3, 4}, Y: []int32{0}},
	} {
		if Fingerprint(other) == fp {
			t.Errorf("another %s, the same fingerprint", name)
		}
	}
	text := func(b string, context, stride int) *Text {
		return &Text{Context: context, Stride: stride, Bytes: []byte(b)}
	}
	tf := Fingerprint(text("hello, world", 4, 4))
	if tf == fp || Fingerprint(text("hello, world", 4, 4)) != tf {
		t.Fatal("a text's fingerprint is not a function of its content")
	}
	for name, other := range map[string]*Text{
		"byte":    text("hello, worle", 4, 4),
		"context": text("hello, world", 3, 4),
		"stride":  text("hello, world", 4, 2),
		"length":  text("hello, world!", 4, 4),
	} {
		if Fingerprint(other) == tf {
			t.Errorf("another %s, the same fingerprint", name)
		}
	}
	if Fingerprint(nil) != "" {
		t.Error("nothing has a fingerprint")
	}
}

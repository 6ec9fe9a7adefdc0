package data

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Fingerprint names the content of a dataset: a 64-bit xxHash, in hex, of
// its shape and every value in order (a Dataset's features and labels, a
// Text's window layout and bytes), so it changes when any example, label or
// byte does, whatever the files were called or when they were written. It
// catches data that changed under a run (a file edited, replaced or
// regenerated), not data forged to collide. A source of examples of
// another kind has none: "". The values are hashed as the machine holds
// them (little-endian on every platform tolaria runs on).
func Fingerprint(e Examples) string {
	h := xxhash.New()
	word := func(vs ...int) {
		var b [8]byte
		for _, v := range vs {
			binary.LittleEndian.PutUint64(b[:], uint64(v))
			_, _ = h.Write(b[:])
		}
	}
	switch d := e.(type) {
	case *Dataset:
		_, _ = h.WriteString("dataset")
		word(d.Features, d.Classes, len(d.Y))
		if len(d.X) > 0 {
			_, _ = h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&d.X[0])), 4*len(d.X)))
		}
		if len(d.Y) > 0 {
			_, _ = h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&d.Y[0])), 4*len(d.Y)))
		}
	case *Text:
		_, _ = h.WriteString("text")
		word(d.Context, d.Stride, len(d.Bytes))
		_, _ = h.Write(d.Bytes)
	default:
		return ""
	}
	return fmt.Sprintf("xxh64:%016x", h.Sum64())
}

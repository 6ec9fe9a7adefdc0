package jobserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/trainer"
)

// A shard file (format v1, or v2 with top-k probabilities) holds one
// evaluation shard's per-label figures:
//
//	magic        "TOLARIA-EVAL\x00v1\n" (16 bytes; the format version is in it; v2 with top_k)
//	header size  uint32, little-endian
//	header       JSON (ShardHeader)
//	records      Count of: index uint32, label uint32, predicted uint32, loss float64,
//	             and in v2 top_k of (class uint32, probability float64) (little-endian)
//	digest       SHA-256 of every byte before it (32 bytes)
//
// A file without top-k probabilities is written as v1, byte for byte as
// before they existed; one with them as v2, which an older tolaria
// refuses by its version rather than misreading its records.
// A record is an example's, or with Positions T > 0 (a token model) one
// position's of a window: its index is then window*T + position
// (trainer.ScoredIndex). The header's data key (added within v1: an
// older reader ignores it, and a file without it reads as before) is the
// split's fingerprint. A header without positions is one of a class per
// example, as every v1 file before token models. The loss is kept in
// float64, as computed, so the merge sums exactly what the worker
// computed.
const (
	shardMagic      = "TOLARIA-EVAL\x00v1\n"
	shardMagicTopK  = "TOLARIA-EVAL\x00v2\n"
	shardRecordSize = 4 + 4 + 4 + 8
	shardTopSize    = 4 + 8 // a (class, probability) pair of a v2 record
)

// recordSize is the bytes of one record of a file of header h.
func (h ShardHeader) recordSize() int { return shardRecordSize + shardTopSize*h.TopK }

// ErrShardFile is wrapped by every refusal of a shard file.
var ErrShardFile = errors.New("evaluation shard file refused")

// ShardHeader describes a shard file: which evaluation it belongs to and
// which part of it it holds.
type ShardHeader struct {
	Split   string `json:"split"`   // test or train
	Shard   int    `json:"shard"`   // this shard's rank
	Shards  int    `json:"shards"`  // how many shards the examples were split into
	Samples int    `json:"samples"` // examples (a token model's windows) in the whole split
	Classes int    `json:"classes"`
	// Positions is a token model's labels per example (its context), each
	// a record; 0 for one label per example.
	Positions        int    `json:"positions,omitempty"`
	CheckpointSHA256 string `json:"checkpoint_sha256"`
	Step             int    `json:"step"` // the checkpoint's step
	// Data is the fingerprint (data.Fingerprint) of the split as the
	// worker loaded and normalised it: a shard scored on other data never
	// merges, nor is kept by a resumed evaluation. A file written before
	// it was recorded has "", and is scored again on a resume.
	Data string `json:"data,omitempty"`
	// TopK is the (class, probability) pairs of every record
	// (trainer.Scored.Top); 0 (absent) in a v1 file.
	TopK  int `json:"top_k,omitempty"`
	Count int `json:"count"` // records in the file
}

// Shard is a shard file's contents.
type Shard struct {
	Header ShardHeader
	Scores []trainer.Scored
}

// EncodeShard lays out a shard file.
func EncodeShard(s Shard) ([]byte, error) {
	s.Header.Count = len(s.Scores)
	header, err := json.Marshal(s.Header)
	if err != nil {
		return nil, err
	}
	if s.Header.TopK < 0 {
		return nil, fmt.Errorf("evaluation shard: top_k %d", s.Header.TopK)
	}
	var b bytes.Buffer
	b.Grow(len(shardMagic) + 4 + len(header) + s.Header.recordSize()*len(s.Scores) + sha256.Size)
	if s.Header.TopK > 0 {
		b.WriteString(shardMagicTopK)
	} else {
		b.WriteString(shardMagic)
	}
	b.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(header))))
	b.Write(header)
	rec := make([]byte, s.Header.recordSize())
	for _, r := range s.Scores {
		if r.Index < 0 || r.Index > math.MaxUint32 || r.Label < 0 || r.Predicted < 0 || len(r.Top) != s.Header.TopK {
			return nil, fmt.Errorf("evaluation shard: record %+v cannot be stored (top_k %d)", r, s.Header.TopK)
		}
		binary.LittleEndian.PutUint32(rec[0:], uint32(r.Index))
		binary.LittleEndian.PutUint32(rec[4:], uint32(r.Label))
		binary.LittleEndian.PutUint32(rec[8:], uint32(r.Predicted))
		binary.LittleEndian.PutUint64(rec[12:], math.Float64bits(r.Loss))
		for j, c := range r.Top {
			if c.Class < 0 {
				return nil, fmt.Errorf("evaluation shard: record %+v cannot be stored", r)
			}
			at := shardRecordSize + j*shardTopSize
			binary.LittleEndian.PutUint32(rec[at:], uint32(c.Class))
			binary.LittleEndian.PutUint64(rec[at+4:], math.Float64bits(c.Prob))
		}
		b.Write(rec)
	}
	sum := sha256.Sum256(b.Bytes())
	b.Write(sum[:])
	return b.Bytes(), nil
}

// WriteShard writes a shard file atomically: a worker killed while it
// writes leaves no file, or the previous attempt's, never part of one.
func WriteShard(path string, s Shard) error {
	raw, err := EncodeShard(s)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, raw, 0o644)
}

// ReadShard reads and verifies a shard file.
func ReadShard(path string) (Shard, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Shard{}, fmt.Errorf("%w: %w", ErrShardFile, err)
	}
	s, err := DecodeShard(raw)
	if err != nil {
		return Shard{}, fmt.Errorf("%w: %s: %s", ErrShardFile, path, err)
	}
	return s, nil
}

// DecodeShard reads a shard file's bytes, verifying its digest.
func DecodeShard(raw []byte) (Shard, error) {
	if !bytes.HasPrefix(raw, []byte(shardMagic[:len(shardMagic)-3])) {
		return Shard{}, errors.New("not a tolaria evaluation shard (bad magic)")
	}
	v2 := bytes.HasPrefix(raw, []byte(shardMagicTopK))
	if !v2 && !bytes.HasPrefix(raw, []byte(shardMagic)) {
		return Shard{}, fmt.Errorf("format %q is not read by this tolaria (it reads v1 and v2)", bytes.TrimSpace(raw[len(shardMagic)-3:min(len(raw), len(shardMagic)+2)]))
	}
	if len(raw) < len(shardMagic)+4+sha256.Size {
		return Shard{}, fmt.Errorf("truncated (%d bytes)", len(raw))
	}
	body, digest := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], digest) {
		return Shard{}, errors.New("checksum mismatch: the file is damaged")
	}
	body = body[len(shardMagic):]
	n := int(binary.LittleEndian.Uint32(body))
	if n > len(body)-4 {
		return Shard{}, fmt.Errorf("header size %d exceeds the file", n)
	}
	var s Shard
	if err := json.Unmarshal(body[4:4+n], &s.Header); err != nil {
		return Shard{}, fmt.Errorf("unreadable header: %v", err)
	}
	if k := s.Header.TopK; k < 0 || k > 0 != v2 || k > s.Header.Classes {
		return Shard{}, fmt.Errorf("header's top_k %d does not fit a file of format v%d of %d classes", k, map[bool]int{false: 1, true: 2}[v2], s.Header.Classes)
	}
	recs, size := body[4+n:], s.Header.recordSize()
	if s.Header.Count < 0 || len(recs) != size*s.Header.Count {
		return Shard{}, fmt.Errorf("%d bytes of records, header promises %d records", len(recs), s.Header.Count)
	}
	s.Scores = make([]trainer.Scored, s.Header.Count)
	tops := make([]trainer.ClassProb, s.Header.Count*s.Header.TopK)
	for i := range s.Scores {
		s.Scores[i] = decodeRecord(recs[i*size:(i+1)*size], tops[i*s.Header.TopK:(i+1)*s.Header.TopK:(i+1)*s.Header.TopK])
	}
	return s, nil
}

// decodeRecord reads a record, its top k (if any) into top (its length k).
func decodeRecord(r []byte, top []trainer.ClassProb) trainer.Scored {
	sc := trainer.Scored{
		Index:     int(binary.LittleEndian.Uint32(r[0:])),
		Label:     int(binary.LittleEndian.Uint32(r[4:])),
		Predicted: int(binary.LittleEndian.Uint32(r[8:])),
		Loss:      math.Float64frombits(binary.LittleEndian.Uint64(r[12:])),
	}
	if len(top) == 0 {
		return sc
	}
	for j := range top {
		at := shardRecordSize + j*shardTopSize
		top[j] = trainer.ClassProb{Class: int(binary.LittleEndian.Uint32(r[at:])), Prob: math.Float64frombits(binary.LittleEndian.Uint64(r[at+4:]))}
	}
	sc.Top = top
	return sc
}

package jobserver

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	var err error
	if s.Header, err = parseShardHeader(body[4:4+n], v2, len(body)-4-n); err != nil {
		return Shard{}, err
	}
	recs, size := body[4+n:], s.Header.recordSize()
	s.Scores = make([]trainer.Scored, s.Header.Count)
	tops := make([]trainer.ClassProb, s.Header.Count*s.Header.TopK)
	for i := range s.Scores {
		s.Scores[i] = decodeRecord(recs[i*size:(i+1)*size], tops[i*s.Header.TopK:(i+1)*s.Header.TopK:(i+1)*s.Header.TopK])
	}
	return s, nil
}

// parseShardHeader reads a header of a file of format v2 (or v1) followed
// by recBytes bytes of records, and checks that they fit it.
func parseShardHeader(raw []byte, v2 bool, recBytes int) (ShardHeader, error) {
	var h ShardHeader
	if err := json.Unmarshal(raw, &h); err != nil {
		return ShardHeader{}, fmt.Errorf("unreadable header: %v", err)
	}
	if k := h.TopK; k < 0 || k > 0 != v2 || k > h.Classes {
		return ShardHeader{}, fmt.Errorf("header's top_k %d does not fit a file of format v%d of %d classes", k, map[bool]int{false: 1, true: 2}[v2], h.Classes)
	}
	if h.Count < 0 || recBytes != h.recordSize()*h.Count {
		return ShardHeader{}, fmt.Errorf("%d bytes of records, header promises %d records", recBytes, h.Count)
	}
	return h, nil
}

// ShardReader reads a shard file's records one at a time, in file order,
// once OpenShard has verified the whole file's digest: it holds one
// buffered chunk of the file, whatever its records.
type ShardReader struct {
	Header ShardHeader
	f      *os.File
	r      *bufio.Reader
	left   int
	rec    []byte
	top    []trainer.ClassProb
}

// OpenShard opens a shard file for reading record by record: its digest
// is verified first, reading the file through once, then its header. A
// refusal wraps ErrShardFile, as ReadShard's.
func OpenShard(path string) (*ShardReader, error) {
	r, err := openShard(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrShardFile, path, err)
	}
	return r, nil
}

func openShard(path string) (_ *ShardReader, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	head := make([]byte, len(shardMagic)+4)
	if _, err := io.ReadFull(f, head); err != nil {
		return nil, fmt.Errorf("truncated (%d bytes)", st.Size())
	}
	if !bytes.HasPrefix(head, []byte(shardMagic[:len(shardMagic)-3])) {
		return nil, errors.New("not a tolaria evaluation shard (bad magic)")
	}
	v2 := bytes.HasPrefix(head, []byte(shardMagicTopK))
	if !v2 && !bytes.HasPrefix(head, []byte(shardMagic)) {
		return nil, fmt.Errorf("format %q is not read by this tolaria (it reads v1 and v2)", bytes.TrimSpace(head[len(shardMagic)-3:len(shardMagic)]))
	}
	body := st.Size() - sha256.Size
	if body < int64(len(head)) {
		return nil, fmt.Errorf("truncated (%d bytes)", st.Size())
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	h := sha256.New()
	br := bufio.NewReaderSize(f, 1<<16)
	if _, err := io.CopyN(h, br, body); err != nil {
		return nil, err
	}
	digest := make([]byte, sha256.Size)
	if _, err := io.ReadFull(br, digest); err != nil {
		return nil, err
	}
	if !bytes.Equal(h.Sum(nil), digest) {
		return nil, errors.New("checksum mismatch: the file is damaged")
	}
	n := int64(binary.LittleEndian.Uint32(head[len(shardMagic):]))
	if n > body-int64(len(head)) {
		return nil, fmt.Errorf("header size %d exceeds the file", n)
	}
	if _, err := f.Seek(int64(len(head)), io.SeekStart); err != nil {
		return nil, err
	}
	br.Reset(f)
	raw := make([]byte, n)
	if _, err := io.ReadFull(br, raw); err != nil {
		return nil, err
	}
	hd, err := parseShardHeader(raw, v2, int(body-int64(len(head))-n))
	if err != nil {
		return nil, err
	}
	return &ShardReader{Header: hd, f: f, r: br, left: hd.Count, rec: make([]byte, hd.recordSize()),
		top: make([]trainer.ClassProb, hd.TopK)}, nil
}

// Next reads the next record; io.EOF after the header's Count. Its Top
// is the reader's, overwritten by the next call.
func (r *ShardReader) Next() (trainer.Scored, error) {
	if r.left == 0 {
		return trainer.Scored{}, io.EOF
	}
	if _, err := io.ReadFull(r.r, r.rec); err != nil {
		return trainer.Scored{}, fmt.Errorf("%w: %s: %w", ErrShardFile, r.f.Name(), err)
	}
	r.left--
	return decodeRecord(r.rec, r.top), nil
}

// Close closes the file.
func (r *ShardReader) Close() error { return r.f.Close() }

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

package trainer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/tolaria-ml/tolaria/nn"
)

// CheckpointFile is the checkpoint's name inside the run directory.
const CheckpointFile = "checkpoint.tlck"

const checkpointMagic = "TOLARIA-CKPT\x00v1\n"

// ErrCheckpoint is wrapped by every refusal of a checkpoint file.
var ErrCheckpoint = errors.New("checkpoint refused")

// Checkpoint is the state a run needs to continue exactly where it was.
// The data order and the schedule are functions of the seed and the step,
// so the step is the whole of the data position and the RNG state.
type Checkpoint struct {
	Version   int    `json:"version"`
	Model     string `json:"model"`     // nn.Spec.String()
	Optimizer string `json:"optimizer"` // kind and every setting that shapes the update
	BatchSize int    `json:"batch_size"`
	Seed      uint64 `json:"seed"`
	Dataset   string `json:"dataset"`
	TrainSize int    `json:"train_size"`
	Shard     string `json:"shard"`
	Ragged    string `json:"ragged"`
	Epochs    int    `json:"epochs"`
	Step      int    `json:"step"` // steps completed (the next sequence number)
	Params    int    `json:"params"`
	States    int    `json:"states"`
	SHA256    string `json:"payload_sha256"`

	// Totals are the run's counters up to Step, so that a resumed run's
	// summary describes the whole run.
	Totals *Totals `json:"totals,omitempty"`
	// TrainStats are the training accumulators at a stop mid-epoch, so the
	// epoch's loss and accuracy cover its steps from before the stop.
	TrainStats []float64 `json:"train_stats,omitempty"`

	params []float32
	state  [][]float32
}

// Totals are the counters of a run that a resume carries on from.
type Totals struct {
	Steps              int            `json:"steps"`
	GraphReplays       int            `json:"graph_replays"`
	EagerSteps         int            `json:"eager_steps"`
	Fallbacks          map[string]int `json:"fallbacks"`
	Captures           int            `json:"captures"`
	CapturePooled      int            `json:"captures_pooled"`
	CaptureSeconds     float64        `json:"capture_seconds"`
	CaptureColdSeconds float64        `json:"capture_cold_seconds"`
	EvalReplays        int            `json:"eval_replays"`
	EvalEagerBatches   int            `json:"eval_eager_batches"`
	EpochSeconds       []float64      `json:"epoch_seconds"`
	StageCopies        uint64         `json:"stage_copies"`
}

func (c *Config) checkpointHeader() Checkpoint {
	return Checkpoint{
		Version: 1, Model: c.Spec.String(), Optimizer: optimizerString(c.Optimizer), BatchSize: c.BatchSize,
		Seed: c.Seed, Dataset: c.Train.Name, TrainSize: c.Train.Len(),
		Shard: fmt.Sprintf("%d/%d", c.Rank, c.World), Ragged: string(c.Ragged), Epochs: c.Epochs,
		Params: c.Spec.ParamCount(), States: c.Optimizer.StateBuffers(),
	}
}

func optimizerString(o nn.Optimizer) string {
	return fmt.Sprintf("%s lr=%g momentum=%g nesterov=%t beta1=%g beta2=%g eps=%g weight_decay=%g clip_norm=%g lr_warmup_steps=%d total_steps=%d min_lr_ratio=%g",
		o.Kind, o.LR, o.Momentum, o.Nesterov, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.ClipNorm, o.WarmupSteps, o.TotalSteps, o.MinLRRatio)
}

// matches explains how a checkpoint differs from what this run needs.
func (h Checkpoint) matches(want Checkpoint) error {
	type field struct {
		name      string
		got, want any
	}
	for _, f := range []field{
		{"model", h.Model, want.Model}, {"optimizer", h.Optimizer, want.Optimizer},
		{"batch size", h.BatchSize, want.BatchSize}, {"seed", h.Seed, want.Seed},
		{"dataset", h.Dataset, want.Dataset}, {"training-set size", h.TrainSize, want.TrainSize},
		{"shard", h.Shard, want.Shard}, {"ragged policy", h.Ragged, want.Ragged}, {"epochs", h.Epochs, want.Epochs},
	} {
		if fmt.Sprint(f.got) != fmt.Sprint(f.want) {
			return fmt.Errorf("it was written for %s %v but this run has %v; resume with the original settings or start a new run in another --run-dir", f.name, f.got, f.want)
		}
	}
	return nil
}

func encodeFloats(w io.Writer, v []float32) error {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	_, err := w.Write(buf)
	return err
}

// SaveCheckpoint writes ck atomically: to a temporary file in dir, fsync,
// rename over the old checkpoint, fsync the directory. A crash at any
// point leaves either the old checkpoint or the new one, never a mix.
func SaveCheckpoint(dir string, ck Checkpoint, params []float32, state [][]float32) error {
	var payload bytes.Buffer
	if err := encodeFloats(&payload, params); err != nil {
		return err
	}
	for _, s := range state {
		if err := encodeFloats(&payload, s); err != nil {
			return err
		}
	}
	sum := sha256.Sum256(payload.Bytes())
	ck.SHA256 = hex.EncodeToString(sum[:])
	ck.Params, ck.States = len(params), len(state)
	header, err := json.Marshal(ck)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".checkpoint-*.tmp")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	var lenBuf [4]byte
	binary.LittleEndian.PutUint32(lenBuf[:], uint32(len(header)))
	for _, b := range [][]byte{[]byte(checkpointMagic), lenBuf[:], header, payload.Bytes()} {
		if _, err := tmp.Write(b); err != nil {
			tmp.Close()
			return fmt.Errorf("checkpoint: write %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("checkpoint: fsync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	final := filepath.Join(dir, CheckpointFile)
	if err := os.Rename(tmp.Name(), final); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// LoadCheckpoint reads and verifies a checkpoint file. It never modifies it.
func LoadCheckpoint(path string) (Checkpoint, error) {
	refuse := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%w: %s: %s", ErrCheckpoint, path, fmt.Sprintf(format, args...))
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return refuse("no checkpoint to resume from; start without --resume, or point --run-dir at the run to resume")
	}
	if err != nil {
		return refuse("%v", err)
	}
	if !bytes.HasPrefix(raw, []byte(checkpointMagic)) {
		return refuse("not a tolaria checkpoint (bad magic); point --run-dir at a tolaria run directory")
	}
	raw = raw[len(checkpointMagic):]
	if len(raw) < 4 {
		return refuse("truncated header; the file is damaged, resume from a copy or start a new run")
	}
	n := int(binary.LittleEndian.Uint32(raw))
	if n > len(raw)-4 {
		return refuse("truncated header; the file is damaged, resume from a copy or start a new run")
	}
	var ck Checkpoint
	if err := json.Unmarshal(raw[4:4+n], &ck); err != nil {
		return refuse("unreadable header (%v); the file is damaged", err)
	}
	if ck.Version != 1 {
		return refuse("version %d is not supported by this tolaria (it reads version 1)", ck.Version)
	}
	payload := raw[4+n:]
	if want := 4 * ck.Params * (1 + ck.States); len(payload) != want || ck.Params <= 0 || ck.States < 0 {
		return refuse("payload is %d bytes, header promises %d; the file is truncated or damaged", len(payload), want)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != ck.SHA256 {
		return refuse("payload checksum mismatch; the file is damaged, resume from a copy or start a new run")
	}
	decode := func(b []byte) []float32 {
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v
	}
	step := 4 * ck.Params
	ck.params = decode(payload[:step])
	for i := range ck.States {
		ck.state = append(ck.state, decode(payload[step*(i+1):step*(i+2)]))
	}
	return ck, nil
}

// CheckResume verifies, without changing anything, that cfg can resume
// from the checkpoint in cfg.RunDir, so a command can refuse a bad
// checkpoint before it writes anything to the run directory.
func CheckResume(cfg Config) error {
	_, err := resumable(cfg)
	return err
}

// resumable loads the checkpoint in cfg.RunDir and checks that cfg can
// continue from it: same model, optimizer, data and shape, and not done.
func resumable(cfg Config) (Checkpoint, error) {
	path := filepath.Join(cfg.RunDir, CheckpointFile)
	ck, err := LoadCheckpoint(path)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := ck.matches(cfg.checkpointHeader()); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %s: %v", ErrCheckpoint, path, err)
	}
	steps, err := StepsPerEpoch(cfg)
	if err != nil {
		return Checkpoint{}, err
	}
	if total := steps * cfg.Epochs; ck.Step >= total {
		return Checkpoint{}, fmt.Errorf("%w: %s: the run is complete (%d of %d steps); there is nothing to resume; start a new run in another --run-dir",
			ErrCheckpoint, path, ck.Step, total)
	}
	return ck, nil
}

package trainer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
)

// CheckpointFile is the checkpoint's name inside the run directory.
const CheckpointFile = "checkpoint.tlck"

// A checkpoint file (format v3) is, in order:
//
//	magic        "TOLARIA-CKPT\x00v3\n" (16 bytes; the format version is in it)
//	header size  uint32, little-endian
//	header       JSON (Checkpoint)
//	payload      float32 little-endian: the parameters, then each optimizer state buffer,
//	             then the net's running state (Checkpoint.Running values: batchnorm's
//	             running statistics, the dropout generator's words as bit patterns)
//	digest       SHA-256 of every byte before it (32 bytes)
//
// Format v2 is v3 without the running state (an MLP has none), and is
// read as such.
// The digest sits at a fixed place (the last 32 bytes) and covers the
// exact bytes of everything else, so no byte of the file, header included,
// can change unnoticed, and verification needs no parsing first.
const (
	checkpointMagicPrefix = "TOLARIA-CKPT\x00v"
	checkpointFormat      = "3"
	checkpointMagic       = checkpointMagicPrefix + checkpointFormat + "\n"
	checkpointMagicV2     = checkpointMagicPrefix + "2\n" // read: no running state
	checkpointDigestSize  = sha256.Size
)

// ErrCheckpoint is wrapped by every refusal of a checkpoint file.
var ErrCheckpoint = errors.New("checkpoint refused")

// ErrCheckpointUnread is wrapped, beside ErrCheckpoint, by a refusal that
// says nothing of the file's content: it could not be read (an I/O error,
// a stale NFS handle, gone since it was looked for), or the model could
// not be restored from it (a device failure). The file may be intact, and
// the same run may go on once the cause has passed.
var ErrCheckpointUnread = errors.New("checkpoint not read")

// unreadError marks err, a refusal of a checkpoint, as ErrCheckpointUnread
// without changing its message.
type unreadError struct{ err error }

func (e unreadError) Error() string   { return e.err.Error() }
func (e unreadError) Unwrap() []error { return []error{e.err, ErrCheckpointUnread} }

// Checkpoint is the state a run needs to continue exactly where it was.
// The data order and the schedule are functions of the seed and the step,
// so the step is the whole of the data position and the RNG state.
type Checkpoint struct {
	Model     string `json:"model"`     // Config.ModelName()
	Optimizer string `json:"optimizer"` // kind and every setting that shapes the update
	BatchSize int    `json:"batch_size"`
	Seed      uint64 `json:"seed"`
	Dataset   string `json:"dataset"`
	TrainSize int    `json:"train_size"`
	// Data is the training set's fingerprint (data.Fingerprint), so that a
	// run resumed or evaluated on data that changed since (a file edited
	// or replaced, the same size or not) is refused; a checkpoint written
	// before there was one has "" and is not checked.
	Data   string `json:"data,omitempty"`
	Shard  string `json:"shard"`
	Ragged string `json:"ragged"`
	Epochs int    `json:"epochs"`
	Step   int    `json:"step"` // steps completed (the next sequence number)
	Params int    `json:"params"`
	States int    `json:"states"`
	// Running is the number of values of the net's running state (see
	// nn.Model.Running), 0 for a model without one.
	Running int `json:"running,omitempty"`

	// Totals are the run's counters up to Step, so that a resumed run's
	// summary describes the whole run.
	Totals *Totals `json:"totals,omitempty"`
	// TrainStats are the training accumulators at a stop mid-epoch, so the
	// epoch's loss and accuracy cover its steps from before the stop.
	TrainStats []float64 `json:"train_stats,omitempty"`

	params  []float32
	state   [][]float32
	running []float32
}

// WithRunning returns the checkpoint holding the net's running state v
// (nn.Model.SnapshotRunning), written after the optimizer state.
func (h Checkpoint) WithRunning(v []float32) Checkpoint {
	h.running, h.Running = v, len(v)
	return h
}

// RunningState is the net's running state the checkpoint holds (nil for
// none).
func (h Checkpoint) RunningState() []float32 { return h.running }

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
	// LastEpoch are the figures of the last finished epoch, which a run
	// resumed from its last step reports as its own.
	LastEpoch *EpochFigures `json:"last_epoch,omitempty"`
}

// EpochFigures are an epoch's training and evaluation results.
type EpochFigures struct {
	TrainLoss     float64 `json:"train_loss"`
	TrainAccuracy float64 `json:"train_accuracy"`
	TestAccuracy  float64 `json:"test_accuracy"`
	TestLoss      float64 `json:"test_loss"`
}

func (c *Config) checkpointHeader() Checkpoint { return c.headerFor(data.Fingerprint(c.Train)) }

// headerFor is checkpointHeader with the training set's fingerprint given,
// so a run computes it once rather than at every checkpoint.
func (c *Config) headerFor(trainPrint string) Checkpoint {
	return Checkpoint{
		Model: c.ModelName(), Optimizer: optimizerString(c.Optimizer), BatchSize: c.BatchSize,
		Seed: c.Seed, Dataset: c.Train.Shape().Name, TrainSize: c.Train.Len(), Data: trainPrint,
		Shard: fmt.Sprintf("%d/%d", c.Rank, c.World), Ragged: string(c.Ragged), Epochs: c.Epochs,
		Params: c.paramCount(), States: c.Optimizer.StateBuffers(), Running: c.runningLen(),
	}
}

// paramCount is the number of trained parameters of the run's model.
func (c *Config) paramCount() int {
	if len(c.Net.Layers) > 0 {
		if a, err := c.Net.Resolve(); err == nil {
			return a.Params
		}
	}
	return c.Spec.ParamCount()
}

// runningStats is the number of batchnorm statistics at the start of the
// run's running state: 0 for an MLP.
func (c *Config) runningStats() int {
	if a, ok := c.netArch(); ok {
		return a.State
	}
	return 0
}

// runningLen is the length of the run's running state: 0 for an MLP.
func (c *Config) runningLen() int {
	if a, ok := c.netArch(); ok {
		return a.RunningLen()
	}
	return 0
}

func optimizerString(o nn.Optimizer) string {
	return fmt.Sprintf("%s lr=%g momentum=%g nesterov=%t beta1=%g beta2=%g eps=%g weight_decay=%g clip_norm=%g lr_warmup_steps=%d total_steps=%d min_lr_ratio=%g",
		o.Kind, o.LR, o.Momentum, o.Nesterov, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.ClipNorm, o.WarmupSteps, o.TotalSteps, o.MinLRRatio)
}

// differing is what differs between two optimizers' settings, written as
// words (adamw lr=0.003 momentum=0.9 ...): the words of each that the
// other lacks, or the two whole when they share none.
func differing(got, want string) (string, string) {
	g, w := strings.Fields(got), strings.Fields(want)
	var gs, ws []string
	for _, x := range g {
		if !slices.Contains(w, x) {
			gs = append(gs, x)
		}
	}
	for _, x := range w {
		if !slices.Contains(g, x) {
			ws = append(ws, x)
		}
	}
	if len(gs) == 0 || len(ws) == 0 || len(gs) == len(g) {
		return got, want
	}
	return strings.Join(gs, " "), strings.Join(ws, " ")
}

// matches explains how a checkpoint differs from what this run needs.
// The settings a user writes come first, each named by its key: the
// optimizer's total_steps is epochs × steps per epoch, and the steps per
// epoch follow from the batch size, the training set's size, the shard
// and the ragged policy, so a change to any of them would otherwise show
// only as another total_steps (and a warm-up clamped to half of it).
func (h Checkpoint) matches(want Checkpoint) error {
	const derived = "; the optimizer's total_steps (epochs × steps per epoch) follows from it"
	type setting struct {
		key       field.Name // "" for the model, which is many keys
		what      string
		got, want any
		note      string
	}
	size := field.Name("data.dir")
	if strings.HasPrefix(want.Dataset, "synthetic") {
		size = "data.synthetic_size"
	}
	// The shard is rank/world: name the part that changed.
	shard := field.Name("data.world")
	if _, hw, _ := strings.Cut(h.Shard, "/"); strings.HasSuffix(want.Shard, "/"+hw) {
		shard = "data.rank"
	}
	for _, s := range []setting{
		{"", "model", h.Model, want.Model, ""},
		{"schedule.epochs", "epochs", h.Epochs, want.Epochs, derived},
		{"schedule.batch_size", "batch size", h.BatchSize, want.BatchSize, derived},
		{"seed", "seed", h.Seed, want.Seed, ""},
		{"data.dataset", "dataset", h.Dataset, want.Dataset, ""},
		{size, "a training set of", examples(h.TrainSize), examples(want.TrainSize), derived},
		{shard, "shard (rank/world)", h.Shard, want.Shard, derived},
		{"data.ragged", "ragged policy", h.Ragged, want.Ragged, derived},
	} {
		got, want := fmt.Sprint(s.got), fmt.Sprint(s.want)
		if got == want {
			continue
		}
		if s.key == "" {
			return fmt.Errorf("it was written for %s %s but this run has %s; resume with the original settings or start a new run in another --run-dir", s.what, got, want)
		}
		// The key is respelled as a flag by a command that renders the
		// error itself; a worker's message keeps it as the file's key.
		return field.Errorf(s.key, "the checkpoint was written with %s %s but this run has %s%s; resume with the setting it was written with, or start a new run in another --run-dir",
			s.what, got, want, s.note)
	}
	if h.Optimizer != want.Optimizer {
		got, wanted := differing(h.Optimizer, want.Optimizer)
		msg := fmt.Sprintf("it was written for optimizer %s but this run has %s", got, wanted)
		if onlyDerived(got) {
			// None of the settings they follow from differs above: say
			// what they are rather than leave two numbers no one wrote.
			msg += " (the schedule's length, which tolaria derives: total_steps is epochs × steps per epoch, and lr_warmup_steps is optimizer.warmup_steps clamped to half of it)"
		}
		return errors.New(msg + "; resume with the original settings or start a new run in another --run-dir")
	}
	if h.Data != "" && want.Data != "" && h.Data != want.Data {
		return fmt.Errorf("it was written for training data of fingerprint %s but this run's data reads as %s: the data changed since (a file edited, replaced or added); resume with the data it was trained on, or start a new run in another --run-dir", h.Data, want.Data)
	}
	// The model and optimizer above fix both counts, so only a file made
	// by hand (its digest recomputed) differs here; checked now, with the
	// header, so the refusal comes before a run writes anything rather
	// than when the model is restored.
	if h.Params != want.Params || h.States != want.States || h.Running != want.Running {
		return fmt.Errorf("it holds %d parameters, %d optimizer state vectors and %d running-state values but this run's model has %d, %d and %d; it was not written by tolaria for this run: resume from an intact copy or start a new run in another --run-dir",
			h.Params, h.States, h.Running, want.Params, want.States, want.Running)
	}
	return nil
}

func examples(n int) string { return fmt.Sprintf("%d examples", n) }

// onlyDerived reports whether the optimizer words differing (from
// differing) are only those tolaria computes from other settings.
func onlyDerived(differing string) bool {
	for _, w := range strings.Fields(differing) {
		if !strings.HasPrefix(w, "lr_warmup_steps=") && !strings.HasPrefix(w, "total_steps=") {
			return false
		}
	}
	return differing != ""
}

func encodeFloats(w io.Writer, v []float32) error {
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	_, err := w.Write(buf)
	return err
}

// encodeCheckpoint lays out a checkpoint file: magic, header size,
// header, payload and the SHA-256 of all of it.
func encodeCheckpoint(ck Checkpoint, params []float32, state [][]float32) ([]byte, error) {
	ck.Params, ck.States, ck.Running = len(params), len(state), len(ck.running)
	for i, s := range state {
		if len(s) != len(params) {
			return nil, fmt.Errorf("checkpoint: optimizer state %d holds %d values for %d parameters", i, len(s), len(params))
		}
	}
	header, err := json.Marshal(ck)
	if err != nil {
		return nil, err
	}
	var file bytes.Buffer
	file.WriteString(checkpointMagic)
	var size [4]byte
	binary.LittleEndian.PutUint32(size[:], uint32(len(header)))
	file.Write(size[:])
	file.Write(header)
	for _, v := range append(append([][]float32{params}, state...), ck.running) {
		if err := encodeFloats(&file, v); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(file.Bytes())
	file.Write(sum[:])
	return file.Bytes(), nil
}

// SaveCheckpoint writes ck atomically (see atomicfile): a crash at any
// point leaves either the old checkpoint or the new one, never a mix. A
// net's running state goes with ck (Checkpoint.WithRunning).
func SaveCheckpoint(dir string, ck Checkpoint, params []float32, state [][]float32) error {
	file, err := encodeCheckpoint(ck, params, state)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CheckpointFile), file, 0o600); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// promisedSize is the length of the file raw's header describes, read
// without trusting it (the digest did not hold): only to say, of a file
// that fails its digest, that it was cut short.
func promisedSize(raw []byte, v2 bool) (int, bool) {
	body := raw[len(checkpointMagic):]
	if len(body) < 4 {
		return 0, false
	}
	n := int(binary.LittleEndian.Uint32(body))
	var ck Checkpoint
	if n > len(body)-4 || json.Unmarshal(body[4:4+n], &ck) != nil || ck.Params <= 0 || ck.States < 0 || ck.Running < 0 || (v2 && ck.Running != 0) {
		return 0, false
	}
	return len(checkpointMagic) + 4 + n + 4*(ck.Params*(1+ck.States)+ck.Running) + checkpointDigestSize, true
}

// checkpointUse is what a checkpoint is read for, which decides what a
// refusal of it advises.
type checkpointUse int

const (
	// useResume: a run continues from its run directory's checkpoint.
	useResume checkpointUse = iota
	// useRead: a model is scored or sampled from a checkpoint file.
	useRead
)

// goOn says how to go on without the checkpoint.
func (u checkpointUse) goOn() string {
	if u == useRead {
		return "use an intact copy of it, or train the run again"
	}
	// Each save replaces the one file whole (atomicfile), so a run
	// directory never holds an earlier checkpoint to fall back to.
	return "a run directory keeps no earlier checkpoint (each save replaces " + CheckpointFile + "), so restore it from a copy of your own, or start the run again in another --run-dir"
}

// LoadCheckpoint reads and verifies a run directory's checkpoint for a
// run to continue from it; its refusals say how to go on with the run.
// It never modifies the file.
func LoadCheckpoint(path string) (Checkpoint, error) { return loadCheckpoint(path, useResume) }

// loadCheckpoint reads and verifies the checkpoint at path, read for use.
func loadCheckpoint(path string, use checkpointUse) (Checkpoint, error) {
	refuse := func(format string, args ...any) (Checkpoint, error) {
		return Checkpoint{}, fmt.Errorf("%w: %s: %s", ErrCheckpoint, path, fmt.Sprintf(format, args...))
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && use == useResume {
		_, err := refuse("no checkpoint to resume from; start without --resume, or point --run-dir at the run to resume")
		return Checkpoint{}, unreadError{err}
	}
	if err != nil {
		_, err := refuse("%v", err)
		return Checkpoint{}, unreadError{err}
	}
	if len(raw) == 0 {
		// tolaria writes a checkpoint whole or not at all, so an empty
		// one was emptied since (a failed copy, a full disk).
		return refuse("is empty (0 bytes): it holds no checkpoint; %s", use.goOn())
	}
	if !bytes.HasPrefix(raw, []byte(checkpointMagicPrefix)) {
		if use == useRead {
			return refuse("not a tolaria checkpoint (it does not begin as tolaria's checkpoints do); give a checkpoint file that tolaria wrote (a run directory's %s)", CheckpointFile)
		}
		return refuse("not a tolaria checkpoint (it does not begin as tolaria's checkpoints do): another file replaced the run's; %s", use.goOn())
	}
	v2 := bytes.HasPrefix(raw, []byte(checkpointMagicV2))
	if !v2 && !bytes.HasPrefix(raw, []byte(checkpointMagic)) {
		return refuse("%s", unsupportedFormat(raw[len(checkpointMagicPrefix):], use))
	}
	damaged := "the file is damaged or was edited; " + use.goOn()
	if len(raw) < len(checkpointMagic)+4+checkpointDigestSize {
		return refuse("truncated (%d bytes); %s", len(raw), damaged)
	}
	body, digest := raw[:len(raw)-checkpointDigestSize], raw[len(raw)-checkpointDigestSize:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], digest) {
		if size, ok := promisedSize(raw, v2); ok && size != len(raw) {
			return refuse("checksum mismatch, and the file is %d bytes where its header promises %d: it was cut short or added to (an interrupted copy?); %s", len(raw), size, damaged)
		}
		return refuse("checksum mismatch (the SHA-256 covers every byte of the header and the payload); %s", damaged)
	}
	// The digest holds, so the bytes are the ones tolaria wrote; what
	// follows refuses only what a correct writer never produces.
	body = body[len(checkpointMagic):]
	n := int(binary.LittleEndian.Uint32(body))
	if n > len(body)-4 {
		return refuse("header size %d exceeds the file; %s", n, damaged)
	}
	var ck Checkpoint
	if err := json.Unmarshal(body[4:4+n], &ck); err != nil {
		return refuse("unreadable header (%v); %s", err, damaged)
	}
	payload := body[4+n:]
	if v2 && ck.Running != 0 {
		return refuse("a format v2 header promises %d running-state values, which v2 does not hold; %s", ck.Running, damaged)
	}
	if want := 4 * (ck.Params*(1+ck.States) + ck.Running); len(payload) != want || ck.Params <= 0 || ck.States < 0 || ck.Running < 0 {
		return refuse("payload is %d bytes, header promises %d; %s", len(payload), want, damaged)
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
	if ck.Running > 0 {
		ck.running = decode(payload[step*(1+ck.States):])
	}
	return ck, nil
}

// unsupportedFormat explains a checkpoint of another format version, read
// for use; rest is what follows the magic's "v".
func unsupportedFormat(rest []byte, use checkpointUse) string {
	version := "?"
	if i := bytes.IndexByte(rest, '\n'); i > 0 && i <= 8 && isDigits(rest[:i]) {
		version = string(rest[:i])
	}
	msg := fmt.Sprintf("checkpoint format v%s is not read by this tolaria (it reads v2 and v%s)", version, checkpointFormat)
	if version == "1" {
		msg += "; format v1, from an earlier tolaria, checksummed only its payload, so its header cannot be verified"
	}
	if use == useRead {
		return msg + "; read it with the tolaria that wrote it"
	}
	return msg + "; start a new run in another --run-dir, or resume it with the tolaria that wrote it"
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// resumable loads the checkpoint in cfg.RunDir and checks that cfg, of
// steps steps per epoch, can continue from it: same model, optimizer, data
// and shape, and not done.
func resumable(cfg Config, steps int) (Checkpoint, error) {
	path := filepath.Join(cfg.RunDir, CheckpointFile)
	ck, err := LoadCheckpoint(path)
	if err != nil {
		return Checkpoint{}, err
	}
	if err := ck.matches(cfg.checkpointHeader()); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %s: %w", ErrCheckpoint, path, err)
	}
	if total := steps * cfg.Epochs; ck.Step > total {
		return Checkpoint{}, fmt.Errorf("%w: %s: the checkpoint is of step %d, past the run's %d steps",
			ErrCheckpoint, path, ck.Step, total)
	}
	// A checkpoint of the last step resumes too: the run then trains no
	// more and ends as it would have (its summary from the checkpoint's
	// totals and last epoch's figures), which is how a run killed between
	// its final checkpoint and its summary is finished.
	return ck, nil
}

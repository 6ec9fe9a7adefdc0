// Package eval is the sharded evaluation of a run's checkpoint: shards
// scored by workers that a launcher places and starts, each asking the
// device-memory budget broker before it allocates, their files merged
// into eval.json. It imports the launcher, the run directory and the
// broker, no other activity.
package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/budget"
	"github.com/tolaria-ml/tolaria/coordinator/budget/holder"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Files of a sharded evaluation, in the run directory. eval.json only
// ever holds a complete result: a new one replaces it once it is whole and
// synced, the one it replaces kept as eval.prev.json (one generation). An
// evaluation some of whose shards failed leaves eval.json as it was and
// writes its figures over the examples scored to eval.partial.json, which
// a complete evaluation removes.
const (
	Dir             = "eval"              // shard files and each shard's worker log
	JSONFile        = "eval.json"         // the merged result, always complete
	PrevJSONFile    = "eval.prev.json"    // the eval.json a newer one replaced
	PartialJSONFile = "eval.partial.json" // the figures of an evaluation with missing shards
)

// shardExt ends a shard file's name.
const shardExt = ".tles"

// evalAttempts is how many times a shard is tried: once, and once more.
const evalAttempts = 2

// NewMetrics is a metrics registry with an evaluation's families: the
// result's accuracy and loss, labelled complete or partial, and the shards
// by state (see telemetry.EvalMetrics). Run.Record sets them.
func NewMetrics(version string) (*telemetry.Metrics, *telemetry.EvalMetrics, error) {
	m := telemetry.NewMetrics(version)
	em, err := m.Eval()
	if err != nil {
		return nil, nil, err
	}
	return m, em, nil
}

// Request is a sharded evaluation of a run's checkpoint as a command
// asks for it.
type Request struct {
	RunDir     string
	Checkpoint string // "" is the run directory's checkpoint.tlck
	Workers    int    // worker processes, each scoring one stride shard
	Split      string // test (the default) or train
	// Device is where each shard's worker scores: cpu (the default) or
	// cuda (a CUDA build of tolaria-worker).
	Device string
	// GPUs are, with Device cuda, the GPUs to spread the shards over (as
	// this process's driver numbers them; see launch.Slot.EnvUnder), each
	// shard's worker seeing its GPU alone. None leaves every worker the
	// GPUs its environment gives it, and it scores on the first.
	GPUs []int
	// PerDevice is how many shards' workers share a device at once; 0
	// spreads every shard at once: ceil(Workers / GPUs) per GPU.
	PerDevice int
	// Parallel bounds the shards' workers running at once; 0 is every
	// device slot (Workers without GPUs). Shards beyond wait for a slot.
	Parallel int
	// DeviceMemory caps the device memory the shards' budgets may take on
	// each of this machine's devices; 0 takes what the first shard's
	// worker finds free. Every shard's worker on this machine asks the
	// budget broker for its bill before it allocates (package budget); a
	// shard that does not fit beside those scoring waits for one to end.
	// A shard cannot park. On the CPU it stands in for a GPU's memory.
	DeviceMemory int64
	// Worker is the tolaria-worker binary ("" finds it, see worker.Find).
	Worker           string
	WorkerStart      time.Duration // 0: worker.DefaultHelloTimeout
	HeartbeatTimeout time.Duration // 0: worker.DefaultHeartbeatTimeout
	Env              []string      // added to every worker's environment
	// Launch is where the shards' workers run, its settings bound in (see
	// launch.Named): the zero Kind is processes on this machine; Slurm's
	// submits a task per shard of one job array, all at once, the retry of
	// a failed shard an array of its own.
	Launch launch.Kind
	// DryRun plans the evaluation for DryRun to print; Run is not called.
	DryRun bool
	// Resume keeps every shard file of an earlier evaluation that verifies
	// as this one's (see Run.Kept) and scores only the other shards.
	Resume bool
	// Predictions writes, with a complete result, every label's figures
	// to PredictionsFile beside eval.json.
	Predictions bool
	// TopK is, with Predictions, the most probable classes whose
	// probabilities each row of PredictionsFile gives: capped at the
	// classes; 0 for none, and none for an MSE model (its outputs are no
	// logits). Without Predictions it is not used.
	TopK int
	// DataDir, when set, is the data to evaluate on in place of the run's
	// (config.yaml's data_dir): a Fashion-MNIST directory, or a text
	// corpus. The result says when its files differ from those the run
	// trained on (Report.Warnings).
	DataDir string
	Logger  *slog.Logger
	// Progress, when set, is told of each shard's attempts as they end.
	Progress func(Progress)
	// Budget, when set, is told that a shard attempt's device-memory
	// request waits (u.Waiting) and, after a wait, that it was granted.
	Budget func(shard, attempt int, device string, u holder.Update)
}

// Progress is a shard attempt that ended.
type Progress struct {
	Shard, Shards int
	Attempt       int
	// Last is true when no attempt follows: the second, or a failure
	// another worker would repeat (no device, input refused).
	Last    bool
	Device  string // where it ran: cpu, cuda, cuda:1 (launch.Slot.String)
	Samples int    // scored, when Err is nil
	Err     error  // why the attempt failed
	Seconds float64
}

// Validate checks the request's own settings, naming the one at fault.
func (r Request) Validate() error {
	switch {
	case r.RunDir == "":
		return refusal.Config(field.Errorf("run_dir", "is required: point it at the run whose checkpoint to evaluate"))
	case r.Workers < 1:
		return refusal.Config(field.Errorf("workers", "must be at least 1, got %d", r.Workers))
	case r.Split != "" && r.Split != jobserver.SplitTest && r.Split != jobserver.SplitTrain:
		return refusal.Config(field.Errorf("split", "must be test or train, got %q", r.Split))
	case r.Device != "" && r.Device != "cpu" && r.Device != "cuda":
		return refusal.Config(field.Errorf("device", "must be cpu or cuda, got %q", r.Device))
	case r.DataDir != "" && !exists(r.DataDir):
		return refusal.Config(field.Errorf("data_dir", "%s does not exist; give the directory (or text corpus) to evaluate on, or leave it unset for the run's", r.DataDir))
	case r.PerDevice < 0:
		return refusal.Config(field.Errorf("per_device", "cannot be negative, got %d", r.PerDevice))
	case r.Parallel < 0:
		return refusal.Config(field.Errorf("parallel", "cannot be negative, got %d", r.Parallel))
	case r.DeviceMemory < 0:
		return refusal.Config(field.Errorf("device_memory", "cannot be negative (%d); give a size such as 8GiB, or 0 for what the device reports", r.DeviceMemory))
	case len(r.GPUs) > 0 && r.Device != "cuda":
		return refusal.Config(field.Errorf("devices", "names GPUs, so the device is cuda, not %q", r.Device))
	case r.TopK < 0:
		return refusal.Config(field.Errorf("top_k", "cannot be negative (%d); 0 gives no probabilities", r.TopK))
	case r.WorkerStart < 0:
		return refusal.Config(field.Errorf("worker_start_timeout", "cannot be negative (%s)", r.WorkerStart))
	case r.HeartbeatTimeout != 0 && worker.CheckHeartbeatTimeout(r.HeartbeatTimeout) != nil: // 0: the default
		return refusal.Config(field.Errorf("heartbeat_timeout", "%w", worker.CheckHeartbeatTimeout(r.HeartbeatTimeout)))
	}
	kind := r.Launch.OrLocal()
	if kind.Check != nil {
		// The run directory names every shard's spool and log.
		return kind.Check(r.launchConfig(kind, r.Worker, nil))
	}
	return nil
}

// launchConfig is the evaluation's placement as its launcher takes it:
// every shard at once on the device, the worker seeing the GPUs its
// environment gives it; path is the worker binary.
func (r Request) launchConfig(kind launch.Kind, path string, log *slog.Logger) launch.Config {
	dev := r.Device
	if dev == "" {
		dev = "cpu"
	}
	per, parallel := r.PerDevice, r.Parallel
	if len(r.GPUs) > 0 && per == 0 {
		per = (r.Workers + len(r.GPUs) - 1) / len(r.GPUs)
	}
	if parallel == 0 {
		parallel = r.Workers
		if per > 0 && len(r.GPUs) > 0 {
			parallel = min(r.Workers, per*len(r.GPUs))
		}
	}
	return launch.Config{Worker: path, Device: dev, GPUs: r.GPUs, GPUsFromEnv: len(r.GPUs) == 0, PerDevice: per, Parallel: parallel, Workers: r.Workers,
		DeviceMemory: r.DeviceMemory,
		Dir:          r.RunDir, DirField: "run_dir", Own: filepath.Join(r.RunDir, Dir, kind.Name), WorkerStart: r.WorkerStart,
		HeartbeatTimeout: r.HeartbeatTimeout, Env: r.Env, DryRun: r.DryRun, Logger: log}
}

// Report is eval.json: a checkpoint's figures on a split, merged from
// every shard.
type Report struct {
	RunDir           string `json:"run_dir"`
	Checkpoint       string `json:"checkpoint"`
	CheckpointSHA256 string `json:"checkpoint_sha256"`
	Step             int    `json:"step"`
	Split            string `json:"split"`
	Workers          int    `json:"workers"`
	// Complete is true when every shard was scored (eval.json), false for
	// the figures of an evaluation with missing shards (eval.partial.json).
	Complete bool `json:"complete"`
	// Samples is the examples (a token model's windows) the figures are
	// over: the split's, or in a partial result those scored.
	Samples int `json:"samples"`
	// SplitSamples is, in a partial result, the examples of the split.
	SplitSamples int `json:"split_samples,omitempty"`
	// Loss is the mean loss per label: per example, or per token of a
	// token model (nats).
	Loss float64 `json:"loss"`
	// Accuracy is Correct over the labels: the examples, or the tokens.
	Accuracy float64 `json:"accuracy"`
	Correct  int     `json:"correct"`
	// PerClass[c] is class c's examples, those predicted right, and their
	// ratio (0 for a class without examples). Not for a token model.
	PerClass []ClassFigures `json:"per_class,omitempty"`
	// Confusion[t][p] counts the examples of class t predicted as p. Not
	// for a token model.
	Confusion [][]int `json:"confusion,omitempty"`
	// Sequence holds a token model's figures per position; nil for a
	// model of one class per example.
	Sequence *SequenceFigures `json:"sequence,omitempty"`
	// Missing are, in a partial result, the shards that failed: the
	// examples they hold and why.
	Missing []MissingShard `json:"missing,omitempty"`
	// Predictions is the per-label file written with this result
	// (PredictionsFile, in the run directory); absent when none was.
	Predictions string `json:"predictions,omitempty"`
	// DataDir is the data evaluated on: the run's data_dir, or
	// Request.DataDir; absent for the synthetic dataset.
	DataDir string `json:"data_dir,omitempty"`
	// DataFiles are the files the evaluation read, as the coordinator read
	// them when it began; every shard read the same bytes.
	DataFiles []data.SourceFile `json:"data_files,omitempty"`
	// Warnings say what a reader of the figures should know: the data
	// differs from the data the run trained on, or that cannot be told.
	Warnings []string `json:"warnings,omitempty"`
	// Budgets are, per device of this machine, the device-memory budgets
	// the shards' workers held (package budget); none for shards a
	// scheduler placed.
	Budgets []DeviceBudget `json:"budgets,omitempty"`
	Seconds float64        `json:"seconds"`
}

// DeviceBudget is what the shards' budgets came to on one device: its
// capacity for budgets, the most bytes granted and the most shards
// holding a budget at once, and how many requests waited for room.
type DeviceBudget struct {
	Device      string `json:"device"`
	Capacity    int64  `json:"capacity"`
	PeakGranted int64  `json:"peak_granted"`
	PeakHolders int    `json:"peak_holders"`
	Waits       int    `json:"waits"`
}

// budgetBooks follows the broker's books of each device for the report.
type budgetBooks struct {
	mu sync.Mutex
	by map[string]*DeviceBudget
}

func (b *budgetBooks) device(name string) *DeviceBudget {
	if b.by == nil {
		b.by = map[string]*DeviceBudget{}
	}
	d := b.by[name]
	if d == nil {
		d = &DeviceBudget{Device: name}
		b.by[name] = d
	}
	return d
}

func (b *budgetBooks) changed(name string, bk budget.Books) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := b.device(name)
	d.Capacity = max(d.Capacity, bk.Capacity)
	d.PeakGranted, d.PeakHolders = max(d.PeakGranted, bk.Granted), max(d.PeakHolders, bk.Holders)
}

func (b *budgetBooks) waited(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.device(name).Waits++
}

// report lists the devices' figures, by device.
func (b *budgetBooks) report() []DeviceBudget {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []DeviceBudget
	for _, d := range b.by {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// MissingShard is a shard of a partial result that failed every attempt.
// Its examples (a token model's windows) are First, First+Stride, ...,
// Count of them.
type MissingShard struct {
	Shard  int    `json:"shard"`
	First  int    `json:"first"`
	Stride int    `json:"stride"`
	Count  int    `json:"count"`
	Reason string `json:"reason"`
	Log    string `json:"log"` // the shard's worker log
}

// SequenceFigures are a token model's figures: every window of the split
// has Positions targets, each the byte after its input position, so
// position p is predicted from p+1 bytes of context.
type SequenceFigures struct {
	Positions int `json:"positions"` // targets per window: the context
	Tokens    int `json:"tokens"`    // targets scored: windows × positions
	// BitsPerByte is the mean loss in bits: a token is a byte.
	BitsPerByte float64 `json:"bits_per_byte"`
	// PositionAccuracy[p] is the share of windows whose target at
	// position p is predicted right, and PositionLoss[p] their mean loss
	// there (nats).
	PositionAccuracy []float64 `json:"position_accuracy"`
	PositionLoss     []float64 `json:"position_loss"`
}

// ClassFigures are one class's figures in an evaluation.
type ClassFigures struct {
	Class    int     `json:"class"`
	Samples  int     `json:"samples"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
}

// ShardsFailedError is an evaluation whose shards (by rank) failed every
// attempt: eval.json is left as it was, and Partial, when set, is the
// file of the figures over the examples scored.
type ShardsFailedError struct {
	Missing []int
	Reasons map[int]string
	Partial string
}

func (e *ShardsFailedError) Error() string {
	parts := make([]string, 0, len(e.Missing))
	for _, s := range e.Missing {
		parts = append(parts, fmt.Sprintf("shard %d: %s", s, e.Reasons[s]))
	}
	kept := "; no shard was scored, so there are no figures"
	if e.Partial != "" {
		kept = fmt.Sprintf("; the figures over the examples scored are in %s, marked partial; the other shards' files are kept, so --resume scores only the missing ones", e.Partial)
	}
	return fmt.Sprintf("evaluation incomplete: %d shard(s) failed twice and are missing, so %s was not replaced%s:\n%s",
		len(e.Missing), JSONFile, kept, strings.Join(parts, "\n"))
}

// Run is a sharded evaluation planned: everything checked, nothing
// written yet.
type Run struct {
	req     Request
	spec    job.Spec
	ckPath  string
	sha     string
	step    int
	samples int
	classes int
	// positions is a token model's labels per window; 0 for one per example.
	positions int
	// data is the split's fingerprint, which every shard file must carry.
	data string
	// files are the data's files as read when the evaluation began; every
	// worker checks its own reads against them.
	files []data.SourceFile
	// warnings go into every result (Report.Warnings).
	warnings []string
	// topK is the top-k probabilities every shard file carries: Request.TopK
	// capped, with Predictions; 0 otherwise.
	topK int
	// kept are, with Resume, the earlier evaluation's shards that verify
	// as this one's, by rank; rescore says why each other shard file
	// found was not kept.
	kept    map[int]jobserver.ShardHeader
	rescore map[int]error
	worker  string
	log     *slog.Logger
	// broker keeps the books of this machine's devices between the
	// shards' workers; books follows them for the report.
	broker *budget.Broker
	books  budgetBooks
	// launcher places and starts the shards' workers, on slots.
	launcher launch.Launcher
	slots    *launch.Slots
}

// Plan checks a sharded evaluation before anything is written: the
// request, the run's configuration, the data, the checkpoint (verified as
// a resumed run verifies it) and the worker binary.
func Plan(req Request) (*Run, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Split == "" {
		req.Split = jobserver.SplitTest
	}
	e := &Run{req: req, log: req.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	var err error
	changed := func(device string) { e.books.changed(device, e.broker.Books(device)) }
	if e.broker, err = budget.New(budget.Config{DeviceMemory: req.DeviceMemory, Changed: changed}); err != nil {
		return nil, err
	}
	if st, err := os.Stat(req.RunDir); err != nil || !st.IsDir() {
		return nil, refusal.Config(field.Errorf("run_dir", "%s is not a run directory; point it at a run made by tolaria train", req.RunDir))
	}
	if e.spec, err = rundir.Spec(req.RunDir); err != nil {
		return nil, err
	}
	if err := rundir.CheckIdle(req.RunDir, inUse(req.RunDir)); err != nil {
		return nil, err
	}
	if req.DataDir != "" && e.spec.Dataset == "synthetic" {
		return nil, refusal.Config(field.Errorf("data_dir", "names data, but the run's dataset is synthetic, made from its seed and size: there are no files to evaluate on; leave it out"))
	}
	if req.DataDir != "" {
		e.spec.DataDir = req.DataDir
	}
	// The run's own checkpoint is named by the run directory, the only
	// setting the user gave for it.
	ckField := field.Name("checkpoint")
	e.ckPath = req.Checkpoint
	if e.ckPath == "" {
		e.ckPath, ckField = filepath.Join(req.RunDir, trainer.CheckpointFile), "run_dir"
	}
	if _, err := os.Stat(e.ckPath); err != nil {
		return nil, refusal.Config(field.Errorf(ckField, "%s: %w; a run has one once it has trained an epoch (or been stopped); give another with %s",
			e.ckPath, err, field.Name("checkpoint")))
	}
	if e.worker, err = worker.Find(req.Worker); err != nil {
		return nil, refusal.Setup(err)
	}
	// A worker loads the split and verifies the checkpoint: this process
	// holds no dataset.
	topK := 0
	if req.Predictions {
		topK = req.TopK
	}
	planner := &worker.Process{Path: e.worker, HelloTimeout: req.WorkerStart, HeartbeatTimeout: req.HeartbeatTimeout, Env: req.Env}
	ep, err := jobserver.PlanEval(context.Background(), planner, jobserver.EvalJob{Spec: e.spec, Checkpoint: e.ckPath, Split: req.Split, Shards: req.Workers, TopK: topK})
	var we *worker.Error
	switch {
	case errors.As(err, &we) && we.Kind == worker.KindCheckpoint:
		return nil, refusal.Config(field.Errorf(ckField, "%s", we.Message))
	case errors.As(err, &we) && we.Kind == worker.KindUsage && req.DataDir != "":
		return nil, refusal.Config(field.Errorf("data_dir", "%s", we.Message))
	case errors.As(err, &we) && we.Kind == worker.KindUsage:
		// Keys as field.Names, so the command spells them as its flags.
		return nil, refusal.Config(field.Errorf("run_dir", "%s (the run's data, as its %s names it; %s evaluates on data elsewhere)",
			we.Message, rundir.ConfigFile, field.Name("data_dir")))
	case err != nil:
		return nil, fmt.Errorf("checking the evaluation in the worker %s: %w", e.worker, err)
	}
	e.samples, e.classes, e.positions = ep.Samples, ep.Classes, ep.Positions
	e.data, e.files, e.step, e.sha, e.topK = ep.Data, ep.Files, ep.Step, ep.CheckpointSHA256, ep.TopK
	e.warnings = trainedOn(req.RunDir, e.spec, e.files)
	if req.Workers > e.samples {
		examples := "examples"
		if e.positions > 0 {
			examples = "windows"
		}
		return nil, refusal.Config(field.Errorf("workers", "%d workers for the %d %s of the %s split; give at most %d", req.Workers, e.samples, examples, req.Split, e.samples))
	}
	if req.Resume {
		e.findKept()
	}
	kind := req.Launch.OrLocal()
	if e.launcher, err = kind.New(context.Background(), req.launchConfig(kind, e.worker, e.log)); err != nil {
		return nil, err
	}
	all, err := e.launcher.Slots(context.Background())
	if err != nil {
		return nil, err
	}
	e.slots = launch.NewSlots(all)
	// A scheduler submits the shards to score, not those a resume keeps.
	var score []launch.Worker
	for _, w := range e.workers() {
		if _, kept := e.kept[w.Index]; !kept {
			score = append(score, w)
		}
	}
	e.launcher.Plan(score)
	return e, nil
}

// workers are the shards' workers.
func (e *Run) workers() []launch.Worker {
	ws := make([]launch.Worker, e.req.Workers)
	for s := range ws {
		ws[s] = launch.Worker{Index: s, Spools: e.spools(s), Log: e.shardLog(s)}
	}
	return ws
}

// shardLog is shard s's worker log.
func (e *Run) shardLog(s int) string {
	return filepath.Join(e.req.RunDir, Dir, fmt.Sprintf("shard-%d.log", s))
}

// spools is where shard s's spools go with a scheduler's launcher.
func (e *Run) spools(s int) string {
	return filepath.Join(e.req.RunDir, Dir, "spool", fmt.Sprintf("shard-%d", s))
}

// Devices says where the shards' workers run, each device once: "cpu",
// "cuda:0, cuda:1".
func (e *Run) Devices() string { return e.slots.Devices() }

// CPUThreads is how many kernel threads each shard's worker on this
// machine's CPU gets: the run's cpu_threads when it sets one, else the
// cores divided between the shards side by side (launch.CPUThreads); the
// kernels give the same bits at any thread count.
func (e *Run) CPUThreads() int {
	return launch.CPUThreads(e.spec.CPUThreads, runtime.GOMAXPROCS(0), min(e.slots.Len(), e.req.Workers-len(e.kept)))
}

// Parallel is how many shards' workers run at once.
func (e *Run) Parallel() int { return e.slots.Len() }

// DryRun is, with the Slurm launcher, the batch script of the shards' job
// array and the sbatch command that would submit it; nothing is written.
func (e *Run) DryRun() (script string, command []string) {
	return e.launcher.Describe()
}

// Samples is the number of examples the evaluation scores: a token
// model's windows.
func (e *Run) Samples() int { return e.samples }

// Positions is a token model's targets per window (its context); 0 for a
// model of one class per example.
func (e *Run) Positions() int { return e.positions }

// TopK is the top-k probabilities each row of PredictionsFile gives:
// Request.TopK capped at the classes, with Predictions; 0 otherwise.
func (e *Run) TopK() int { return e.topK }

// Step is the checkpoint's step.
func (e *Run) Step() int { return e.step }

// Checkpoint is the checkpoint file evaluated.
func (e *Run) Checkpoint() string { return e.ckPath }

// Kept are, with Request.Resume, the shards (by rank) whose files from an
// earlier evaluation verify as this one's and are not scored again.
func (e *Run) Kept() []int {
	kept := make([]int, 0, len(e.kept))
	for s := range e.kept {
		kept = append(kept, s)
	}
	sort.Ints(kept)
	return kept
}

// Rescored are, with Request.Resume, the shard files found that do not
// verify as this evaluation's, by rank, with the reason: those shards are
// scored again.
func (e *Run) Rescored() map[int]error { return e.rescore }

// findKept reads the shard files an earlier evaluation left and keeps
// those that verify as this one's: the file's digest, its header (split,
// shards, examples, classes, positions, the checkpoint's digest and step,
// and the data's fingerprint) and its records, exactly the examples of its
// stride shard. Any other file is scored again.
func (e *Run) findKept() {
	e.kept, e.rescore = map[int]jobserver.ShardHeader{}, map[int]error{}
	for s := range e.req.Workers {
		path := ShardFile(e.req.RunDir, s)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		h, err := e.verifyFile(s, path)
		if err != nil {
			e.rescore[s] = err
			continue
		}
		e.kept[s] = h
	}
}

// verifyFile checks that the file at path is shard s of this evaluation,
// whole: its digest, its header, and one record for every label of its
// examples, in order. It reads the file record by record, holding none.
func (e *Run) verifyFile(s int, path string) (jobserver.ShardHeader, error) {
	r, err := jobserver.OpenShard(path)
	if err != nil {
		return jobserver.ShardHeader{}, err
	}
	defer r.Close()
	if err := e.explainHeader(r.Header); err != nil {
		return jobserver.ShardHeader{}, err
	}
	if err := checkHeader(e.expect(), s, r.Header); err != nil {
		return jobserver.ShardHeader{}, err
	}
	first, stride, count := e.shardExamples(s)
	labels := max(1, e.positions)
	if r.Header.Count != count*labels {
		return jobserver.ShardHeader{}, fmt.Errorf("%w: shard %d holds %d records, want %d", ErrMerge, s, r.Header.Count, count*labels)
	}
	for i := range r.Header.Count {
		rec, err := r.Next()
		if err != nil {
			return jobserver.ShardHeader{}, err
		}
		if want := (first+i/labels*stride)*labels + i%labels; rec.Index != want {
			return jobserver.ShardHeader{}, fmt.Errorf("%w: shard %d's record %d is of index %d, want %d", ErrMerge, s, i, rec.Index, want)
		}
	}
	return r.Header, nil
}

// explainHeader says in words why a shard file of another evaluation is
// not this one's, for the differences a user makes: another number of
// shards, another top k, another checkpoint, other data, another split.
func (e *Run) explainHeader(h jobserver.ShardHeader) error {
	want := e.expect()
	switch {
	case h.Shards != want.Shards:
		return field.Errorf("workers", "%w: written by an evaluation of %d shards, not %d: give %s %d to keep it", ErrMerge, h.Shards, want.Shards, field.Name("workers"), h.Shards)
	case h.Split != want.Split:
		return fmt.Errorf("%w: of the %s split, not %s", ErrMerge, h.Split, want.Split)
	case h.CheckpointSHA256 != want.CheckpointSHA256:
		return fmt.Errorf("%w: scored with another checkpoint (SHA-256 %.12s..., step %d)", ErrMerge, h.CheckpointSHA256, h.Step)
	case h.Data != want.Data:
		return fmt.Errorf("%w: scored on other data (fingerprint %q, this evaluation's %q)", ErrMerge, h.Data, want.Data)
	case h.TopK != want.TopK:
		return field.Errorf("top_k", "%w: holds the top %d classes, this evaluation %d: give the same %s", ErrMerge, h.TopK, want.TopK, field.Name("top_k"))
	}
	return nil
}

// shardExamples are shard s's examples (a token model's windows): first,
// first+stride, ..., count of them.
func (e *Run) shardExamples(s int) (first, stride, count int) {
	n := e.req.Workers
	return s, n, (e.samples - s + n - 1) / n
}

// Run scores every shard in its own worker process, all at once, trying a
// failed shard once more (with Request.Resume, only the shards not kept);
// merges the shard files; and replaces eval.json with the result once it
// is complete, the one it replaces kept as eval.prev.json. When a shard
// fails both attempts, eval.json is left as it was, the figures over the
// examples scored go to eval.partial.json, and the error is a
// *ShardsFailedError (the report is returned with it). Cancelling ctx
// stops the workers; the shard files finished are kept for a resume.
func (e *Run) Run(ctx context.Context) (*Report, error) {
	start := time.Now()
	// Held for the whole evaluation: a run resumed in the directory would
	// replace the checkpoint the shards verify, and a second evaluation
	// would replace their files.
	held, err := rundir.Hold(e.req.RunDir, "tolaria eval", inUse(e.req.RunDir))
	if err != nil {
		return nil, err
	}
	defer held.Release()
	dir := filepath.Join(e.req.RunDir, Dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// An earlier evaluation's shards are never merged into this one unless
	// they verify as its own (a resume); the temporary files of writes a
	// kill cut short go too.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, ent := range entries {
		name := ent.Name()
		if atomicfile.IsTemp(name) || (strings.HasSuffix(name, shardExt) && !e.isKept(name)) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	// A Ctrl-C reaches the shards only once the launcher will start no
	// worker any more (see launch.Launcher.Hold).
	ctx, stop := e.launcher.Hold(ctx)
	defer stop()
	defer launch.ReleaseAll(ctx, e.launcher, e.workers())
	n := e.req.Workers
	scored := make([]bool, n)
	reasons := map[int]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range n {
		if _, ok := e.kept[s]; ok {
			scored[s] = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := e.runShard(ctx, s)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				reasons[s] = err.Error()
				return
			}
			scored[s] = true
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(reasons) > 0 {
		return e.partial(scored, reasons, start)
	}
	rep, err := e.mergeFiles(nil)
	if err != nil {
		return nil, err
	}
	e.describe(rep)
	written, stale, err := e.publishPredictions()
	if err != nil {
		return nil, err
	}
	if written != "" {
		rep.Predictions = PredictionsFile
	}
	rep.Seconds, rep.Budgets = time.Since(start).Seconds(), e.books.report()
	if err := e.publish(rep); err != nil {
		return nil, err
	}
	// The predictions of the result just replaced describe it no more.
	if stale != "" {
		if err := os.Remove(stale); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return rep, nil
}

// Record sets em to the outcome of Run: rep and the error it returned. An
// evaluation without figures (interrupted, or no shard scored) sets none.
func (e *Run) Record(em *telemetry.EvalMetrics, rep *Report, err error) {
	if em == nil || rep == nil {
		return
	}
	res := telemetry.EvalResult{Complete: rep.Complete, Accuracy: rep.Accuracy, Loss: rep.Loss, Kept: len(e.kept)}
	var failed *ShardsFailedError
	if errors.As(err, &failed) {
		res.Failed = len(failed.Missing)
	}
	res.Scored = e.req.Workers - res.Kept - res.Failed
	em.Result(res)
}

// describe names in rep what was evaluated: the run, the checkpoint, the
// data and its files, and the warnings.
func (e *Run) describe(rep *Report) {
	rep.RunDir, rep.Checkpoint = e.req.RunDir, e.ckPath
	if e.spec.Dataset != "synthetic" {
		rep.DataDir = e.spec.DataDir
	}
	rep.DataFiles, rep.Warnings = e.files, e.warnings
}

// Warnings are what the result says about its data (Report.Warnings).
func (e *Run) Warnings() []string { return e.warnings }

// trainedOn compares the files an evaluation reads with those the run
// read when it trained (its data.json), file by file under their data
// directories, and says where they differ, or that it cannot tell. The
// synthetic dataset has no files: it is made from the seed and size that
// config.yaml records, the same data by construction.
func trainedOn(runDir string, spec job.Spec, files []data.SourceFile) []string {
	if spec.Dataset == "synthetic" {
		return nil
	}
	record := filepath.Join(runDir, rundir.DataFile)
	rec, ok, err := rundir.ReadData(runDir)
	switch {
	case err != nil:
		return []string{fmt.Sprintf("%s cannot be read (%v): whether %s holds the data the run trained on cannot be told", record, err, spec.DataDir)}
	case !ok:
		return []string{fmt.Sprintf("the run records no data files (no %s: a run trained before tolaria recorded them): whether %s holds the data it trained on cannot be told", record, spec.DataDir)}
	}
	changes := data.CompareSources(data.RelativeTo(rec.DataDir, rec.Files), data.RelativeTo(spec.DataDir, files))
	if len(changes) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("the data differs from the data the run trained on (%s, read from %s): in %s, %s",
		record, rec.DataDir, spec.DataDir, data.DescribeChanges(changes))}
}

// inUse says what to do about a run directory another tolaria holds.
func inUse(runDir string) string {
	runDir = filepath.Clean(runDir)
	return fmt.Sprintf("its checkpoint and files change while it is held, so the shards would fail their checks: wait for it to end, or evaluate a copy (%s, then %s)",
		shellword.Join("cp", "-r", runDir, runDir+"-copy"), shellword.Join("tolaria", "eval", "--run-dir", runDir+"-copy"))
}

// exists reports whether path names a file or directory.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// isKept reports whether a shard file's base name is one Resume keeps.
func (e *Run) isKept(name string) bool {
	for s := range e.kept {
		if filepath.Base(ShardFile(e.req.RunDir, s)) == name {
			return true
		}
	}
	return false
}

// partial writes eval.partial.json, the figures over the shards scored,
// and returns them with the *ShardsFailedError that names the others.
func (e *Run) partial(scored []bool, reasons map[int]string, start time.Time) (*Report, error) {
	fe := &ShardsFailedError{Reasons: reasons}
	for s := range reasons {
		fe.Missing = append(fe.Missing, s)
	}
	sort.Ints(fe.Missing)
	if !slices.Contains(scored, true) {
		// Figures over no example would read as a result of zeros; and an
		// earlier evaluation's partial figures describe shard files that
		// are gone.
		if err := os.Remove(filepath.Join(e.req.RunDir, PartialJSONFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, errors.Join(fe, err)
		}
		return nil, fe
	}
	rep, err := e.mergeFiles(scored)
	if err != nil {
		return nil, errors.Join(fe, err)
	}
	e.describe(rep)
	for _, s := range fe.Missing {
		first, stride, count := e.shardExamples(s)
		rep.Missing = append(rep.Missing, MissingShard{Shard: s, First: first, Stride: stride, Count: count,
			Reason: reasons[s], Log: e.shardLog(s)})
	}
	rep.Seconds, rep.Budgets = time.Since(start).Seconds(), e.books.report()
	path := filepath.Join(e.req.RunDir, PartialJSONFile)
	if err := writeJSON(path, rep); err != nil {
		return nil, errors.Join(fe, err)
	}
	fe.Partial = path
	return rep, fe
}

// publish replaces eval.json with rep, complete: the previous eval.json is
// first copied to eval.prev.json, so that at every moment eval.json is
// the old result or the new one, each whole, and a stale
// eval.partial.json is removed last.
func (e *Run) publish(rep *Report) error {
	path := filepath.Join(e.req.RunDir, JSONFile)
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := atomicfile.WriteFile(filepath.Join(e.req.RunDir, PrevJSONFile), old, 0o644); err != nil {
			return err
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := writeJSON(path, rep); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(e.req.RunDir, PartialJSONFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// writeJSON replaces path with rep, indented, atomically and synced.
func writeJSON(path string, rep *Report) error {
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(raw, '\n'), 0o644)
}

// expect is the header every shard file must carry (but its rank and count).
func (e *Run) expect() jobserver.ShardHeader {
	return jobserver.ShardHeader{Split: e.req.Split, Shards: e.req.Workers, Samples: e.samples, Classes: e.classes,
		Positions: e.positions, CheckpointSHA256: e.sha, Step: e.step, Data: e.data, TopK: e.topK}
}

// ShardFile is shard s's file in the evaluation directory.
func ShardFile(runDir string, s int) string {
	return filepath.Join(runDir, Dir, fmt.Sprintf("shard-%d%s", s, shardExt))
}

// runShard scores shard s, trying it twice, and returns its file read
// back and checked.
func (e *Run) runShard(ctx context.Context, s int) error {
	sl, err := e.slots.Take(ctx)
	if err != nil {
		return err
	}
	defer e.slots.Give(sl)
	for attempt := 1; attempt <= evalAttempts && ctx.Err() == nil; attempt++ {
		t0 := time.Now()
		var h jobserver.ShardHeader
		h, err = e.attempt(ctx, s, sl, attempt)
		last := attempt == evalAttempts || repeats(err)
		if err != nil && ctx.Err() != nil {
			break // interrupted: not a failure of the shard's to report
		}
		if e.req.Progress != nil {
			e.req.Progress(Progress{Shard: s, Shards: e.req.Workers, Attempt: attempt, Last: last, Device: sl.String(), Samples: h.Count / max(1, e.positions),
				Err: err, Seconds: time.Since(t0).Seconds()})
		}
		if err == nil {
			return nil
		}
		e.log.Warn("evaluation shard failed", "shard", s, "attempt", attempt, "err", err)
		if last {
			break
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// repeats says whether a failed attempt would fail the same way in a new
// worker: no device where the slot placed it, or input the worker refused.
func repeats(err error) bool {
	var we *worker.Error
	return errors.As(err, &we) && (we.Kind == worker.KindNoDevice || we.Kind == worker.KindUsage)
}

func (e *Run) attempt(ctx context.Context, s int, sl launch.Slot, attempt int) (jobserver.ShardHeader, error) {
	logPath := e.shardLog(s)
	w := launch.Worker{Index: s, Spools: e.spools(s), Log: logPath}
	defer e.launcher.Release(ctx, w)
	h, err := e.launcher.Start(ctx, w, sl, attempt)
	if err != nil {
		return jobserver.ShardHeader{}, err
	}
	defer h.Close()
	out := ShardFile(e.req.RunDir, s)
	spec := e.spec
	if sl.Device == "cpu" && !sl.Remote() {
		spec.CPUThreads = e.CPUThreads()
	}
	ej := jobserver.EvalJob{Spec: spec, Checkpoint: e.ckPath, CheckpointSHA256: e.sha, Split: e.req.Split,
		Shard: s, Shards: e.req.Workers, Attempt: attempt, Out: out, TopK: e.topK, DataFiles: e.files}
	var sink jobserver.Sink
	if !sl.Remote() {
		// The broker keeps the books of this machine's devices.
		b := e.shardBudget(s, attempt, sl)
		defer b.Release()
		sink.Budget = func(req jobserver.BudgetRequest, reply jobserver.BudgetReply) error { return b.Ask(req, reply) }
	}
	if _, _, err := jobserver.Evaluate(ctx, h.Transport, sl.Device, ej, sink); err != nil {
		return jobserver.ShardHeader{}, fmt.Errorf("attempt %d: %w (worker log %s)", attempt, err, logPath)
	}
	hd, err := e.verifyFile(s, out)
	if err != nil {
		return jobserver.ShardHeader{}, fmt.Errorf("attempt %d: %w", attempt, err)
	}
	return hd, nil
}

// shardBudget is attempt's holder of a budget on sl's device: it cannot
// park, and its waits are counted and told to Request.Budget.
func (e *Run) shardBudget(s, attempt int, sl launch.Slot) *holder.Sink {
	return holder.New(holder.Config{Broker: e.broker, Holder: fmt.Sprintf("shard %d", s), Kind: "evaluation shard", Device: sl.String(),
		Logger: e.log.With("shard", s), Report: func(u holder.Update) {
			if u.Waiting {
				e.books.waited(sl.String())
			}
			if e.req.Budget != nil {
				e.req.Budget(s, attempt, sl.String(), u)
			}
		}})
}

// ErrMerge is wrapped by every refusal of a set of shard files.
var ErrMerge = errors.New("evaluation shards do not merge")

// checkShard checks that a shard file's header is the one expected of
// rank s.
func checkShard(want jobserver.ShardHeader, s int, sh jobserver.Shard) error {
	return checkHeader(want, s, sh.Header)
}

// checkHeader checks that a shard file's header is the one expected of
// rank s.
func checkHeader(want jobserver.ShardHeader, s int, got jobserver.ShardHeader) error {
	want.Shard, want.Count = s, got.Count
	if got != want {
		return fmt.Errorf("%w: shard %d's header %+v does not match the evaluation's %+v", ErrMerge, s, got, want)
	}
	return nil
}

// Merge validates that the shards score every label of the split
// exactly once (an example's, or each position of a token model's
// windows), and merges them. The loss is the mean of the labels' losses
// summed in index order in float64 (a token model's: window by window,
// each in position order), so it does not depend on how the examples were
// split. A refusal wraps ErrMerge and names the duplicated, missing or
// out-of-range indices (window.position for a token model).
func Merge(want jobserver.ShardHeader, shards []jobserver.Shard) (*Report, error) {
	return merge(want, shards, nil)
}

// MergePartial is Merge of the shards s for which scored[s] holds, the
// others failed: the figures are over the examples scored (Samples counts
// them, SplitSamples the split's), summed in index order as Merge sums
// them, and Complete is false. The shards scored must each be whole.
func MergePartial(want jobserver.ShardHeader, shards []jobserver.Shard, scored []bool) (*Report, error) {
	if len(scored) != len(shards) {
		return nil, fmt.Errorf("%w: %d shards, %d marked scored or not", ErrMerge, len(shards), len(scored))
	}
	return merge(want, shards, scored)
}

// merge is Merge of the shards marked in scored (every one when scored is
// nil).
func merge(want jobserver.ShardHeader, shards []jobserver.Shard, scored []bool) (*Report, error) {
	present := func(s int) bool { return scored == nil || scored[s] }
	if len(shards) != want.Shards {
		return nil, fmt.Errorf("%w: %d shard files for %d shards", ErrMerge, len(shards), want.Shards)
	}
	if want.Positions < 0 || want.Samples < 0 {
		return nil, fmt.Errorf("%w: %d examples of %d positions", ErrMerge, want.Samples, want.Positions)
	}
	labels := want.Samples * max(1, want.Positions)
	name := func(i int) string {
		if want.Positions == 0 {
			return fmt.Sprint(i)
		}
		return fmt.Sprintf("%d.%d", i/want.Positions, i%want.Positions)
	}
	recs := make([]rec, labels)
	seen := make([]bool, labels)
	var dups, outside []string
	for s, sh := range shards {
		if !present(s) {
			continue
		}
		if err := checkShard(want, s, sh); err != nil {
			return nil, err
		}
		if len(sh.Scores) != sh.Header.Count {
			return nil, fmt.Errorf("%w: shard %d holds %d records, its header says %d", ErrMerge, s, len(sh.Scores), sh.Header.Count)
		}
		for _, r := range sh.Scores {
			switch {
			case r.Index < 0 || r.Index >= labels:
				outside = append(outside, fmt.Sprintf("%s (shard %d)", name(r.Index), s))
			case r.Label < 0 || r.Label >= want.Classes || r.Predicted < 0 || r.Predicted >= want.Classes:
				outside = append(outside, fmt.Sprintf("%s (shard %d: label %d, predicted %d of %d classes)", name(r.Index), s, r.Label, r.Predicted, want.Classes))
			case seen[r.Index]:
				dups = append(dups, fmt.Sprintf("%s (shards %d and %d)", name(r.Index), recs[r.Index].shard, s))
			default:
				seen[r.Index] = true
				recs[r.Index] = rec{label: r.Label, pred: r.Predicted, loss: r.Loss, shard: s}
			}
		}
	}
	// The shard of label i, whose examples are strided.
	shardOf := func(i int) int { return i / max(1, want.Positions) % want.Shards }
	var missing []string
	samples := 0
	for i, ok := range seen {
		switch {
		case ok:
			if want.Positions == 0 || i%want.Positions == 0 {
				samples++
			}
		case present(shardOf(i)):
			missing = append(missing, name(i))
		}
	}
	var problems []string
	if len(outside) > 0 {
		problems = append(problems, fmt.Sprintf("%d out of range: %s", len(outside), listSome(outside)))
	}
	if len(dups) > 0 {
		problems = append(problems, fmt.Sprintf("%d scored twice: %s", len(dups), listSome(dups)))
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d missing: %s", len(missing), listSome(missing)))
	}
	if len(problems) > 0 {
		what := "every example must be scored exactly once; indices"
		if want.Positions > 0 {
			what = "every position of every window must be scored exactly once; window.position"
		}
		return nil, fmt.Errorf("%w: %s %s", ErrMerge, what, strings.Join(problems, "; "))
	}
	return mergeFigures(want, scored, samples, func(i int) bool { return seen[i] }, func(i int) (trainer.Scored, error) {
		return trainer.Scored{Index: i, Label: recs[i].label, Predicted: recs[i].pred, Loss: recs[i].loss}, nil
	})
}

// rec is a label's figures as the merge holds them.
type rec struct {
	label, pred int
	loss        float64
	shard       int
}

// mergeFiles is Merge (MergePartial when scored is not nil) of this
// evaluation's shard files, verified as they were written or kept: they
// are read all at once, record by record in index order, so the merge
// holds a buffered chunk of each file and no record beyond.
func (e *Run) mergeFiles(scored []bool) (*Report, error) {
	want := e.expect()
	at, closeAll, err := e.streamShards(scored)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	present := func(s int) bool { return scored == nil || scored[s] }
	samples := 0
	for s := range want.Shards {
		if present(s) {
			_, _, count := e.shardExamples(s)
			samples += count
		}
	}
	per := max(1, want.Positions)
	return mergeFigures(want, scored, samples, func(i int) bool { return present(i / per % want.Shards) }, at)
}

// streamShards opens the shard files of the shards marked in scored (all
// when it is nil) and returns a function that reads label i's record,
// called for every label of those shards in index order: each call reads
// the next record of label i's shard, which must be label i's, of the
// evaluation's classes.
func (e *Run) streamShards(scored []bool) (at func(i int) (trainer.Scored, error), closeAll func(), err error) {
	want := e.expect()
	readers := make([]*jobserver.ShardReader, want.Shards)
	closeAll = func() {
		for _, r := range readers {
			if r != nil {
				r.Close()
			}
		}
	}
	for s := range readers {
		if scored != nil && !scored[s] {
			continue
		}
		r, err := jobserver.OpenShard(ShardFile(e.req.RunDir, s))
		if err == nil {
			err = checkHeader(want, s, r.Header)
		}
		if err != nil {
			if r != nil {
				r.Close()
			}
			closeAll()
			return nil, nil, err
		}
		readers[s] = r
	}
	per := max(1, want.Positions)
	at = func(i int) (trainer.Scored, error) {
		s := i / per % want.Shards
		r, err := readers[s].Next()
		switch {
		case errors.Is(err, io.EOF):
			return trainer.Scored{}, fmt.Errorf("%w: shard %d holds no record for label %d", ErrMerge, s, i)
		case err != nil:
			return trainer.Scored{}, err
		case r.Index != i:
			return trainer.Scored{}, fmt.Errorf("%w: shard %d's next record is of index %d, want %d", ErrMerge, s, r.Index, i)
		case r.Label < 0 || r.Label >= want.Classes || r.Predicted < 0 || r.Predicted >= want.Classes:
			return trainer.Scored{}, fmt.Errorf("%w: label %d (shard %d): label %d, predicted %d of %d classes", ErrMerge, i, s, r.Label, r.Predicted, want.Classes)
		}
		return r, nil
	}
	return at, closeAll, nil
}

// mergeFigures computes the figures of samples examples (windows) from
// their labels' records: has(i) tells whether label i was scored, and
// at(i) gives its record, called for every label scored in index order,
// once each, so that at may read the shard files as they stream.
func mergeFigures(want jobserver.ShardHeader, scored []bool, samples int, has func(i int) bool, at func(i int) (trainer.Scored, error)) (*Report, error) {
	rep := &Report{CheckpointSHA256: want.CheckpointSHA256, Step: want.Step, Split: want.Split, Workers: want.Shards,
		Complete: true, Samples: samples}
	if scored != nil {
		rep.SplitSamples = want.Samples
		for _, ok := range scored {
			rep.Complete = rep.Complete && ok
		}
	}
	if want.Positions > 0 {
		var err error
		mergeSequence(rep, want.Positions, func(w int) bool { return has(w * want.Positions) },
			func(i int) (float64, bool) {
				r, rerr := at(i)
				if rerr != nil && err == nil {
					err = rerr
				}
				return r.Loss, r.Label == r.Predicted
			})
		if err != nil {
			return nil, err
		}
		return rep, nil
	}
	rep.PerClass, rep.Confusion = make([]ClassFigures, want.Classes), make([][]int, want.Classes)
	for c := range rep.Confusion {
		rep.Confusion[c] = make([]int, want.Classes)
		rep.PerClass[c].Class = c
	}
	var loss float64
	for i := range want.Samples {
		if !has(i) {
			continue
		}
		rr, err := at(i)
		if err != nil {
			return nil, err
		}
		r := rec{label: rr.Label, pred: rr.Predicted, loss: rr.Loss}
		loss += r.loss
		rep.Confusion[r.label][r.pred]++
		rep.PerClass[r.label].Samples++
		if r.label == r.pred {
			rep.Correct++
			rep.PerClass[r.label].Correct++
		}
	}
	rep.Loss, rep.Accuracy = ratio(loss, rep.Samples), ratio(float64(rep.Correct), rep.Samples)
	for c := range rep.PerClass {
		if p := &rep.PerClass[c]; p.Samples > 0 {
			p.Accuracy = float64(p.Correct) / float64(p.Samples)
		}
	}
	return rep, nil
}

// mergeSequence fills in a token model's figures from its rep.Samples
// windows of positions labels (those for which scored holds), label i's
// loss and whether it was predicted right given by score. Every sum runs
// in label order (a position's over the windows in window order) in
// float64. A 256-byte vocabulary's
// per-class figures and confusion matrix are left out: they describe
// classes of examples, not next bytes, and would fill eval.json.
func mergeSequence(rep *Report, positions int, scored func(w int) bool, score func(i int) (loss float64, right bool)) {
	seq := &SequenceFigures{Positions: positions, Tokens: rep.Samples * positions,
		PositionAccuracy: make([]float64, positions), PositionLoss: make([]float64, positions)}
	correct := make([]int, positions)
	var loss float64
	windows := max(rep.Samples, rep.SplitSamples)
	for i := range windows * positions {
		if !scored(i / positions) {
			continue
		}
		l, right := score(i)
		p := i % positions
		loss += l
		seq.PositionLoss[p] += l
		if right {
			rep.Correct++
			correct[p]++
		}
	}
	rep.Loss, rep.Accuracy = ratio(loss, seq.Tokens), ratio(float64(rep.Correct), seq.Tokens)
	seq.BitsPerByte = rep.Loss / math.Ln2
	for p := range positions {
		seq.PositionAccuracy[p] = ratio(float64(correct[p]), rep.Samples)
		seq.PositionLoss[p] = ratio(seq.PositionLoss[p], rep.Samples)
	}
	rep.Sequence = seq
}

// ratio is sum/n, and 0 when n is 0 (a partial result of no example).
func ratio(sum float64, n int) float64 {
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// listSome lists the first few of items and how many more there are.
func listSome(items []string) string {
	const most = 10
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// Files of a sharded evaluation, in the run directory.
const (
	EvalDir  = "eval"      // shard files and each shard's worker log
	EvalJSON = "eval.json" // the merged result
)

// shardExt ends a shard file's name.
const shardExt = ".tles"

// evalAttempts is how many times a shard is tried: once, and once more.
const evalAttempts = 2

// EvalRequest is a sharded evaluation of a run's checkpoint as a command
// asks for it.
type EvalRequest struct {
	RunDir     string
	Checkpoint string // "" is the run directory's checkpoint.tlck
	Workers    int    // worker processes, each scoring one stride shard
	Split      string // test (the default) or train
	// Device is where each shard's worker scores: cpu (the default) or
	// cuda, the first GPU the worker sees (a CUDA build of tolaria-worker;
	// CUDA_VISIBLE_DEVICES in Env chooses it). Every shard runs there.
	Device string
	// Worker is the tolaria-worker binary ("" finds it, see worker.Find).
	Worker           string
	WorkerStart      time.Duration // 0: worker.DefaultHelloTimeout
	HeartbeatTimeout time.Duration // 0: worker.DefaultHeartbeatTimeout
	Env              []string      // added to every worker's environment
	// Launcher is where the shards' workers run: LauncherLocal ("" too),
	// or LauncherSlurm, a task per shard of a Slurm job array (see
	// SlurmConfig), all at once; the retry of a failed shard is an array of
	// its own.
	Launcher string
	Slurm    SlurmConfig
	// DryRun plans the evaluation for DryRun to print; Run is not called.
	DryRun bool
	Logger *slog.Logger
	// Progress, when set, is told of each shard's attempts as they end.
	Progress func(EvalProgress)
}

// EvalProgress is a shard attempt that ended.
type EvalProgress struct {
	Shard, Shards int
	Attempt       int
	Samples       int   // scored, when Err is nil
	Err           error // why the attempt failed
	Seconds       float64
}

// Validate checks the request's own settings, naming the one at fault.
func (r EvalRequest) Validate() error {
	switch {
	case r.RunDir == "":
		return configErr(field.Errorf("run_dir", "is required: point it at the run whose checkpoint to evaluate"))
	case r.Workers < 1:
		return configErr(field.Errorf("workers", "must be at least 1, got %d", r.Workers))
	case r.Split != "" && r.Split != jobserver.SplitTest && r.Split != jobserver.SplitTrain:
		return configErr(field.Errorf("split", "must be test or train, got %q", r.Split))
	case r.Device != "" && r.Device != "cpu" && r.Device != "cuda":
		return configErr(field.Errorf("device", "must be cpu or cuda, got %q", r.Device))
	case r.WorkerStart < 0:
		return configErr(field.Errorf("worker_start_timeout", "cannot be negative (%s)", r.WorkerStart))
	case r.HeartbeatTimeout != 0 && r.HeartbeatTimeout < worker.MinHeartbeatTimeout:
		return configErr(field.Errorf("heartbeat_timeout", "%s is too short: a loaded machine's scheduling could pass for a hang; give %s or more",
			r.HeartbeatTimeout, worker.MinHeartbeatTimeout))
	case r.Launcher != "" && r.Launcher != LauncherLocal && r.Launcher != LauncherSlurm:
		return configErr(field.Errorf("launcher", "must be local or slurm, got %q", r.Launcher))
	}
	if r.Launcher == LauncherSlurm {
		// The run directory names every shard's spool and log in the
		// batch script.
		if err := slurmDir("run_dir", r.RunDir); err != nil {
			return err
		}
		return r.Slurm.Validate()
	}
	return nil
}

// EvalReport is eval.json: a checkpoint's figures on a split, merged from
// every shard.
type EvalReport struct {
	RunDir           string  `json:"run_dir"`
	Checkpoint       string  `json:"checkpoint"`
	CheckpointSHA256 string  `json:"checkpoint_sha256"`
	Step             int     `json:"step"`
	Split            string  `json:"split"`
	Workers          int     `json:"workers"`
	Samples          int     `json:"samples"`
	Loss             float64 `json:"loss"`
	Accuracy         float64 `json:"accuracy"`
	Correct          int     `json:"correct"`
	// PerClass[c] is class c's examples, those predicted right, and their
	// ratio (0 for a class without examples).
	PerClass []ClassFigures `json:"per_class"`
	// Confusion[t][p] counts the examples of class t predicted as p.
	Confusion [][]int `json:"confusion"`
	Seconds   float64 `json:"seconds"`
}

// ClassFigures are one class's figures in an evaluation.
type ClassFigures struct {
	Class    int     `json:"class"`
	Samples  int     `json:"samples"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
}

// ShardsFailedError is an evaluation whose shards (by rank) failed every
// attempt: no eval.json is written.
type ShardsFailedError struct {
	Missing []int
	Reasons map[int]string
}

func (e *ShardsFailedError) Error() string {
	parts := make([]string, 0, len(e.Missing))
	for _, s := range e.Missing {
		parts = append(parts, fmt.Sprintf("shard %d: %s", s, e.Reasons[s]))
	}
	return fmt.Sprintf("evaluation incomplete: %d shard(s) failed twice and are missing, so no %s was written:\n%s",
		len(e.Missing), EvalJSON, strings.Join(parts, "\n"))
}

// Evaluation is a sharded evaluation planned: everything checked, nothing
// written yet.
type Evaluation struct {
	req     EvalRequest
	spec    job.Spec
	ckPath  string
	sha     string
	step    int
	samples int
	classes int
	worker  string
	log     *slog.Logger
	// slurm submits the shards' workers with LauncherSlurm; nil runs them
	// here.
	slurm *slurmLauncher
}

// PlanEval checks a sharded evaluation before anything is written: the
// request, the run's configuration, the data, the checkpoint (verified as
// a resumed run verifies it) and the worker binary.
func PlanEval(req EvalRequest) (*Evaluation, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if req.Split == "" {
		req.Split = jobserver.SplitTest
	}
	e := &Evaluation{req: req, log: req.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if st, err := os.Stat(req.RunDir); err != nil || !st.IsDir() {
		return nil, configErr(field.Errorf("run_dir", "%s is not a run directory; point it at a run made by tolaria train", req.RunDir))
	}
	var err error
	if e.spec, err = RunSpec(req.RunDir); err != nil {
		return nil, err
	}
	ds, tc, err := jobserver.EvalData(e.spec, req.Split)
	if err != nil {
		return nil, configErr(fmt.Errorf("the run's data: %w", err))
	}
	e.samples, e.classes = ds.Len(), ds.Classes
	if req.Workers > e.samples {
		return nil, configErr(field.Errorf("workers", "%d workers for the %d examples of the %s split; give at most %d", req.Workers, e.samples, req.Split, e.samples))
	}
	e.ckPath = req.Checkpoint
	if e.ckPath == "" {
		e.ckPath = filepath.Join(req.RunDir, trainer.CheckpointFile)
	}
	if _, err := os.Stat(e.ckPath); err != nil {
		return nil, configErr(field.Errorf("checkpoint", "%s: %w; a run has one once it has trained an epoch (or been stopped); give another with %s",
			e.ckPath, err, field.Name("checkpoint")))
	}
	ck, err := trainer.CheckpointFor(tc, e.ckPath)
	if err != nil {
		return nil, configErr(field.Errorf("checkpoint", "%w", err))
	}
	e.step = ck.Step
	if e.sha, err = jobserver.FileSHA256(e.ckPath); err != nil {
		return nil, configErr(field.Errorf("checkpoint", "%w", err))
	}
	if e.worker, err = worker.Find(req.Worker); err != nil {
		return nil, setupErr(err)
	}
	if req.Launcher == LauncherSlurm {
		dev := req.Device
		if dev == "" {
			dev = "cpu"
		}
		if e.slurm, err = newSlurmLauncher(req.Slurm, filepath.Join(req.RunDir, EvalDir, "slurm"), e.worker, dev, 0, req.DryRun); err != nil {
			return nil, err
		}
		for s := range req.Workers {
			e.slurm.plan(s, e.spools(s), e.shardLog(s))
		}
	}
	return e, nil
}

// shardLog is shard s's worker log.
func (e *Evaluation) shardLog(s int) string {
	return filepath.Join(e.req.RunDir, EvalDir, fmt.Sprintf("shard-%d.log", s))
}

// spools is where shard s's spools go with the Slurm launcher.
func (e *Evaluation) spools(s int) string {
	return filepath.Join(e.req.RunDir, EvalDir, "spool", fmt.Sprintf("shard-%d", s))
}

// DryRun is, with the Slurm launcher, the batch script of the shards' job
// array and the sbatch command that would submit it; nothing is written.
func (e *Evaluation) DryRun() (script string, command []string) {
	if e.slurm == nil {
		return "", nil
	}
	return e.slurm.dryRun()
}

// RunSpec reads the job a run directory's config.yaml records.
func RunSpec(dir string) (job.Spec, error) {
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err != nil {
		return job.Spec{}, configErr(field.Errorf("run_dir", "%s has no %s, so it is not a tolaria run; point it at a run made by tolaria train", dir, ConfigFile))
	}
	m, err := job.ReadConfigFile(path, nil)
	if err != nil {
		return job.Spec{}, configErr(err)
	}
	spec := job.Default()
	if err := apply(&spec, job.Settings(m)); err != nil {
		return job.Spec{}, configErr(fmt.Errorf("%s: %w", path, err))
	}
	spec.Resume, spec.RunDir = false, dir
	if err := spec.Validate(); err != nil {
		return job.Spec{}, configErr(fmt.Errorf("%s: %w", path, err))
	}
	return spec, nil
}

// Samples is the number of examples the evaluation scores.
func (e *Evaluation) Samples() int { return e.samples }

// Step is the checkpoint's step.
func (e *Evaluation) Step() int { return e.step }

// Checkpoint is the checkpoint file evaluated.
func (e *Evaluation) Checkpoint() string { return e.ckPath }

// Run scores every shard in its own worker process, all at once, trying a
// failed shard once more; merges the shard files; and writes eval.json.
// A shard that fails both attempts gives a *ShardsFailedError and no
// eval.json. Cancelling ctx stops the workers.
func (e *Evaluation) Run(ctx context.Context) (*EvalReport, error) {
	start := time.Now()
	dir := filepath.Join(e.req.RunDir, EvalDir)
	// An earlier evaluation's result must not pass for this one's if it
	// fails.
	if err := os.Remove(filepath.Join(e.req.RunDir, EvalJSON)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// An earlier evaluation's shards are never merged into this one, and
	// the temporary files of writes a kill cut short go too.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, ent := range entries {
		if name := ent.Name(); strings.HasSuffix(name, shardExt) || atomicfile.IsTemp(name) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	if e.slurm != nil {
		// A Ctrl-C reaches the shards only once no queued task can start
		// a worker any more (see holdBack).
		var stop func()
		ctx, stop = e.slurm.holdBack(ctx, func(err error) {
			e.log.Warn("interrupted, and the mark that keeps Slurm tasks from starting their workers could not be made: a queued task may still start one, which stops at once", "err", err)
		})
		defer stop()
		defer e.slurm.close(ctx)
	}
	n := e.req.Workers
	shards := make([]jobserver.Shard, n)
	reasons := map[int]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh, err := e.runShard(ctx, s)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				reasons[s] = err.Error()
				return
			}
			shards[s] = sh
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(reasons) > 0 {
		fe := &ShardsFailedError{Reasons: reasons}
		for s := range reasons {
			fe.Missing = append(fe.Missing, s)
		}
		sort.Ints(fe.Missing)
		return nil, fe
	}
	rep, err := MergeShards(e.expect(), shards)
	if err != nil {
		return nil, err
	}
	rep.RunDir, rep.Checkpoint = e.req.RunDir, e.ckPath
	rep.Seconds = time.Since(start).Seconds()
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := atomicfile.WriteFile(filepath.Join(e.req.RunDir, EvalJSON), append(raw, '\n'), 0o644); err != nil {
		return nil, err
	}
	return rep, nil
}

// expect is the header every shard file must carry (but its rank and count).
func (e *Evaluation) expect() jobserver.ShardHeader {
	return jobserver.ShardHeader{Split: e.req.Split, Shards: e.req.Workers, Samples: e.samples, Classes: e.classes,
		CheckpointSHA256: e.sha, Step: e.step}
}

// ShardFile is shard s's file in the evaluation directory.
func ShardFile(runDir string, s int) string {
	return filepath.Join(runDir, EvalDir, fmt.Sprintf("shard-%d%s", s, shardExt))
}

// runShard scores shard s, trying it twice, and returns its file read
// back and checked.
func (e *Evaluation) runShard(ctx context.Context, s int) (jobserver.Shard, error) {
	var err error
	for attempt := 1; attempt <= evalAttempts && ctx.Err() == nil; attempt++ {
		t0 := time.Now()
		var sh jobserver.Shard
		sh, err = e.attempt(ctx, s, attempt)
		if e.req.Progress != nil {
			e.req.Progress(EvalProgress{Shard: s, Shards: e.req.Workers, Attempt: attempt, Samples: len(sh.Scores), Err: err, Seconds: time.Since(t0).Seconds()})
		}
		if err == nil {
			return sh, nil
		}
		e.log.Warn("evaluation shard failed", "shard", s, "attempt", attempt, "err", err)
	}
	if err == nil {
		err = ctx.Err()
	}
	return jobserver.Shard{}, err
}

func (e *Evaluation) attempt(ctx context.Context, s, attempt int) (jobserver.Shard, error) {
	logPath := e.shardLog(s)
	var t worker.Transport
	if e.slurm != nil {
		// The task writes the log itself, on its node.
		t = e.slurm.transport(s, e.spools(s), logPath, attempt, e.req.WorkerStart, e.req.HeartbeatTimeout)
		defer e.slurm.release(ctx, s)
	} else {
		wlog, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return jobserver.Shard{}, err
		}
		defer wlog.Close()
		t = &worker.Process{Path: e.worker, Stderr: wlog, Logger: e.log, HelloTimeout: e.req.WorkerStart,
			HeartbeatTimeout: e.req.HeartbeatTimeout, Env: e.req.Env}
	}
	out := ShardFile(e.req.RunDir, s)
	ej := jobserver.EvalJob{Spec: e.spec, Checkpoint: e.ckPath, CheckpointSHA256: e.sha, Split: e.req.Split,
		Shard: s, Shards: e.req.Workers, Attempt: attempt, Out: out}
	dev := e.req.Device
	if dev == "" {
		dev = "cpu"
	}
	if _, _, err := jobserver.Evaluate(ctx, t, dev, ej); err != nil {
		return jobserver.Shard{}, fmt.Errorf("attempt %d: %w (worker log %s)", attempt, err, logPath)
	}
	sh, err := jobserver.ReadShard(out)
	if err == nil {
		err = checkShard(e.expect(), s, sh)
	}
	if err != nil {
		return jobserver.Shard{}, fmt.Errorf("attempt %d: %w", attempt, err)
	}
	return sh, nil
}

// ErrMerge is wrapped by every refusal of a set of shard files.
var ErrMerge = errors.New("evaluation shards do not merge")

// checkShard checks that a shard file's header is the one expected of
// rank s.
func checkShard(want jobserver.ShardHeader, s int, sh jobserver.Shard) error {
	got := sh.Header
	want.Shard, want.Count = s, got.Count
	if got != want {
		return fmt.Errorf("%w: shard %d's header %+v does not match the evaluation's %+v", ErrMerge, s, got, want)
	}
	return nil
}

// MergeShards validates that the shards score every example of the split
// exactly once, and merges them. The loss is the mean of the examples'
// losses summed in index order in float64, so it does not depend on how
// the examples were split. A refusal wraps ErrMerge and names the
// duplicated, missing or out-of-range indices.
func MergeShards(want jobserver.ShardHeader, shards []jobserver.Shard) (*EvalReport, error) {
	if len(shards) != want.Shards {
		return nil, fmt.Errorf("%w: %d shard files for %d shards", ErrMerge, len(shards), want.Shards)
	}
	type rec struct {
		label, pred int
		loss        float64
		shard       int
	}
	recs := make([]rec, want.Samples)
	seen := make([]bool, want.Samples)
	var dups, outside []string
	for s, sh := range shards {
		if err := checkShard(want, s, sh); err != nil {
			return nil, err
		}
		if len(sh.Scores) != sh.Header.Count {
			return nil, fmt.Errorf("%w: shard %d holds %d records, its header says %d", ErrMerge, s, len(sh.Scores), sh.Header.Count)
		}
		for _, r := range sh.Scores {
			switch {
			case r.Index < 0 || r.Index >= want.Samples:
				outside = append(outside, fmt.Sprintf("%d (shard %d)", r.Index, s))
			case r.Label < 0 || r.Label >= want.Classes || r.Predicted < 0 || r.Predicted >= want.Classes:
				outside = append(outside, fmt.Sprintf("%d (shard %d: label %d, predicted %d of %d classes)", r.Index, s, r.Label, r.Predicted, want.Classes))
			case seen[r.Index]:
				dups = append(dups, fmt.Sprintf("%d (shards %d and %d)", r.Index, recs[r.Index].shard, s))
			default:
				seen[r.Index] = true
				recs[r.Index] = rec{label: r.Label, pred: r.Predicted, loss: r.Loss, shard: s}
			}
		}
	}
	var missing []int
	for i, ok := range seen {
		if !ok {
			missing = append(missing, i)
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
		ms := make([]string, len(missing))
		for i, m := range missing {
			ms[i] = fmt.Sprint(m)
		}
		problems = append(problems, fmt.Sprintf("%d missing: %s", len(missing), listSome(ms)))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: every example must be scored exactly once; indices %s", ErrMerge, strings.Join(problems, "; "))
	}
	rep := &EvalReport{CheckpointSHA256: want.CheckpointSHA256, Step: want.Step, Split: want.Split, Workers: want.Shards,
		Samples: want.Samples, PerClass: make([]ClassFigures, want.Classes), Confusion: make([][]int, want.Classes)}
	for c := range rep.Confusion {
		rep.Confusion[c] = make([]int, want.Classes)
		rep.PerClass[c].Class = c
	}
	var loss float64
	for _, r := range recs {
		loss += r.loss
		rep.Confusion[r.label][r.pred]++
		rep.PerClass[r.label].Samples++
		if r.label == r.pred {
			rep.Correct++
			rep.PerClass[r.label].Correct++
		}
	}
	rep.Loss = loss / float64(want.Samples)
	rep.Accuracy = float64(rep.Correct) / float64(want.Samples)
	for c := range rep.PerClass {
		if p := &rep.PerClass[c]; p.Samples > 0 {
			p.Accuracy = float64(p.Correct) / float64(p.Samples)
		}
	}
	return rep, nil
}

// listSome lists the first few of items and how many more there are.
func listSome(items []string) string {
	const most = 10
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

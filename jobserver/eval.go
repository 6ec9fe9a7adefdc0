package jobserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// TypeEval is the request of one evaluation shard; its body is an
// EvalJob and its result an EvalResult. The protocol carries it as it
// carries any request.
const TypeEval = "eval"

// Splits an evaluation can score.
const (
	SplitTest  = "test"
	SplitTrain = "train"
)

// EvalJob asks a worker to score one stride shard of a split with a
// checkpoint and write the shard file Out.
type EvalJob struct {
	Spec       job.Spec `json:"spec"` // the run's configuration: the model and the data
	Checkpoint string   `json:"checkpoint"`
	// CheckpointSHA256 is the checkpoint file's digest as the coordinator
	// verified it: a worker that reads another file refuses it.
	CheckpointSHA256 string `json:"checkpoint_sha256"`
	Split            string `json:"split"`
	Shard            int    `json:"shard"`
	Shards           int    `json:"shards"`
	Attempt          int    `json:"attempt"` // 1 for the first, 2 for a retry
	Out              string `json:"out"`
	// TopK is the most probable classes each record keeps with their
	// probabilities (trainer.EvalConfig.TopK); 0 for none.
	TopK int `json:"top_k,omitempty"`
	// DataFiles are the data's files as the coordinator read them when the
	// evaluation began (EvalData): a worker that reads other bytes refuses
	// to score (ErrDataChanged). Nil checks nothing (synthetic data has no
	// files).
	DataFiles []data.SourceFile `json:"data_files,omitempty"`
}

// ErrDataChanged is the refusal of a shard whose data files are not, byte
// for byte, those the evaluation began with.
var ErrDataChanged = errors.New("the data changed since the evaluation began")

// EvalResult is what a worker answers for an EvalJob.
type EvalResult struct {
	File string `json:"file"`
	// Samples is the examples scored: the records written, or for a
	// token model the windows, each of Positions records.
	Samples int `json:"samples"`
}

// FileSHA256 is the hex SHA-256 of a file's bytes.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EvalData loads the split an evaluation scores, with the trainer's
// configuration for the spec (normalised as training normalised it): a
// dataset of one class per example, or text windows with a target per
// position (data.Shape says which). It returns every file the load read,
// as read (data.SourcesOf): the training set's too, whose statistics
// normalise the test set.
func EvalData(spec job.Spec, split string) (data.Examples, trainer.Config, []data.SourceFile, error) {
	return evalData(spec, split, nil)
}

// evalData is EvalData with the load's progress going to advance.
func evalData(spec job.Spec, split string, advance func(stage string)) (data.Examples, trainer.Config, []data.SourceFile, error) {
	if split != SplitTest && split != SplitTrain {
		return nil, trainer.Config{}, nil, usage(fmt.Sprintf("split %q: use test or train", split))
	}
	train, test, err := spec.LoadDataAdvancing(advance)
	if err != nil {
		return nil, trainer.Config{}, nil, err
	}
	cfg, err := spec.Config(train, test, job.Options{})
	if err != nil {
		return nil, trainer.Config{}, nil, err
	}
	files := data.SourcesOf(train, test)
	if split == SplitTrain {
		return train, cfg, files, nil
	}
	return test, cfg, files, nil
}

// CheckDataFiles refuses files that differ from want (the files an
// evaluation began with), naming each change; nil want checks nothing.
func CheckDataFiles(want, got []data.SourceFile) error {
	if want == nil {
		return nil
	}
	if changes := data.CompareSources(want, got); len(changes) > 0 {
		return fmt.Errorf("%w: %s; the shard was not scored: evaluate again once the data no longer changes", ErrDataChanged, data.DescribeChanges(changes))
	}
	return nil
}

// SplitFingerprint is the fingerprint (data.Fingerprint) of a split as
// EvalData loads it, which a shard file records: a shard scored on other
// data is never merged into an evaluation, nor kept by a resumed one.
func SplitFingerprint(ds data.Examples) string { return data.Fingerprint(ds) }

// Evaluate runs one evaluation shard through t and returns its result.
// With sink.Budget set the worker asks for a device-memory budget (its
// bill: trainer.EvalBill and its context) before it allocates, and waits
// for the answer; a shard cannot park, so sink.Parked is not used.
func Evaluate(ctx context.Context, t worker.Transport, deviceName string, ej EvalJob, sink Sink) (worker.Hello, EvalResult, error) {
	body, err := json.Marshal(ej)
	if err != nil {
		return worker.Hello{}, EvalResult{}, fmt.Errorf("worker: encoding the evaluation: %w", err)
	}
	h, res, err := t.Call(ctx, worker.Request{Type: TypeEval, Device: deviceName, Body: body, AskBudget: sink.Budget != nil}, sink.raw())
	if err != nil {
		return h, EvalResult{}, err
	}
	var er EvalResult
	if err := json.Unmarshal(res, &er); err != nil {
		return h, EvalResult{}, fmt.Errorf("worker: reading the evaluation's result: %w", err)
	}
	return h, er, nil
}

// serveEval scores the shard an EvalJob names on dev and writes its file;
// conn.Advance receives its progress. Asked to, it gets a budget for its
// bill before it allocates.
func serveEval(ctx context.Context, conn *worker.Conn, ej EvalJob, dev device.Device, cfg Config) (EvalResult, error) {
	advance := conn.Advance
	if err := ej.Spec.Validate(); err != nil {
		return EvalResult{}, usage(err.Error())
	}
	cfg.Logger.Info("serving an evaluation shard", "shard", ej.Shard, "shards", ej.Shards, "attempt", ej.Attempt, "device", dev.Description())
	ds, tc, files, err := evalData(ej.Spec, ej.Split, advance)
	if err != nil {
		return EvalResult{}, err
	}
	if err := CheckDataFiles(ej.DataFiles, files); err != nil {
		return EvalResult{}, err
	}
	ck, err := trainer.CheckpointForEval(tc, ej.Checkpoint)
	if err != nil {
		return EvalResult{}, err
	}
	sha, err := FileSHA256(ej.Checkpoint)
	if err != nil {
		return EvalResult{}, err
	}
	if sha != ej.CheckpointSHA256 {
		return EvalResult{}, fmt.Errorf("%w: %s changed since the evaluation began (SHA-256 %s, want %s)", trainer.ErrCheckpoint, ej.Checkpoint, sha, ej.CheckpointSHA256)
	}
	ec := trainer.EvalConfig{Spec: tc.Spec, Net: tc.Net, BatchSize: tc.BatchSize, Data: ds, Params: ck.Parameters(), Running: ck.RunningState(),
		Shard: ej.Shard, Shards: ej.Shards, Loaders: ej.Spec.Loaders, Logger: cfg.Logger, Advance: advance, TopK: ej.TopK}
	if cfg.AfterEvalBatch != nil {
		ec.AfterBatch = func(n int) { cfg.AfterEvalBatch(ej, n) }
	}
	if conn.Request().AskBudget {
		bill := trainer.EvalBill(ec, dev)
		bill.Context = cfg.contextBytes
		if err := askBudget(ctx, conn, bill, dev); err != nil {
			return EvalResult{}, err
		}
	}
	scores, err := trainer.Evaluate(ctx, dev, cfg.Shared, ec)
	if err != nil {
		return EvalResult{}, err
	}
	shape := ds.Shape()
	h := ShardHeader{Split: ej.Split, Shard: ej.Shard, Shards: ej.Shards, Samples: ds.Len(), Classes: shape.Classes,
		Positions: shape.Positions, CheckpointSHA256: sha, Step: ck.Step, Data: SplitFingerprint(ds), TopK: ej.TopK}
	if err := WriteShard(ej.Out, Shard{Header: h, Scores: scores}); err != nil {
		return EvalResult{}, fmt.Errorf("writing the shard file: %w", err)
	}
	return EvalResult{File: ej.Out, Samples: len(scores) / shape.Labels()}, nil
}

// TypeEvalPlan asks a worker to check an evaluation before anything of it
// is written: it loads the split of the EvalJob's spec, verifies the
// checkpoint for the model (trainer.CheckpointForEval) and answers an
// EvalPlan, opening no device. A coordinator so holds no dataset of an
// evaluation whose shards run in workers.
const TypeEvalPlan = "eval-plan"

// EvalPlan is what an evaluation's shards will score: the split's
// examples (a token model's windows), classes and positions, the
// fingerprints of its values (Data) and of its files as read (Files), and
// the checkpoint's step and digest; TopK is the EvalJob's top k as the
// shards will keep it (capped at the classes; 0 for an MSE model).
type EvalPlan struct {
	Samples          int               `json:"samples"`
	Classes          int               `json:"classes"`
	Positions        int               `json:"positions,omitempty"`
	Data             string            `json:"data"`
	Files            []data.SourceFile `json:"files,omitempty"`
	Step             int               `json:"step"`
	CheckpointSHA256 string            `json:"checkpoint_sha256"`
	TopK             int               `json:"top_k,omitempty"`
}

// PlanEval asks the worker behind t to check ej (a TypeEvalPlan request);
// its shard fields are not used. A refusal is a *worker.Error: of kind
// usage for the data, checkpoint for the checkpoint.
func PlanEval(ctx context.Context, t worker.Transport, ej EvalJob) (EvalPlan, error) {
	body, err := json.Marshal(ej)
	if err != nil {
		return EvalPlan{}, fmt.Errorf("worker: encoding the evaluation to plan: %w", err)
	}
	_, res, err := t.Call(ctx, worker.Request{Type: TypeEvalPlan, Body: body}, worker.Sink{})
	if err != nil {
		return EvalPlan{}, err
	}
	var ep EvalPlan
	if err := json.Unmarshal(res, &ep); err != nil {
		return EvalPlan{}, fmt.Errorf("worker: reading the evaluation's plan: %w", err)
	}
	return ep, nil
}

// serveEvalPlan answers TypeEvalPlan: hello, then the EvalPlan or the
// refusal, the data load counted as progress.
func serveEvalPlan(conn *worker.Conn, cfg Config) error {
	var ej EvalJob
	if err := json.Unmarshal(conn.Request().Body, &ej); err != nil {
		return conn.Fail(usage(fmt.Sprintf("the evaluation to plan cannot be read: %v", err)))
	}
	hello := worker.Hello{Device: "none", Description: "planning an evaluation", Build: cfg.Build, PID: os.Getpid(), Advances: true}
	if err := conn.Hello(hello); err != nil {
		return err
	}
	ep, err := planEval(ej, conn.Advance)
	if err != nil {
		return conn.Fail(classify(err))
	}
	return conn.Result(ep)
}

// planEval is the check TypeEvalPlan answers.
func planEval(ej EvalJob, advance func(stage string)) (EvalPlan, error) {
	if err := ej.Spec.Validate(); err != nil {
		return EvalPlan{}, usage(err.Error())
	}
	ds, tc, files, err := evalData(ej.Spec, ej.Split, advance)
	if err != nil {
		return EvalPlan{}, err
	}
	ck, err := trainer.CheckpointForEval(tc, ej.Checkpoint)
	if err != nil {
		return EvalPlan{}, err
	}
	sha, err := FileSHA256(ej.Checkpoint)
	if err != nil {
		return EvalPlan{}, fmt.Errorf("%w: %s: %w", trainer.ErrCheckpoint, ej.Checkpoint, err)
	}
	shape := ds.Shape()
	return EvalPlan{Samples: ds.Len(), Classes: shape.Classes, Positions: shape.Positions, Data: SplitFingerprint(ds), Files: files,
		Step: ck.Step, CheckpointSHA256: sha, TopK: min(tc.EvalTopK(ej.TopK), shape.Classes)}, nil
}

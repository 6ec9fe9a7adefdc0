package jobserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// TypeSample is the request to draw text from a checkpoint of a token
// model; its body is a SampleJob and its result a SampleResult. It is
// how a CUDA device samples: the tolaria process never opens one.
const TypeSample = "sample"

// SampleJob asks a worker for Tokens bytes drawn after Prompt from a
// run's checkpoint (see trainer.Sample).
type SampleJob struct {
	Spec       job.Spec `json:"spec"` // the run's configuration: the model
	Checkpoint string   `json:"checkpoint"`
	// CheckpointSHA256 is the checkpoint file's digest as the coordinator
	// verified it: a worker that reads another file refuses it.
	CheckpointSHA256 string  `json:"checkpoint_sha256"`
	Prompt           []byte  `json:"prompt"`
	Tokens           int     `json:"tokens"`
	Temperature      float64 `json:"temperature"` // 0: the most likely byte each time
	Seed             uint64  `json:"seed"`
	Graphs           bool    `json:"graphs"` // capture the decode step once and replay it
}

// Validate checks the job's own fields (not the run they name).
func (sj SampleJob) Validate() error {
	switch {
	case sj.Checkpoint == "":
		return errors.New("no checkpoint named")
	case sj.Tokens < 1:
		return fmt.Errorf("tokens %d; want at least 1", sj.Tokens)
	case !(sj.Temperature >= 0) || sj.Temperature > math.MaxFloat32:
		return fmt.Errorf("temperature %v; want a finite value >= 0", sj.Temperature)
	}
	return nil
}

// SampleResult is what a worker answers for a SampleJob.
type SampleResult struct {
	Text []byte `json:"text"` // the bytes drawn, without the prompt
	Step int    `json:"step"` // the checkpoint's step
}

// Sample draws the text of sj on the named device through t.
func Sample(ctx context.Context, t worker.Transport, deviceName string, sj SampleJob) (worker.Hello, SampleResult, error) {
	body, err := json.Marshal(sj)
	if err != nil {
		return worker.Hello{}, SampleResult{}, fmt.Errorf("worker: encoding the sampling job: %w", err)
	}
	h, res, err := t.Call(ctx, worker.Request{Type: TypeSample, Device: deviceName, Body: body}, worker.Sink{})
	if err != nil {
		return h, SampleResult{}, err
	}
	var sr SampleResult
	if err := json.Unmarshal(res, &sr); err != nil {
		return h, SampleResult{}, fmt.Errorf("worker: reading the sampled text: %w", err)
	}
	return h, sr, nil
}

// SampleText draws sj's tokens on dev from the checkpoint ck of tc's
// model (tc.Net: sj.Spec's TokenNet) and returns them as bytes: the one decoding path of the
// tolaria process (the CPU device) and of a worker (any device). advance,
// when set, is told of each token.
func SampleText(ctx context.Context, dev device.Device, tc trainer.Config, ck trainer.Checkpoint, sj SampleJob, advance func(stage string)) ([]byte, error) {
	ids, err := trainer.Sample(ctx, dev, tc.Net, ck, trainer.SampleConfig{Prompt: sj.Prompt, Tokens: sj.Tokens,
		Temperature: float32(sj.Temperature), Seed: sj.Seed, Graphs: sj.Graphs, Advance: advance})
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(ids))
	for i, id := range ids {
		out[i] = byte(id)
	}
	return out, nil
}

// serveSample verifies the checkpoint a SampleJob names (its digest is the
// one the coordinator saw) and draws the text on dev; advance receives its
// progress (worker.Conn.Advance).
func serveSample(ctx context.Context, sj SampleJob, dev device.Device, advance func(stage string)) (SampleResult, error) {
	if err := sj.Validate(); err != nil {
		return SampleResult{}, usage("sampling job: " + err.Error())
	}
	if err := sj.Spec.Validate(); err != nil {
		return SampleResult{}, usage(err.Error())
	}
	// The model as the run trained it; sampling reads no data, so a run
	// samples where its corpus is not (or no longer) there.
	net, err := sj.Spec.TokenNet()
	if err != nil {
		return SampleResult{}, usage(err.Error())
	}
	if _, err := trainer.CheckSampleable(net); err != nil {
		return SampleResult{}, usage(fmt.Sprintf("the run's model %s: %v", net.String(), err))
	}
	ck, err := trainer.CheckpointForNet(net, sj.Checkpoint)
	if err != nil {
		return SampleResult{}, err
	}
	sha, err := FileSHA256(sj.Checkpoint)
	if err != nil {
		return SampleResult{}, err
	}
	if sha != sj.CheckpointSHA256 {
		return SampleResult{}, fmt.Errorf("%w: %s changed since sampling began (SHA-256 %s, want %s)", trainer.ErrCheckpoint, sj.Checkpoint, sha, sj.CheckpointSHA256)
	}
	text, err := SampleText(ctx, dev, trainer.Config{Net: net}, ck, sj, advance)
	if err != nil {
		return SampleResult{}, err
	}
	return SampleResult{Text: text, Step: ck.Step}, nil
}

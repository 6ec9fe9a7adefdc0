package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/train"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// SampleRequest asks for text from a run's checkpoint of a token model
// (see nn.Decoder): Tokens bytes drawn one at a time after Prompt.
type SampleRequest struct {
	RunDir string
	Prompt []byte // any bytes; the model sees the last context of them
	Tokens int
	// Temperature divides the logits before the softmax; 0 draws the most
	// likely byte each time.
	Temperature float64
	Seed        uint64
	// Device is where the decode step runs: "cpu" (the default), in this
	// process, or "cuda", the first GPU a tolaria-worker process sees (a
	// CUDA build; CUDA_VISIBLE_DEVICES in Env chooses it). The same seed
	// gives the same text on both.
	Device string
	// Graphs captures the decode step once and replays it per token;
	// without it the step is enqueued afresh each time. The text is the
	// same either way.
	Graphs bool

	// The worker process of --device cuda.
	Worker           string        // the tolaria-worker binary ("": worker.Find)
	WorkerStart      time.Duration // 0: worker.DefaultHelloTimeout
	HeartbeatTimeout time.Duration // 0: worker.DefaultHeartbeatTimeout
	Env              []string      // added to the worker's environment
	// WorkerLog receives the worker's log; nil discards it (a failure
	// still carries its last lines).
	WorkerLog io.Writer
}

// MaxSampleTokens bounds SampleRequest.Tokens: the text is held in memory
// until it is printed.
const MaxSampleTokens = 1 << 24

// Validate checks the request's own fields.
func (r SampleRequest) Validate() error {
	switch {
	case r.RunDir == "":
		return configErr(field.Errorf("run_dir", "is required"))
	case r.Tokens < 1 || r.Tokens > MaxSampleTokens:
		return configErr(field.Errorf("tokens", "%d; give 1..%d", r.Tokens, MaxSampleTokens))
	case !(r.Temperature >= 0) || r.Temperature > 1e30:
		return configErr(field.Errorf("temperature", "%v; give a value in 0..1e30 (0 for the most likely byte each time)", r.Temperature))
	case r.Device != "" && r.Device != "cpu" && r.Device != "cuda":
		return configErr(field.Errorf("device", "must be cpu or cuda, got %q", r.Device))
	case r.WorkerStart < 0:
		return configErr(field.Errorf("worker_start_timeout", "cannot be negative (%s)", r.WorkerStart))
	case r.HeartbeatTimeout != 0 && worker.CheckHeartbeatTimeout(r.HeartbeatTimeout) != nil: // 0: the default
		return configErr(field.Errorf("heartbeat_timeout", "%w", worker.CheckHeartbeatTimeout(r.HeartbeatTimeout)))
	}
	return nil
}

// Sample loads the run's configuration and checkpoint (intact, and written
// for the run's model; the run's data are not read), draws the tokens on the device and returns
// them as bytes. On the CPU device it samples in this process; on cuda it
// finds a tolaria-worker and samples there, the worker verifying the
// checkpoint's digest. Cancelling ctx stops it after the token in flight.
func Sample(ctx context.Context, req SampleRequest) (_ []byte, err error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if st, err := os.Stat(req.RunDir); err != nil || !st.IsDir() {
		return nil, configErr(field.Errorf("run_dir", "%s is not a run directory; point it at a run made by tolaria train", req.RunDir))
	}
	spec, err := rundir.Spec(req.RunDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(req.RunDir, trainer.CheckpointFile)
	if _, err := os.Stat(path); err != nil {
		return nil, configErr(field.Errorf("run_dir", "%s %w (%s); a run has one once it has trained an epoch (or been stopped)", req.RunDir, rundir.ErrNoCheckpoint, trainer.CheckpointFile))
	}
	// The model as the run trained it; sampling reads no data, so a run
	// samples where its corpus is not (or no longer) there.
	net, err := spec.TokenNet()
	switch {
	case spec.Dataset != "text":
		// Said of the run the user named, not of a key in its file.
		return nil, configErr(field.Errorf("run_dir", "%s trained on dataset %s, not text, so its model is %w; only a model trained on dataset text can be sampled (e.g. a run of examples/char-transformer.yaml)",
			req.RunDir, spec.Dataset, trainer.ErrNotTokenModel))
	case err != nil:
		return nil, configErr(field.Errorf("run_dir", "the run's configuration: %w", err))
	}
	if _, err := trainer.CheckSampleable(net); err != nil {
		return nil, configErr(field.Errorf("run_dir", "the run's model %s: %w", net.String(), err))
	}
	ck, err := trainer.CheckpointForNet(net, path)
	if err != nil {
		return nil, configErr(field.Errorf("run_dir", "%w", err))
	}
	sj := jobserver.SampleJob{Spec: spec, Checkpoint: path, Prompt: req.Prompt, Tokens: req.Tokens,
		Temperature: req.Temperature, Seed: req.Seed, Graphs: req.Graphs}
	if req.Device == "cuda" {
		if sj.CheckpointSHA256, err = jobserver.FileSHA256(path); err != nil {
			return nil, configErr(field.Errorf("run_dir", "%w", err))
		}
		return sampleInWorker(ctx, req, sj)
	}
	dev, err := jobserver.OpenCPU("cpu", spec)
	if err != nil {
		return nil, setupErr(err)
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	return jobserver.SampleText(ctx, dev, trainer.Config{Net: net}, ck, sj, nil)
}

// sampleInWorker runs sj in a tolaria-worker on req's device. A worker
// that cannot give the device is an ErrSetup saying why and what to do.
func sampleInWorker(ctx context.Context, req SampleRequest, sj jobserver.SampleJob) ([]byte, error) {
	path, err := worker.Find(req.Worker)
	if err != nil {
		return nil, setupErr(fmt.Errorf("%w; or sample on the CPU with --device cpu", err))
	}
	proc := &worker.Process{Path: path, Stderr: req.WorkerLog, HelloTimeout: req.WorkerStart,
		HeartbeatTimeout: req.HeartbeatTimeout, Env: req.Env}
	hello, res, err := jobserver.Sample(ctx, proc, req.Device, sj)
	var we *worker.Error
	var na *worker.NoAnswerError
	switch {
	case err == nil:
		return res.Text, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("interrupted while the worker %s was sampling: %w", path, ctx.Err())
	case errors.As(err, &we) && we.Kind == worker.KindNoDevice,
		errors.As(err, &na),
		hello.Device == "" && errors.Is(err, worker.ErrWorkerExited):
		return nil, setupErr(train.Unavailable(path, err))
	case errors.As(err, &we) && we.Kind == worker.KindUsage:
		return nil, configErr(fmt.Errorf("the worker %s refused the sampling job: %w", path, err))
	}
	return nil, fmt.Errorf("sampling on %s in the worker %s: %w", orDevice(hello.Device, req.Device), path, err)
}

// orDevice is the device a worker said it opened, or the one asked for
// when it said nothing.
func orDevice(opened, asked string) string {
	if opened != "" {
		return opened
	}
	return asked
}

// SampleTo draws the text req asks for and writes the prompt and the text
// after it, with a newline, to w: the whole of tolaria sample. Device
// "auto" takes cuda when a CUDA tolaria-worker can open a GPU and cpu
// otherwise, saying why in log. The text is written whole at the end, so
// a stopped sampling writes nothing and says so.
func SampleTo(ctx context.Context, w io.Writer, req SampleRequest, log *slog.Logger) error {
	var err error
	gpus := GPUsRequest{Worker: req.Worker, WorkerStart: req.WorkerStart, HeartbeatTimeout: req.HeartbeatTimeout}
	if req.Device, err = ChooseDevice(ctx, req.Device, gpus, log); err != nil {
		return err
	}
	text, err := Sample(ctx, req)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("sampling stopped before its %d tokens were drawn; nothing was printed (%w)", req.Tokens, err)
	case err != nil:
		return err
	}
	if _, err := w.Write(append(req.Prompt, text...)); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w)
	return err
}

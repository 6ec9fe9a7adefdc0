package coordinator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
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
	Device      string // "cpu" (the default): sampling runs in this process
	// Graphs captures the decode step once and replays it per token;
	// without it the step is enqueued afresh each time. The text is the
	// same either way.
	Graphs bool
}

// Validate checks the request's own fields.
func (r SampleRequest) Validate() error {
	switch {
	case r.RunDir == "":
		return configErr(field.Errorf("run_dir", "is required"))
	case r.Tokens < 1:
		return configErr(field.Errorf("tokens", "%d; give at least 1", r.Tokens))
	case !(r.Temperature >= 0) || r.Temperature > 1e30:
		return configErr(field.Errorf("temperature", "%v; give a positive value, or 0 for the most likely byte each time", r.Temperature))
	case r.Device != "" && r.Device != "cpu":
		return configErr(field.Errorf("device", "%q: sampling runs in the tolaria process, which drives the cpu device only", r.Device))
	}
	return nil
}

// Sample loads the run's configuration and checkpoint (verified as a
// resumed run verifies it), draws the tokens on the device and returns
// them as bytes.
func Sample(req SampleRequest) (_ []byte, err error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if st, err := os.Stat(req.RunDir); err != nil || !st.IsDir() {
		return nil, configErr(field.Errorf("run_dir", "%s is not a run directory; point it at a run made by tolaria train", req.RunDir))
	}
	spec, err := RunSpec(req.RunDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(req.RunDir, trainer.CheckpointFile)
	if _, err := os.Stat(path); err != nil {
		return nil, configErr(field.Errorf("run_dir", "%s %w (%s); a run has one once it has trained an epoch (or been stopped)", req.RunDir, ErrNoCheckpoint, trainer.CheckpointFile))
	}
	train, test, err := spec.LoadData()
	if err != nil {
		return nil, configErr(fmt.Errorf("the run's data: %w", err))
	}
	cfg, err := spec.Config(train, test, job.Options{})
	if err != nil {
		return nil, configErr(err)
	}
	ck, err := trainer.CheckpointFor(cfg, path)
	if err != nil {
		return nil, configErr(field.Errorf("run_dir", "%w", err))
	}
	dev, err := jobserver.OpenCPU("cpu", spec)
	if err != nil {
		return nil, setupErr(err)
	}
	defer func() { err = errors.Join(err, dev.Close()) }()
	ids, err := trainer.Sample(dev, cfg.Net, ck, trainer.SampleConfig{
		Prompt: req.Prompt, Tokens: req.Tokens, Temperature: float32(req.Temperature), Seed: req.Seed, Graphs: req.Graphs})
	if errors.Is(err, trainer.ErrNotTokenModel) {
		return nil, configErr(field.Errorf("run_dir", "the run's model %s: %w", cfg.ModelName(), err))
	}
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(ids))
	for i, id := range ids {
		out[i] = byte(id)
	}
	return out, nil
}

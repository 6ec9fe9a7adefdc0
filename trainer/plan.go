package trainer

import (
	"errors"
	"log/slog"
)

// Plan is a run resolved once: its configuration, validated, the number of
// steps in an epoch, and for a resumed run the checkpoint it continues
// from, read, verified and matched to the configuration. Plan.Run takes it
// as it is, so a command can plan a run, refuse it before writing
// anything, and then run exactly what it checked.
type Plan struct {
	cfg   Config
	steps int
	ck    *Checkpoint // nil for a fresh run
}

// NewPlan validates cfg (see Config.Validate) and, when it resumes, loads
// the checkpoint in its run directory and checks that cfg can continue
// from it: same model, optimizer, data and shape, and not complete.
func NewPlan(cfg Config) (*Plan, error) {
	steps, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if cfg.Optimizer.TotalSteps == 0 {
		return nil, errors.New("trainer: optimizer TotalSteps must be set (use StepsPerEpoch)")
	}
	p := &Plan{cfg: cfg, steps: steps}
	if cfg.Resume {
		ck, err := resumable(cfg, steps)
		if err != nil {
			return nil, err
		}
		p.ck = &ck
	}
	return p, nil
}

// Config is the planned configuration.
func (p *Plan) Config() Config { return p.cfg }

// Signature is the step signature the run leases its graph workspace
// under (graphs.Pool.Acquire): model, batch size, optimizer and clipping.
// Two runs of one signature capture graphs of the same topology, so in
// one process the later one's captures are pooled updates.
func (p *Plan) Signature() string { return p.cfg.stepSignature() }

// StepsPerEpoch is the number of training steps in an epoch.
func (p *Plan) StepsPerEpoch() int { return p.steps }

// ResumeStep is the step the run starts from: the checkpoint's for a
// resumed run, 0 for a fresh one.
func (p *Plan) ResumeStep() int {
	if p.ck == nil {
		return 0
	}
	return p.ck.Step
}

// WithOutputs returns the plan with where the run reports set: none of
// them is configuration, so the plan stays valid. advance is
// Config.Advance.
func (p *Plan) WithOutputs(log *slog.Logger, obs Observer, progress func(Progress), advance func(stage string)) *Plan {
	q := *p
	q.cfg.Logger, q.cfg.Observer, q.cfg.Progress, q.cfg.Advance = log, obs, progress, advance
	return &q
}

// ErrResumeMoved refuses to move a resumed run: its checkpoint was
// verified in its own directory.
var ErrResumeMoved = errors.New("trainer: a resumed run cannot change its run directory")

// InRunDir returns the fresh run's plan with checkpoints going to dir
// instead (the directory a command claimed under another name).
func (p *Plan) InRunDir(dir string) (*Plan, error) {
	if p.cfg.Resume {
		return nil, ErrResumeMoved
	}
	q := *p
	q.cfg.RunDir = dir
	return &q, nil
}

package nn

import (
	"math"

	"github.com/tolaria-ml/tolaria/internal/field"
)

// OptimizerKind selects the update rule.
type OptimizerKind string

const (
	SGD   OptimizerKind = "sgd"   // SGD with momentum
	AdamW OptimizerKind = "adamw" // Adam with decoupled weight decay
)

// Optimizer configures the update and the schedule.
type Optimizer struct {
	Kind        OptimizerKind
	LR          float64 // peak learning rate
	Momentum    float64 // SGD
	Nesterov    bool    // SGD
	Beta1       float64 // AdamW
	Beta2       float64 // AdamW
	Eps         float64 // AdamW
	WeightDecay float64
	ClipNorm    float64 // global-norm clipping threshold; 0 disables it
	WarmupSteps int     // linear warm-up steps
	TotalSteps  int     // steps of the whole run; cosine decay ends here
	MinLRRatio  float64 // final learning rate as a fraction of LR
}

// DefaultOptimizer returns AdamW settings that train the default MLP well.
func DefaultOptimizer() Optimizer {
	return Optimizer{Kind: AdamW, LR: 1e-3, Momentum: 0.9, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
		WeightDecay: 1e-4, ClipNorm: 5, MinLRRatio: 0.01}
}

// Validate reports a configuration error in a field.Error naming the
// setting by its configuration key.
func (o Optimizer) Validate() error {
	switch {
	case o.Kind != SGD && o.Kind != AdamW:
		return field.Errorf("optimizer.kind", "unknown kind %q: use sgd or adamw", o.Kind)
	case !(o.LR > 0 && o.LR <= 10):
		return field.Errorf("optimizer.lr", "must be in (0, 10], got %g", o.LR)
	case !(o.Momentum >= 0 && o.Momentum < 1): // written so that NaN fails too
		return field.Errorf("optimizer.momentum", "must be in [0, 1), got %g", o.Momentum)
	case o.Kind == AdamW && !(o.Beta1 >= 0 && o.Beta1 < 1):
		return field.Errorf("optimizer.beta1", "must be in [0, 1), got %g", o.Beta1)
	case o.Kind == AdamW && !(o.Beta2 >= 0 && o.Beta2 < 1):
		return field.Errorf("optimizer.beta2", "must be in [0, 1), got %g", o.Beta2)
	case o.Kind == AdamW && !(o.Eps > 0 && o.Eps < 1):
		return field.Errorf("optimizer.eps", "must be positive, got %g", o.Eps)
	case !(o.WeightDecay >= 0 && o.WeightDecay < 1):
		return field.Errorf("optimizer.weight_decay", "must be in [0, 1), got %g", o.WeightDecay)
	case !(o.ClipNorm >= 0 && o.ClipNorm < 1e6):
		return field.Errorf("optimizer.clip_norm", "must be in [0, 1e6) (0 disables clipping), got %g", o.ClipNorm)
	case o.WarmupSteps < 0:
		return field.Errorf("optimizer.warmup_steps", "must be >= 0, got %d", o.WarmupSteps)
	case o.TotalSteps < 0:
		return field.Errorf("optimizer.total_steps", "must be >= 0, got %d", o.TotalSteps)
	case !(o.MinLRRatio >= 0 && o.MinLRRatio <= 1):
		return field.Errorf("optimizer.min_lr_ratio", "must be in [0, 1], got %g", o.MinLRRatio)
	}
	return nil
}

// StateBuffers is the number of per-parameter state buffers.
func (o Optimizer) StateBuffers() int {
	if o.Kind == AdamW {
		return 2
	}
	return 1
}

// LRAt is the scheduled learning rate for step t (1-based): linear warm-up
// over WarmupSteps, then cosine decay to MinLRRatio*LR at TotalSteps.
func (o Optimizer) LRAt(t int) float64 {
	if o.WarmupSteps > 0 && t <= o.WarmupSteps {
		return o.LR * float64(t) / float64(o.WarmupSteps)
	}
	if o.TotalSteps <= o.WarmupSteps {
		return o.LR
	}
	p := float64(t-o.WarmupSteps) / float64(o.TotalSteps-o.WarmupSteps)
	p = min(max(p, 0), 1)
	lo := o.LR * o.MinLRRatio
	return lo + (o.LR-lo)*0.5*(1+math.Cos(math.Pi*p))
}

// Hyper writes the hyper-parameter values for step t (1-based) into dst
// (device.HyperLen values), which the staging stream copies to the device
// with the batch.
func (o Optimizer) Hyper(t int, dst []float32) {
	dst[0] = float32(o.LRAt(t))
	dst[1] = float32(1 - math.Pow(o.Beta1, float64(t)))
	dst[2] = float32(1 - math.Pow(o.Beta2, float64(t)))
}

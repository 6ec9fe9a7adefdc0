package dqn

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
)

// fileConfig is the configuration file's shape: every key optional, an
// absent one keeping DefaultConfig's value.
type fileConfig struct {
	Env       *string `yaml:"env"`
	NumAgents *int    `yaml:"num_agents"`
	NumEnvs   *int    `yaml:"num_envs"`
	Seed      *uint64 `yaml:"seed"`
	Model     *struct {
		Hidden     []int   `yaml:"hidden"`
		Activation *string `yaml:"activation"`
	} `yaml:"model"`
	Optimizer *struct {
		Kind        *string  `yaml:"kind"`
		LR          *float64 `yaml:"lr"`
		Momentum    *float64 `yaml:"momentum"`
		Nesterov    *bool    `yaml:"nesterov"`
		Beta1       *float64 `yaml:"beta1"`
		Beta2       *float64 `yaml:"beta2"`
		Eps         *float64 `yaml:"eps"`
		WeightDecay *float64 `yaml:"weight_decay"`
		ClipNorm    *float64 `yaml:"clip_norm"`
		WarmupSteps *int     `yaml:"warmup_steps"`
		TotalSteps  *int     `yaml:"total_steps"`
		MinLRRatio  *float64 `yaml:"min_lr_ratio"`
	} `yaml:"optimizer"`
	Gamma             *float64 `yaml:"gamma"`
	HuberDelta        *float64 `yaml:"huber_delta"`
	BatchSize         *int     `yaml:"batch_size"`
	BufferCapacity    *int     `yaml:"buffer_capacity"`
	LearningStarts    *int     `yaml:"learning_starts"`
	TrainEvery        *int     `yaml:"train_every"`
	TargetUpdate      *int     `yaml:"target_update"`
	TargetTau         *float64 `yaml:"target_tau"`
	PublishInterval   *int     `yaml:"publish_interval"`
	SyncInterval      *int     `yaml:"sync_interval"`
	EpsilonStart      *float64 `yaml:"epsilon_start"`
	EpsilonEnd        *float64 `yaml:"epsilon_end"`
	EpsilonDecaySteps *int     `yaml:"epsilon_decay_steps"`
	TotalSteps        *int     `yaml:"total_steps"`
	EvalInterval      *int     `yaml:"eval_interval"`
	EvalEpisodes      *int     `yaml:"eval_episodes"`
	StopWhenSolved    *bool    `yaml:"stop_when_solved"`
}

// unknownKey matches yaml's report of a key no field takes.
var unknownKey = regexp.MustCompile(`field (\S+) not found in type .*`)

// ParseConfig reads a configuration file (YAML, the keys of Config's
// field errors: num_agents, sync_interval, publish_interval,
// target_update, the epsilon schedule, model: {hidden, activation},
// optimizer: {kind, lr, ...}) over DefaultConfig and validates it. An
// unknown key is refused by name.
func ParseConfig(raw []byte) (Config, error) {
	c := DefaultConfig()
	var f fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// Name the key, not the Go type it did not fit.
			lines := make([]string, len(te.Errors))
			for i, e := range te.Errors {
				lines[i] = unknownKey.ReplaceAllString(e, `unknown key "$1" (the keys are listed in docs/rl.md)`)
			}
			return c, fmt.Errorf("the configuration cannot be read: %s", strings.Join(lines, "; "))
		}
		return c, fmt.Errorf("the configuration is not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := wholeNumbers(raw); err != nil {
		return c, err
	}
	set := func(dst, src any) {
		switch d := dst.(type) {
		case *string:
			if s := src.(*string); s != nil {
				*d = *s
			}
		case *int:
			if s := src.(*int); s != nil {
				*d = *s
			}
		case *uint64:
			if s := src.(*uint64); s != nil {
				*d = *s
			}
		case *float64:
			if s := src.(*float64); s != nil {
				*d = *s
			}
		case *bool:
			if s := src.(*bool); s != nil {
				*d = *s
			}
		}
	}
	set(&c.Env, f.Env)
	set(&c.NumAgents, f.NumAgents)
	set(&c.NumEnvs, f.NumEnvs)
	set(&c.Seed, f.Seed)
	if m := f.Model; m != nil {
		if m.Hidden != nil {
			c.Hidden = m.Hidden
		}
		if m.Activation != nil {
			act, err := nn.ParseActivation(*m.Activation)
			if err != nil {
				return c, field.Errorf("model.activation", "%w", err)
			}
			c.Activation = act
		}
	}
	if o := f.Optimizer; o != nil {
		if o.Kind != nil {
			c.Optimizer.Kind = nn.OptimizerKind(*o.Kind)
		}
		set(&c.Optimizer.LR, o.LR)
		set(&c.Optimizer.Momentum, o.Momentum)
		set(&c.Optimizer.Nesterov, o.Nesterov)
		set(&c.Optimizer.Beta1, o.Beta1)
		set(&c.Optimizer.Beta2, o.Beta2)
		set(&c.Optimizer.Eps, o.Eps)
		set(&c.Optimizer.WeightDecay, o.WeightDecay)
		set(&c.Optimizer.ClipNorm, o.ClipNorm)
		set(&c.Optimizer.WarmupSteps, o.WarmupSteps)
		set(&c.Optimizer.TotalSteps, o.TotalSteps)
		set(&c.Optimizer.MinLRRatio, o.MinLRRatio)
	}
	set(&c.Gamma, f.Gamma)
	set(&c.HuberDelta, f.HuberDelta)
	set(&c.BatchSize, f.BatchSize)
	set(&c.BufferCapacity, f.BufferCapacity)
	set(&c.LearningStarts, f.LearningStarts)
	set(&c.TrainEvery, f.TrainEvery)
	set(&c.TargetUpdate, f.TargetUpdate)
	set(&c.TargetTau, f.TargetTau)
	set(&c.PublishInterval, f.PublishInterval)
	set(&c.SyncInterval, f.SyncInterval)
	set(&c.EpsilonStart, f.EpsilonStart)
	set(&c.EpsilonEnd, f.EpsilonEnd)
	set(&c.EpsilonDecaySteps, f.EpsilonDecaySteps)
	set(&c.TotalSteps, f.TotalSteps)
	set(&c.EvalInterval, f.EvalInterval)
	set(&c.EvalEpisodes, f.EvalEpisodes)
	set(&c.StopWhenSolved, f.StopWhenSolved)
	return c, c.Validate()
}

// YAML is the configuration as a file ParseConfig reads back to c.
func (c Config) YAML() []byte {
	var b strings.Builder
	o := c.Optimizer
	hidden := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(c.Hidden)), ", "), "[]")
	fmt.Fprintf(&b, "env: %s\nnum_agents: %d\nnum_envs: %d\nseed: %d\n", c.Env, c.NumAgents, c.NumEnvs, c.Seed)
	fmt.Fprintf(&b, "model: {hidden: [%s], activation: %s}\n", hidden, c.Activation)
	fmt.Fprintf(&b, "optimizer: {kind: %s, lr: %g, momentum: %g, nesterov: %t, beta1: %g, beta2: %g, eps: %g, weight_decay: %g, clip_norm: %g, warmup_steps: %d, total_steps: %d, min_lr_ratio: %g}\n",
		o.Kind, o.LR, o.Momentum, o.Nesterov, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, o.ClipNorm, o.WarmupSteps, o.TotalSteps, o.MinLRRatio)
	fmt.Fprintf(&b, "gamma: %g\nhuber_delta: %g\nbatch_size: %d\nbuffer_capacity: %d\nlearning_starts: %d\ntrain_every: %d\n",
		c.Gamma, c.HuberDelta, c.BatchSize, c.BufferCapacity, c.LearningStarts, c.TrainEvery)
	fmt.Fprintf(&b, "target_update: %d\ntarget_tau: %g\npublish_interval: %d\nsync_interval: %d\n", c.TargetUpdate, c.TargetTau, c.PublishInterval, c.SyncInterval)
	fmt.Fprintf(&b, "epsilon_start: %g\nepsilon_end: %g\nepsilon_decay_steps: %d\ntotal_steps: %d\n", c.EpsilonStart, c.EpsilonEnd, c.EpsilonDecaySteps, c.TotalSteps)
	fmt.Fprintf(&b, "eval_interval: %d\neval_episodes: %d\nstop_when_solved: %t\n", c.EvalInterval, c.EvalEpisodes, c.StopWhenSolved)
	return []byte(b.String())
}

// wholeNumbers refuses a fraction given for a key that takes a whole
// number: the YAML decoder would truncate it (seed 1.5 read as 1), so the
// run would silently differ from the file.
func wholeNumbers(raw []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) == 0 {
		return nil // the decoder reports what is wrong with the file
	}
	return wholeIn(doc.Content[0], reflect.TypeFor[fileConfig](), "")
}

// wholeIn checks the mapping n against the struct type t, whose yaml tags
// name its keys; prefix is n's own key, for nested mappings.
func wholeIn(n *yaml.Node, t reflect.Type, prefix string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i].Value, n.Content[i+1]
		f, ok := fieldByTag(t, key)
		if !ok {
			continue // an unknown key is the decoder's to report
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		name := prefix + key
		switch {
		case ft.Kind() == reflect.Struct:
			if err := wholeIn(val, ft, name+"."); err != nil {
				return err
			}
		case isWhole(ft.Kind()):
			if err := wholeScalar(val, name); err != nil {
				return err
			}
		case ft.Kind() == reflect.Slice && isWhole(ft.Elem().Kind()) && val.Kind == yaml.SequenceNode:
			for _, e := range val.Content {
				if err := wholeScalar(e, name); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); strings.Split(f.Tag.Get("yaml"), ",")[0] == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func isWhole(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int64, reflect.Uint64:
		return true
	}
	return false
}

// wholeScalar refuses a number with a fractional part.
func wholeScalar(n *yaml.Node, name string) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!float" {
		return nil
	}
	if v, err := strconv.ParseFloat(n.Value, 64); err == nil && v == math.Trunc(v) && !math.IsInf(v, 0) {
		return nil
	}
	return field.Errorf(field.Name(name), "must be a whole number, got %s", n.Value)
}

// Digest is a SHA-256 of the configuration (of its YAML), in hex: what a
// saved replay buffer and a resumed run are checked against.
func (c Config) Digest() string {
	sum := sha256.Sum256(c.YAML())
	return hex.EncodeToString(sum[:])
}

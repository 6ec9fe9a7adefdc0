package dqn

import (
	"slices"
	"testing"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/rl/env"
)

// evalConfig is a small network, so that the tests are quick under the
// race detector too.
func evalConfig() Config {
	cfg := DefaultConfig()
	cfg.Hidden = []int{16, 16}
	return cfg
}

// hostReturns plays one episode per seed on the host with policy, as the
// evaluator should.
func hostReturns(t *testing.T, seeds []uint64, policy func(obs []float32) int) []float64 {
	t.Helper()
	var returns []float64
	obs := make([]float32, 4)
	for _, seed := range seeds {
		e := env.NewCartPole()
		e.Reset(seed, obs)
		var ret float64
		for {
			r, term, trunc, err := e.Step(policy(obs), obs)
			must(t, err)
			ret += float64(r)
			if term || trunc {
				break
			}
		}
		returns = append(returns, ret)
	}
	return returns
}

// evaluate runs a fresh evaluator of cfg over params (graphs on or off)
// twice, checks that both runs agree, and returns the first's results.
func evaluate(t *testing.T, dev device.Device, cfg Config, params []float32, useGraphs bool) (float64, []float64) {
	t.Helper()
	buf, err := dev.Alloc(len(params))
	must(t, err)
	defer func() { must(t, dev.Free(buf)) }()
	must(t, dev.Upload(buf, params))
	shared := NewShared()
	defer shared.Pool.Close()
	ev, err := NewEvaluator(dev, shared, cfg, 0, buf, useGraphs, nil)
	must(t, err)
	defer func() { must(t, ev.Close()) }()
	must(t, ev.Capture())
	if ev.pol.engine.Captured() != useGraphs {
		t.Fatalf("graphs %t, but the forward pass is captured: %t", useGraphs, ev.pol.engine.Captured())
	}
	mean, returns, err := ev.Evaluate()
	must(t, err)
	if len(returns) != cfg.EvalEpisodes || ev.Episodes() != cfg.EvalEpisodes {
		t.Fatalf("%d returns, Episodes() %d, want eval_episodes %d", len(returns), ev.Episodes(), cfg.EvalEpisodes)
	}
	var sum float64
	for _, r := range returns {
		sum += r
	}
	if sum/float64(len(returns)) != mean {
		t.Errorf("mean %v, the returns' mean is %v", mean, sum/float64(len(returns)))
	}
	mean2, returns2, err := ev.Evaluate()
	must(t, err)
	if mean2 != mean || !slices.Equal(returns, returns2) {
		t.Errorf("a second evaluation of the same weights gave mean %v, the first %v", mean2, mean)
	}
	return mean, returns
}

// TestEvaluatorZeroWeights: with all weights zero every action value is
// 0, the tie goes to action 0, and pushing left all the time drops the
// pole in about ten steps: exactly the host's episodes of that policy.
func TestEvaluatorZeroWeights(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := evalConfig()
	spec, err := cfg.Spec()
	must(t, err)
	mean, returns := evaluate(t, dev, cfg, make([]float32, spec.ParamCount()), false)
	want := hostReturns(t, evalSeeds(cfg, 0, cfg.EvalEpisodes), func([]float32) int { return 0 })
	if !slices.Equal(returns, want) {
		t.Errorf("returns %v, the host's always-left episodes %v", returns, want)
	}
	if mean < 5 || mean > 15 {
		t.Errorf("mean return %.1f of always pushing left, want about 10", mean)
	}
}

// TestEvaluatorPlaysThePolicy builds a network by hand whose greedy action
// is 1 exactly when the pole's angular velocity is positive, and checks
// the evaluator's episodes, replayed and eager, against the host's
// episodes of that rule on the same seeds.
func TestEvaluatorPlaysThePolicy(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := evalConfig()
	cfg.EvalEpisodes = 37
	spec, err := cfg.Spec()
	must(t, err)
	p := make([]float32, spec.ParamCount())
	ls := spec.Layers()
	// Layer 0: unit 0 = relu(ω), unit 1 = relu(-ω); layer 1 passes them
	// on; layer 2: Q(1) = unit 0, Q(0) = unit 1.
	p[ls[0].WeightAt+3*ls[0].Out+0], p[ls[0].WeightAt+3*ls[0].Out+1] = 1, -1
	p[ls[1].WeightAt+0*ls[1].Out+0], p[ls[1].WeightAt+1*ls[1].Out+1] = 1, 1
	p[ls[2].WeightAt+0*ls[2].Out+1], p[ls[2].WeightAt+1*ls[2].Out+0] = 1, 1
	want := hostReturns(t, evalSeeds(cfg, 0, cfg.EvalEpisodes), func(obs []float32) int {
		if obs[3] > 0 {
			return 1
		}
		return 0
	})
	for _, useGraphs := range []bool{false, true} {
		mean, returns := evaluate(t, dev, cfg, p, useGraphs)
		if !slices.Equal(returns, want) {
			t.Errorf("graphs %t: returns %v, the host's %v", useGraphs, returns, want)
		}
		t.Logf("graphs %t: mean return %.1f", useGraphs, mean)
		if mean < 30 {
			t.Errorf("graphs %t: mean return %.1f; the rule balances the pole for longer than a constant action", useGraphs, mean)
		}
	}
}

// TestEvaluatorDeterministic: the same initial weights give the same
// episodes in two evaluators, and another agent's evaluator (other seeds)
// plays other episodes.
func TestEvaluatorDeterministic(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := evalConfig()
	spec, err := cfg.Spec()
	must(t, err)
	params := nn.InitParams(spec, 7)
	_, a := evaluate(t, dev, cfg, params, true)
	_, b := evaluate(t, dev, cfg, params, false)
	if !slices.Equal(a, b) {
		t.Errorf("two evaluators of the same weights: %v and %v", a, b)
	}
	cfg.Seed++
	if slices.Equal(evalSeeds(cfg, 0, 5), evalSeeds(DefaultConfig(), 0, 5)) {
		t.Error("agents of different seeds evaluate on the same episodes")
	}
}

package dqn

import (
	"fmt"

	"github.com/tolaria-ml/tolaria/rl/env"
)

// ScriptedBaseline is what the learned agents of a Forage run must beat:
// each agent's mean return over the episodes a shared actor's greedy
// evaluation plays (the same worlds, from the same seeds, EvalEpisodes of
// them), with every agent following env.ForageScripted instead of its
// network.
func ScriptedBaseline(cfg Config) ([]float64, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.EvalEpisodes < 1 {
		return nil, fmt.Errorf("dqn: the scripted baseline plays the evaluation's episodes; eval_episodes is %d", cfg.EvalEpisodes)
	}
	_, mk, err := cfg.World()
	if err != nil {
		return nil, err
	}
	n := cfg.NumAgents
	means := make([]float64, n)
	for w, seed := range evalSeeds(cfg, 0, cfg.EvalEpisodes) {
		f, ok := mk().(*env.Forage)
		if !ok {
			return nil, fmt.Errorf("dqn: %s has no scripted baseline", cfg.Env.Name)
		}
		obs := make([][]float32, n)
		policies := make([]*env.ForageScripted, n)
		for i := range obs {
			obs[i] = make([]float32, f.ObsSize())
			policies[i] = env.NewForageScripted(f.Config(), cfg.AgentSeed(i)^uint64(w)<<32)
		}
		f.Reset(seed, obs)
		actions, rewards := make([]int, n), make([]float32, n)
		for {
			for i, p := range policies {
				if actions[i], err = p.Act(obs[i]); err != nil {
					return nil, err
				}
			}
			term, trunc, err := f.Step(actions, obs, rewards)
			if err != nil {
				return nil, err
			}
			for i, r := range rewards {
				means[i] += float64(r)
			}
			if term || trunc {
				break
			}
		}
	}
	for i := range means {
		means[i] /= float64(cfg.EvalEpisodes)
	}
	return means, nil
}

package dqn

import (
	"maps"

	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/rl/env"
)

// The actor modes (Config.Actor).
const (
	// ActorPerAgent gives each agent an actor of its own, which steps
	// num_envs environments of one agent: independent agents.
	ActorPerAgent = "per-agent"
	// ActorShared is one actor for every agent, which steps num_envs
	// worlds that all the agents act in together (SharedActor).
	ActorShared = "shared"
)

// ActorMode is the actor mode the configuration runs: Actor when given,
// otherwise the environment's default, ActorShared for a world of several
// agents (Forage) and ActorPerAgent for the environments of one.
func (c Config) ActorMode() string {
	if c.Actor != "" {
		return c.Actor
	}
	return c.defaultActor()
}

// defaultActor is the environment's actor mode.
func (c Config) defaultActor() string {
	if t, err := env.Lookup(c.Env.Name); err == nil && t.Agents {
		return ActorShared
	}
	return ActorPerAgent
}

// World is the environment as a world of NumAgents agents, for the shared
// actor and for sizing the network: a task of one agent as env.Single
// makes it; a world of several (Forage) with its agents parameter set to
// NumAgents when env: does not give it.
func (c Config) World() (env.Task, func() env.MultiEnv, error) {
	s := c.Env
	if t, err := env.Lookup(s.Name); err == nil && t.Agents {
		if _, given := s.Params["agents"]; !given {
			s.Params = maps.Clone(s.Params)
			if s.Params == nil {
				s.Params = map[string]any{}
			}
			s.Params["agents"] = c.NumAgents
		}
	}
	return s.Build()
}

// checkActor checks the environment and the actor mode together: a world
// of several agents needs the shared actor, with as many agents as it
// holds; an environment of one needs an actor per agent.
func (c Config) checkActor() error {
	t, mk, err := c.World()
	if err != nil {
		return err // it names env.name or env.<parameter>
	}
	switch c.Actor {
	case "", ActorPerAgent, ActorShared:
	default:
		return field.Errorf("actor", "must be %s (an actor per agent, each stepping environments of its own) or %s (one actor stepping one world that every agent acts in), got %q",
			ActorPerAgent, ActorShared, c.Actor)
	}
	mode := c.ActorMode()
	switch {
	case t.Agents && mode != ActorShared:
		return field.Errorf("actor", "%s gives each agent environments of its own, but %s is one world that all the agents act in together: set %s to %s (its default)",
			mode, t.Name, field.Name("actor"), ActorShared)
	case t.Agents && c.Lockstep:
		return field.Errorf("lockstep", "takes turns between each agent's own actor and learner, but %s's agents act through one shared actor, which steps the world for all of them and takes no turns: run %s without lockstep",
			t.Name, t.Name)
	case !t.Agents && mode == ActorShared:
		return field.Errorf("actor", "%s steps one world of several agents, but %s is an environment of one agent: set %s to %s (its default) for independent agents",
			mode, t.Name, field.Name("actor"), ActorPerAgent)
	case t.Agents:
		if n := mk().Agents(); n != c.NumAgents {
			return field.Errorf("num_agents", "%d, but env.agents puts %d agents in the %s world: give the same number, or leave env.agents out (it follows %s)",
				c.NumAgents, n, t.Name, field.Name("num_agents"))
		}
	}
	return nil
}

package dqn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// TestForageConfiguration: Forage runs the shared actor by default with
// as many agents as num_agents; naming the default actor changes nothing,
// not even the digest; a single-agent configuration's digest is what it
// was before the actor key.
func TestForageConfiguration(t *testing.T) {
	c, err := ParseConfig([]byte("env: Forage\nnum_agents: 3\n"))
	must(t, err)
	_, mk, err := c.World()
	must(t, err)
	if c.ActorMode() != ActorShared || mk().Agents() != 3 || c.Goal() != (env.Goal{}) {
		t.Fatalf("env: Forage with 3 agents: actor %s, a world of %d agents, goal %+v", c.ActorMode(), mk().Agents(), c.Goal())
	}
	spec, err := c.Spec()
	must(t, err)
	if spec.Inputs != 75 || spec.Outputs != 5 {
		t.Errorf("Forage's network is %d→%d, want 75→5 (a 5×5 window of 3 channels, 5 moves)", spec.Inputs, spec.Outputs)
	}
	named, err := ParseConfig([]byte("env: Forage\nnum_agents: 3\nactor: shared\n"))
	must(t, err)
	if named.Digest() != c.Digest() {
		t.Errorf("actor: shared, Forage's default, changed the digest:\n%s", named.YAML())
	}
	back, err := ParseConfig(named.YAML())
	must(t, err)
	if back.Digest() != c.Digest() || back.ActorMode() != ActorShared {
		t.Errorf("the YAML reads back as another configuration:\n%s", back.YAML())
	}
	def := DefaultConfig()
	def.Actor = ActorPerAgent
	if def.ActorMode() != ActorPerAgent || def.Digest() != DefaultConfig().Digest() {
		t.Errorf("actor: per-agent on CartPole-v1 is its default, yet changes the configuration")
	}
}

// smallForage is a short shared run of two agents in Forage.
func smallForage() Config {
	c := DefaultConfig()
	c.Env = env.Spec{Name: env.ForageName, Params: map[string]any{"width": 8, "height": 8, "food": 4, "max_steps": 40}}
	c.NumAgents, c.NumEnvs, c.Hidden = 2, 2, []int{32}
	c.TotalSteps, c.LearningStarts, c.BatchSize, c.BufferCapacity = 1200, 400, 32, 2000
	c.EvalInterval, c.EvalEpisodes = 400, 4
	return c
}

// TestSharedActorTrainsEveryAgent: one shared actor steps the worlds for
// both agents; each agent's learner trains on its own buffer, the actor
// reads each agent's own weights, and the agents see every episode of the
// shared worlds, each with its own return.
func TestSharedActorTrainsEveryAgent(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := smallForage()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := runSharedInProcess(ctx, dev, cfg, RunOptions{Graphs: true, MaxLead: 50}, "")
	must(t, err)
	a, b := res[0], res[1]
	for _, r := range res {
		if r.EnvSteps != cfg.TotalSteps || r.LearnerSteps == 0 || r.Fallbacks != 0 || len(r.EvalResults) != 3 {
			t.Errorf("agent %d: %d env steps, %d learner steps, %d fallbacks, %d evaluations", r.Agent, r.EnvSteps, r.LearnerSteps, r.Fallbacks, len(r.EvalResults))
		}
		for _, e := range r.EvalResults {
			if e.Episodes != cfg.EvalEpisodes || e.Version == 0 {
				t.Errorf("agent %d: an evaluation of %d episodes with weights version %d", r.Agent, e.Episodes, e.Version)
			}
		}
	}
	// 1200 steps of 2 worlds of 40-step episodes: 30 episodes, each
	// ending for both agents at once.
	if len(a.Episodes) != 30 || len(b.Episodes) != 30 {
		t.Fatalf("%d and %d episodes, want 30 each", len(a.Episodes), len(b.Episodes))
	}
	same := true
	for i := range a.Episodes {
		if a.Episodes[i].Length != 40 || a.Episodes[i].EnvSteps != b.Episodes[i].EnvSteps {
			t.Fatalf("episode %d: %+v and %+v", i, a.Episodes[i], b.Episodes[i])
		}
		same = same && a.Episodes[i].Return == b.Episodes[i].Return
	}
	if same {
		t.Error("both agents had the same return in every episode: they are not rewarded each for its own food")
	}
}

// sharedMemories makes n anonymous memories of cfg with published weights
// of their own (random, agent by agent).
func sharedMemories(t *testing.T, cfg Config) []*shm.Memory {
	t.Helper()
	spec, err := cfg.Spec()
	must(t, err)
	var mems []*shm.Memory
	for i := range cfg.NumAgents {
		m, err := shm.CreateShared(fmt.Sprintf("tolaria-test-%d-%d", os.Getpid(), i), cfg.Layout(spec))
		must(t, err)
		t.Cleanup(func() { _ = m.Close() })
		w := make([]float32, spec.ParamCount())
		rng := rand.New(rand.NewPCG(uint64(i), 9))
		for j := range w {
			w[j] = float32(rng.NormFloat64() * 0.3)
		}
		_, err = m.Publish(w, 1)
		must(t, err)
		mems = append(mems, m)
	}
	return mems
}

// stepShared makes a shared actor over mems, syncs its weights and takes
// steps vector steps.
func stepShared(t *testing.T, dev device.Device, cfg Config, mems []*shm.Memory, file string, steps int) *SharedActor {
	t.Helper()
	shared := NewShared()
	t.Cleanup(func() { shared.Pool.Close() })
	s, err := NewSharedActor(dev, shared, mems, cfg, SharedActorOptions{Graphs: true, WorldFile: file})
	must(t, err)
	t.Cleanup(func() { _ = s.Close() })
	must(t, s.Capture())
	for _, ag := range s.agents {
		must(t, s.sync(context.Background(), ag, true))
	}
	for range steps {
		must(t, s.Step())
	}
	return s
}

// transitions reads transitions from..to-1 of every memory.
func transitions(t *testing.T, mems []*shm.Memory, from, to uint64) [][]shm.Transition {
	t.Helper()
	out := make([][]shm.Transition, len(mems))
	for i, m := range mems {
		o := m.Layout().ObsSize
		for j := from; j < to; j++ {
			tr := shm.Transition{Obs: make([]float32, o), NextObs: make([]float32, o)}
			must(t, m.Read(j, &tr))
			out[i] = append(out[i], tr)
		}
	}
	return out
}

func sameTransitions(a, b []shm.Transition) bool {
	return slices.EqualFunc(a, b, func(x, y shm.Transition) bool {
		return slices.Equal(x.Obs, y.Obs) && slices.Equal(x.NextObs, y.NextObs) && x.Action == y.Action && x.Reward == y.Reward &&
			x.Terminated == y.Terminated && x.Truncated == y.Truncated
	})
}

// TestSharedActorResumesItsWorld: a shared actor started again over the
// same buffers goes on from the worlds it last saved, not from fresh
// ones: with the same weights it writes, transition for transition, what
// the actor it replaces wrote after that save (its episodes mid-way,
// its exploration and the food still to appear included). One started
// without the file plays other worlds.
func TestSharedActorResumesItsWorld(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	t.Cleanup(func() { _ = dev.Close() }) // after the actors' cleanups
	cfg := smallForage()
	cfg.EpsilonStart, cfg.EpsilonEnd = 0.3, 0.3 // the same exploration at every step count
	file := filepath.Join(t.TempDir(), "world.json")
	mems := sharedMemories(t, cfg)

	first := stepShared(t, dev, cfg, mems, file, 27) // 27 steps: mid-episode in both worlds
	must(t, first.SaveWorld())
	saved := mems[0].Appended()
	for range 30 {
		must(t, first.Step()) // past the episodes' end, into new ones
	}
	end := mems[0].Appended()
	want := transitions(t, mems, saved, end)

	again := stepShared(t, dev, cfg, mems, file, 30)
	if again.Restored() != int(saved) {
		t.Fatalf("the restarted actor went on from step %d, want the save at %d", again.Restored(), saved)
	}
	got := transitions(t, mems, end, mems[0].Appended())
	for i := range mems {
		if len(got[i]) != len(want[i]) || !sameTransitions(got[i], want[i]) {
			t.Fatalf("agent %d: the restarted actor's %d transitions differ from the %d its predecessor wrote after the save", i, len(got[i]), len(want[i]))
		}
	}

	fresh := stepShared(t, dev, cfg, mems, "", 30)
	if fresh.Restored() != -1 {
		t.Fatalf("an actor without a world file says it restored step %d", fresh.Restored())
	}
	if other := transitions(t, mems[:1], mems[0].Appended()-uint64(len(want[0])), mems[0].Appended()); sameTransitions(other[0], want[0]) {
		t.Fatal("an actor that starts its worlds afresh wrote the same transitions: the test cannot tell a resumed world")
	}
}

// TestSharedWorldFileRefused: a world file of another configuration, or
// damaged, is refused naming the file and what to do; CheckWorldFile,
// with no device, refuses what the actor refuses and passes the rest.
func TestSharedWorldFileRefused(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	t.Cleanup(func() { _ = dev.Close() }) // after the actors' cleanups
	cfg := smallForage()
	file := filepath.Join(t.TempDir(), "world.json")
	if err := CheckWorldFile(file, cfg); err != nil {
		t.Errorf("CheckWorldFile of no file: %v", err)
	}
	mems := sharedMemories(t, cfg)
	must(t, stepShared(t, dev, cfg, mems, file, 3).SaveWorld())
	if err := CheckWorldFile(file, cfg); err != nil {
		t.Errorf("CheckWorldFile of a file the actor saved: %v", err)
	}
	good, err := os.ReadFile(file)
	must(t, err)
	other := cfg
	other.Seed = 9
	for _, c := range []struct {
		name string
		cfg  Config
		edit func()
	}{
		{"another configuration", other, func() {}},
		{"a damaged world", cfg, func() {
			var sv map[string]any
			must(t, json.Unmarshal(good, &sv))
			sv["worlds"].([]any)[1] = "AAAA"
			raw, err := json.Marshal(sv)
			must(t, err)
			must(t, os.WriteFile(file, raw, 0o644))
		}},
		{"damaged", cfg, func() { must(t, os.WriteFile(file, []byte(`{"config":`), 0o644)) }},
	} {
		c.edit()
		shared := NewShared()
		_, err := NewSharedActor(dev, shared, mems, c.cfg, SharedActorOptions{WorldFile: file})
		shared.Pool.Close()
		if !errors.Is(err, ErrWorldFile) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "remove it") {
			t.Errorf("%s: %v, want ErrWorldFile naming %s and what to do", c.name, err, file)
		}
		if checked := CheckWorldFile(file, c.cfg); !errors.Is(checked, ErrWorldFile) || err == nil || checked.Error() != err.Error() {
			t.Errorf("%s: CheckWorldFile says %v, the actor %v", c.name, checked, err)
		}
	}
}

// TestEvalEpsilon: eval_epsilon is refused outside [0, 1] by its key, is
// written only when set (the default configuration's digest stays), and
// an evaluation that explores draws the same numbers every time: its
// result depends on the weights alone.
func TestEvalEpsilon(t *testing.T) {
	for _, eps := range []float64{-0.1, 1.5} {
		c := DefaultConfig()
		c.EvalEpsilon = eps
		if err := c.Validate(); !field.Is(err, "eval_epsilon") {
			t.Errorf("eval_epsilon %g: %v, want an error naming eval_epsilon", eps, err)
		}
	}
	c, err := ParseConfig([]byte("eval_epsilon: 0.05\n"))
	must(t, err)
	if c.EvalEpsilon != 0.05 || c.Digest() == DefaultConfig().Digest() || !strings.Contains(string(c.YAML()), "eval_epsilon: 0.05\n") {
		t.Errorf("eval_epsilon 0.05 reads as %g, YAML\n%s", c.EvalEpsilon, c.YAML())
	}
	if strings.Contains(string(DefaultConfig().YAML()), "eval_epsilon") {
		t.Error("the default configuration writes eval_epsilon")
	}

	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	defer dev.Close()
	cfg := DefaultConfig()
	cfg.EvalEpisodes = 8
	spec, err := cfg.Spec()
	must(t, err)
	shared := NewShared()
	defer shared.Pool.Close()
	params, err := dev.Alloc(spec.ParamCount())
	must(t, err)
	defer func() { _ = dev.Free(params) }()
	w := make([]float32, spec.ParamCount())
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.3)
	}
	must(t, dev.Upload(params, w))
	evaluate := func(eps float64) []float64 {
		c := cfg
		c.EvalEpsilon = eps
		e, err := NewEvaluator(dev, shared, c, 0, params, false, nil)
		must(t, err)
		defer func() { must(t, e.Close()) }()
		_, returns, err := e.Evaluate()
		must(t, err)
		_, again, err := e.Evaluate()
		must(t, err)
		if !slices.Equal(returns, again) {
			t.Fatalf("eval_epsilon %g: two evaluations of the same weights gave %v and %v", eps, returns, again)
		}
		return returns
	}
	if greedy, explored := evaluate(0), evaluate(0.5); slices.Equal(greedy, explored) {
		t.Errorf("eval_epsilon 0.5 played the greedy episodes: %v", greedy)
	}
}

// TestForageExample: examples/forage.yaml, the setting docs/rl.md measures
// on Forage, reads and validates as that setting.
func TestForageExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "forage.yaml"))
	must(t, err)
	c, err := ParseConfig(raw)
	must(t, err)
	_, mk, err := c.World()
	must(t, err)
	spec, err := c.Spec()
	must(t, err)
	if c.ActorMode() != ActorShared || c.NumAgents != 2 || mk().Agents() != 2 || spec.Inputs != 75+6 || c.NumEnvs != 4 ||
		c.Optimizer.TotalSteps != 100000 || c.Optimizer.MinLRRatio != 0.1 || c.TargetTau != 0.005 || c.TotalSteps != 100000 ||
		c.EvalEpisodes != 50 || c.EvalEpsilon != 0 {
		t.Errorf("examples/forage.yaml reads as\n%s", c.YAML())
	}
}

// killedWorld is a world whose step fails: an actor's vector step that
// reaches it ends there, as one killed before it stepped that world does,
// with the worlds before it appended to every agent's buffer and none
// after.
type killedWorld struct{ env.MultiEnv }

func (killedWorld) Step([]int, [][]float32, []float32) (bool, bool, error) {
	return false, false, errors.New("the actor was killed here")
}

// TestSharedActorEndsAtTotalSteps: every agent ends at exactly
// total_steps environment steps, however its count stands against the
// vector of num_envs worlds: after an actor killed between two worlds'
// appends (both agents one transition into a vector step) or between two
// agents' appends in a world (agent 0 one transition ahead of agent 1)
// is started again from its saved worlds, and with total_steps no
// multiple of num_envs.
func TestSharedActorEndsAtTotalSteps(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{})
	must(t, err)
	t.Cleanup(func() { _ = dev.Close() }) // after the actors' cleanups
	for _, c := range []struct {
		name  string
		total int
		// kill leaves the memories as a killed actor over them did;
		// nil: no actor ran before.
		kill func(t *testing.T, cfg Config, mems []*shm.Memory, file string)
		from []uint64 // each agent's transitions when the actor starts
	}{
		{"killed between two worlds", 200, func(t *testing.T, cfg Config, mems []*shm.Memory, file string) {
			s := stepShared(t, dev, cfg, mems, file, 20)
			must(t, s.SaveWorld())
			must(t, s.Step())
			s.worlds[1] = killedWorld{s.worlds[1]}
			if err := s.Step(); err == nil {
				t.Fatal("a vector step over a killed world went on")
			}
		}, []uint64{43, 43}},
		{"killed between two agents", 200, func(t *testing.T, cfg Config, mems []*shm.Memory, file string) {
			// The killed actor's own hold of agent 1's memory: closed,
			// its next append there fails after agent 0's.
			spec, err := cfg.Spec()
			must(t, err)
			held, err := shm.Open(mems[1].Path(), cfg.Layout(spec))
			must(t, err)
			s := stepShared(t, dev, cfg, []*shm.Memory{mems[0], held}, file, 20)
			must(t, s.SaveWorld())
			must(t, s.Step())
			must(t, held.Close())
			if err := s.Step(); !errors.Is(err, shm.ErrClosed) {
				t.Fatalf("a vector step appending to a closed memory: %v", err)
			}
		}, []uint64{43, 42}},
		{"total_steps no multiple of num_envs", 201, nil, []uint64{0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := smallForage()
			cfg.TotalSteps, cfg.LearningStarts, cfg.EvalInterval = c.total, 100, 0
			file := filepath.Join(t.TempDir(), "world.json")
			mems := sharedMemories(t, cfg)
			if c.kill != nil {
				c.kill(t, cfg, mems, file)
			}
			for i, m := range mems {
				if m.Appended() != c.from[i] {
					t.Fatalf("agent %d holds %d transitions as the actor starts, want %d", i, m.Appended(), c.from[i])
				}
			}
			s := stepShared(t, dev, cfg, mems, file, 0)
			if restored := s.Restored() >= 0; restored != (c.kill != nil) {
				t.Fatalf("the actor restored saved worlds: %v, want %v", restored, c.kill != nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			must(t, s.Run(ctx))
			for i, m := range mems {
				if m.Appended() != uint64(c.total) || s.AgentSteps(i) != c.total {
					t.Errorf("agent %d ended at %d transitions (%d steps counted), want total_steps %d", i, m.Appended(), s.AgentSteps(i), c.total)
				}
			}
			if s.Steps() != c.total {
				t.Errorf("the actor's steps %d, want %d", s.Steps(), c.total)
			}
		})
	}
}

package dqn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
	"github.com/tolaria-ml/tolaria/trainer"
)

// lockstepTestConfig is two small agents in lockstep whose schedule has
// every edge: two environments per actor, learning_starts not a multiple
// of the round, a round of 7 training steps for 10 transitions, a buffer
// that wraps, and a last round cut short by total_steps.
func lockstepTestConfig() Config {
	cfg := DefaultConfig()
	cfg.NumAgents, cfg.NumEnvs, cfg.Hidden, cfg.BatchSize = 2, 2, []int{16}, 32
	cfg.BufferCapacity, cfg.LearningStarts, cfg.TotalSteps, cfg.TargetUpdate = 600, 205, 1504, 50
	cfg.EpsilonDecaySteps, cfg.EvalInterval, cfg.EvalEpisodes = 800, 500, 5
	cfg.Lockstep, cfg.LockstepCollect, cfg.LockstepTrain = true, 10, 7
	return cfg
}

// TestLockstepSchedule pins the schedule's arithmetic: the first training
// step waits for the round that reaches learning_starts, then each round
// of K transitions releases M steps, and the actor's due count is exactly
// the steps whose need its buffer meets.
func TestLockstepSchedule(t *testing.T) {
	cfg := lockstepTestConfig() // K 10, M 7, learning_starts 205: the first round trained ends at 210
	for _, c := range []struct {
		step int
		need uint64
	}{{0, 210}, {6, 210}, {7, 220}, {13, 220}, {14, 230}} {
		if got := cfg.lockstepNeed(c.step, 0); got != c.need {
			t.Errorf("training step %d waits for %d transitions, want %d", c.step, got, c.need)
		}
	}
	for _, c := range []struct {
		appended uint64
		due      int
	}{{0, 0}, {204, 0}, {205, 0}, {210, 7}, {219, 7}, {220, 14}, {1504, 7 * (150 - 21 + 1)}} {
		if got := cfg.lockstepDue(c.appended, 0); got != c.due {
			t.Errorf("after %d transitions the learner owes %d steps, want %d", c.appended, got, c.due)
		}
	}
	// An agent resumed with an empty buffer numbered from 1000 refills
	// learning_starts transitions first: every step owed up to then at once.
	if got := cfg.lockstepNeed(699, 1000); got != 1205 {
		t.Errorf("with the buffer starting at 1000, step 699 waits for %d transitions, want 1205", got)
	}
	if got := cfg.lockstepNeed(700, 1000); got != 1210 {
		t.Errorf("with the buffer starting at 1000, step 700 waits for %d transitions, want 1210", got)
	}
	if got := cfg.lockstepDue(1204, 1000); got != 0 {
		t.Errorf("before the refill the learner owes %d steps, want none", got)
	}
	for s := range 2000 {
		need := cfg.lockstepNeed(s, 0)
		if due := cfg.lockstepDue(need, 0); due <= s {
			t.Fatalf("step %d waits for %d transitions, at which the actor waits for only %d steps", s, need, due)
		}
		if need > 0 && cfg.lockstepDue(need-1, 0) > s {
			t.Fatalf("step %d waits for %d transitions, but the actor waits for it at %d", s, need, need-1)
		}
	}
}

// TestLockstepHalvesEqualSequential: two agents whose actor and learner
// run on goroutines of their own, meeting only in their memory as the
// processes do, in lockstep, end with the same bits as RunSequential's
// loop: the checkpoint (weights, optimizer state, target network, step),
// the memory (every transition, the published weights, the control
// words), every episode and every evaluation. The learner takes exactly
// the steps the schedule owes.
func TestLockstepHalvesEqualSequential(t *testing.T) {
	dev, err := cpu.Open(cpu.Config{Threads: 1})
	must(t, err)
	defer dev.Close()
	for _, tc := range []struct {
		name   string
		change func(*Config)
		steps  int // environment steps each agent ends at
	}{
		{"to total_steps", func(*Config) {}, 1504},
		// The last vector step appends one of the two environments'
		// transitions: each agent ends at 1503, not 1504.
		{"to total_steps no multiple of num_envs", func(c *Config) { c.TotalSteps = 1503 }, 1503},
		// MountainCar-v0 cut at 50 steps returns at least -50, above its
		// goal of -110: the first evaluation solves it and stops the agent.
		{"stopped when solved", func(c *Config) {
			c.Env = env.Spec{Name: env.MountainCarName, Params: map[string]any{"max_steps": 50}}
			c.StopWhenSolved, c.EvalEpisodes = true, 100
		}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := lockstepTestConfig()
			tc.change(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			seqDir, halvesDir := t.TempDir(), t.TempDir()
			seq, err := RunSequential(ctx, dev, cfg, SequentialOptions{Graphs: true, Dir: seqDir})
			must(t, err)
			halves := runLockstepHalves(t, ctx, dev, cfg, halvesDir)
			for i := range cfg.NumAgents {
				s, h := seq[i], halves[i]
				due := cfg.lockstepDue(uint64(tc.steps), 0)
				if s.EnvSteps != tc.steps || s.LearnerSteps != due || h.EnvSteps != tc.steps || h.LearnerSteps != due {
					t.Errorf("agent %d: sequential %d env and %d learner steps, halves %d and %d; want %d and %d",
						i, s.EnvSteps, s.LearnerSteps, h.EnvSteps, h.LearnerSteps, tc.steps, due)
				}
				if len(s.Episodes) == 0 || !reflect.DeepEqual(s.Episodes, h.Episodes) {
					t.Errorf("agent %d: the episodes differ: sequential %d, halves %d", i, len(s.Episodes), len(h.Episodes))
				}
				if !sameEvals(s.EvalResults, h.EvalResults) || len(s.EvalResults) != tc.steps/cfg.EvalInterval {
					t.Errorf("agent %d: evaluations differ or are missing: sequential %+v, halves %+v", i, s.EvalResults, h.EvalResults)
				}
				if s.Fallbacks != 0 {
					t.Errorf("agent %d: %d learner steps ran eagerly", i, s.Fallbacks)
				}
				compareAgentFiles(t, i, filepath.Join(seqDir, fmt.Sprintf(SequentialAgentDir, i)), filepath.Join(halvesDir, fmt.Sprintf(SequentialAgentDir, i)))
			}
			if cfg.Env.Name == env.CartPoleName && reflect.DeepEqual(seq[0].Episodes, seq[1].Episodes) {
				t.Error("the two agents played the same episodes: their seeds are not their own")
			}
		})
	}
}

// sameEvals compares evaluations but for their durations.
func sameEvals(a, b []EvalResult) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Elapsed, y.Elapsed = 0, 0
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// compareAgentFiles checks that two agent directories hold the same
// learner checkpoint and saved memory, byte for byte; a checkpoint that
// differs is described by its first differing value.
func compareAgentFiles(t *testing.T, agent int, a, b string) {
	t.Helper()
	for _, f := range []string{trainer.CheckpointFile, SavedBufferFile} {
		x, errA := os.ReadFile(filepath.Join(a, f))
		y, errB := os.ReadFile(filepath.Join(b, f))
		if errA != nil || errB != nil {
			t.Errorf("agent %d: %v, %v", agent, errA, errB)
			continue
		}
		if bytes.Equal(x, y) {
			continue
		}
		t.Errorf("agent %d: %s differs (%d and %d bytes)", agent, f, len(x), len(y))
		if f == trainer.CheckpointFile {
			describeCheckpoints(t, filepath.Join(a, f), filepath.Join(b, f))
		}
	}
}

func describeCheckpoints(t *testing.T, a, b string) {
	t.Helper()
	x, errA := trainer.LoadCheckpoint(a)
	y, errB := trainer.LoadCheckpoint(b)
	if errA != nil || errB != nil {
		t.Errorf("%v, %v", errA, errB)
		return
	}
	if x.Step != y.Step {
		t.Errorf("learner steps %d and %d", x.Step, y.Step)
	}
	for i, v := range x.Parameters() {
		if w := y.Parameters()[i]; v != w {
			t.Errorf("parameter %d: %g and %g", i, v, w)
			return
		}
	}
}

// runLockstepHalves runs each agent's Learner.Run and Actor.Run on
// goroutines of their own, as tolaria-worker's actor and learner run them
// (the actor's worker sets the stop flag once the agent's steps are done,
// and the learner's writes its checkpoint), and saves each agent's
// checkpoint and memory into dir as RunSequential does.
func runLockstepHalves(t *testing.T, ctx context.Context, dev device.Device, cfg Config, dir string) []AgentResult {
	t.Helper()
	spec, err := cfg.Spec()
	must(t, err)
	shared := NewShared()
	defer shared.Pool.Close()
	results := make([]AgentResult, cfg.NumAgents)
	type halves struct {
		mem *shm.Memory
		l   *Learner
		a   *Actor
	}
	agents := make([]halves, cfg.NumAgents)
	// Every capture first: a capture is global to the process.
	for i := range agents {
		res := &results[i]
		res.Agent = i
		mem, err := shm.CreateShared(fmt.Sprintf("tolaria-lockstep-test-%d", i), cfg.Layout(spec))
		must(t, err)
		defer mem.Close()
		l, err := NewLearner(dev, shared, mem, cfg, i, LearnerOptions{Graphs: true})
		must(t, err)
		defer l.Close()
		a, err := NewActor(dev, shared, mem, cfg, i, ActorOptions{Graphs: true,
			OnEpisode: func(e env.Episode, steps int) {
				res.Episodes = append(res.Episodes, EpisodeRecord{Return: e.Return, Length: e.Length, EnvSteps: steps})
			},
			OnEval: func(r EvalResult) { res.EvalResults = append(res.EvalResults, r) }})
		must(t, err)
		defer a.Close()
		must(t, l.Capture())
		must(t, a.Capture())
		agents[i] = halves{mem, l, a}
	}
	var wg sync.WaitGroup
	errs := make([]error, cfg.NumAgents)
	for i, h := range agents {
		res, mem, l, a := &results[i], h.mem, h.l, h.a
		var learnErr, actErr error
		var both sync.WaitGroup
		both.Go(func() { learnErr = l.Run(ctx) })
		both.Go(func() {
			actErr = a.Run(ctx)
			if a.Steps() >= cfg.TotalSteps {
				mem.Stop()
			}
		})
		wg.Go(func() {
			both.Wait()
			res.EnvSteps, res.LearnerSteps, res.Fallbacks = a.Steps(), l.Steps(), l.Fallbacks()
			agentDir := filepath.Join(dir, fmt.Sprintf(SequentialAgentDir, i))
			errs[i] = errors.Join(learnErr, actErr, os.MkdirAll(agentDir, 0o755))
			if errs[i] == nil {
				errs[i] = errors.Join(l.Save(agentDir, i), mem.Save(filepath.Join(agentDir, SavedBufferFile), shm.Owner{Agent: i, Config: cfg.Digest()}))
			}
		})
	}
	wg.Wait()
	must(t, errors.Join(errs...))
	return results
}

// TestLockstepKeys: the schedule's keys are read from a file and written
// back under the same digest, a free-running configuration writes none
// of them (its digest is what it was), and a bad schedule is refused
// naming its key, only when lockstep is on.
func TestLockstepKeys(t *testing.T) {
	c, err := ParseConfig([]byte("lockstep: true\nlockstep_collect: 20\nlockstep_train: 5\n"))
	if err != nil || !c.Lockstep || c.LockstepCollect != 20 || c.LockstepTrain != 5 {
		t.Fatalf("read %+v (%v)", c, err)
	}
	back, err := ParseConfig(c.YAML())
	if err != nil || !reflect.DeepEqual(back, c) || back.Digest() != c.Digest() {
		t.Errorf("written as\n%s\nread back as %+v (%v)", c.YAML(), back, err)
	}
	if def := DefaultConfig(); bytes.Contains(def.YAML(), []byte("lockstep")) {
		t.Errorf("the default configuration writes the lockstep keys:\n%s", def.YAML())
	}
	if _, err := ParseConfig([]byte("lockstep_collect: 0\n")); err != nil {
		t.Errorf("a schedule not used (lockstep off) is refused: %v", err)
	}
	for _, tc := range []struct {
		file string
		key  field.Name
		says string
	}{
		{"lockstep: true\nlockstep_collect: 0\n", "lockstep_collect", "1..1000000"},
		{"lockstep: true\nnum_envs: 4\nlockstep_collect: 10\n", "lockstep_collect", "multiple of num_envs (4)"},
		{"lockstep: true\nlockstep_train: 1000001\n", "lockstep_train", "1..1000000"},
		{"lockstep: true\nactor: shared\nenv: Forage\nnum_agents: 2\n", "lockstep", "without lockstep"},
		{"lockstep: yes please\n", "lockstep", ""},
	} {
		_, err := ParseConfig([]byte(tc.file))
		if !field.Is(err, tc.key) || !strings.Contains(fmt.Sprint(err), tc.says) {
			t.Errorf("%q: %v; want a refusal naming %s and saying %q", tc.file, err, tc.key, tc.says)
		}
	}
}

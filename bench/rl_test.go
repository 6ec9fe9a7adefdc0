package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/dqn"
)

// TestRLMeterWindow: the window runs from the first reading at which every
// learner has trained to the last before an agent has taken all its steps.
func TestRLMeterWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	m := NewRLMeter(2, 1000)
	m.Observe(at(0), 0, 300, 0)  // filling the buffer
	m.Observe(at(1), 0, 600, 10) // agent 1 has not trained yet
	m.Observe(at(1.5), 1, 500, 0)
	m.Observe(at(2), 1, 700, 20) // every learner has trained: 1300 and 30
	m.Observe(at(3), 0, 800, 50)
	m.Observe(at(3), 0, 700, 40) // an older reading changes nothing
	m.Observe(at(4), 1, 900, 80) // 1700 and 130
	m.Observe(at(5), 0, 1000, 90)
	m.Observe(at(6), 1, 999, 95) // after an agent finished: outside
	w, err := m.Window()
	if err != nil {
		t.Fatal(err)
	}
	want := RLWindow{EnvSteps: 400, LearnerSteps: 100, WindowSeconds: 2, Window: RLWindowReadings, Marks: 4}
	if w != want {
		t.Fatalf("window %+v, want %+v", w, want)
	}
	if w.EnvStepsPerSec() != 200 || w.LearnerStepsPerSec() != 50 {
		t.Errorf("rates %g and %g, want 200 and 50", w.EnvStepsPerSec(), w.LearnerStepsPerSec())
	}

	short := NewRLMeter(1, 1000)
	short.Observe(at(0), 0, 900, 5)
	short.Observe(at(1), 0, 1000, 50)
	if _, err := short.Window(); !errors.Is(err, ErrRLNoWindow) {
		t.Errorf("one reading in the window: %v, want ErrRLNoWindow", err)
	}
}

// fakeRL is a runner whose rates depend on its mode, agents and graphs
// only, and which records the order of its runs.
type fakeRL struct {
	mode  string
	calls *[]string
}

func (f fakeRL) run(_ context.Context, cfg dqn.Config, graphs bool) (RLWindow, error) {
	*f.calls = append(*f.calls, fmt.Sprintf("%s/%d/%v", f.mode, cfg.NumAgents, graphs))
	// Processes: 1000 env steps/s per agent; sequential 1000 in all.
	// Learner steps: half the env steps, and graphs on 1.25x as many.
	env := 1000.0
	if f.mode == RLProcesses {
		env *= float64(cfg.NumAgents)
	}
	learn := env / 2
	if graphs {
		learn *= 1.25
	}
	return RLWindow{EnvSteps: int(env * 2), LearnerSteps: int(learn * 2), WindowSeconds: 2, Window: RLWindowReadings, Marks: 4, WallSeconds: 3}, nil
}

func fakeRLConfig(calls *[]string) RLConfig {
	d := RLTrainingConfig()
	d.TotalSteps, d.LearningStarts = 1500, 1000
	return RLConfig{Agents: []int{1, 2, 4}, Repeats: 2, DQN: d,
		Processes: fakeRL{RLProcesses, calls}.run, Sequential: fakeRL{RLSequential, calls}.run}
}

// TestRunRLPairsRounds: both modes run at every point in every round, the
// first of the two alternating; the points' speed-ups are the processes'
// rates over the sequential loop's, and the graphs' gain on over off.
func TestRunRLPairsRounds(t *testing.T) {
	var calls []string
	rep, err := RunRL(context.Background(), fakeRLConfig(&calls))
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2*3*2*2 || len(rep.Runs) != len(calls) {
		t.Fatalf("%d runs, %d in the report; want 24", len(calls), len(rep.Runs))
	}
	for i := 0; i < len(calls); i += 2 {
		a, b := calls[i], calls[i+1]
		pa, pb := strings.SplitN(a, "/", 2), strings.SplitN(b, "/", 2)
		if pa[1] != pb[1] || pa[0] == pb[0] {
			t.Fatalf("runs %d and %d are %s and %s: want both modes of one point back to back", i, i+1, a, b)
		}
		first := RLProcesses
		if (i/2)%2 == 1 {
			first = RLSequential
		}
		if pa[0] != first {
			t.Errorf("point %d (%s) starts with %s, want %s: the first mode alternates", i/2, pa[1], pa[0], first)
		}
	}
	if len(rep.Points) != 6 {
		t.Fatalf("%d points, want 6", len(rep.Points))
	}
	for _, p := range rep.Points {
		n := float64(p.Agents)
		if p.EnvSpeedup.Median != n || p.EnvSpeedup.N != 2 || p.LearnerSpeedup.Median != n {
			t.Errorf("%d agents, graphs %v: speed-ups %+v and %+v, want %gx over 2 rounds", p.Agents, p.Graphs, p.EnvSpeedup, p.LearnerSpeedup, n)
		}
		if p.Sequential.EnvStepsPerSec.Median != 1000 || p.Processes.EnvStepsPerSec.Median != 1000*n {
			t.Errorf("%d agents: env steps/s %+v and %+v", p.Agents, p.Processes.EnvStepsPerSec, p.Sequential.EnvStepsPerSec)
		}
	}
	if len(rep.GraphsGain) != 6 {
		t.Fatalf("%d graphs gains, want 6", len(rep.GraphsGain))
	}
	for _, g := range rep.GraphsGain {
		if g.LearnerGain.Median != 1.25 || g.EnvGain.Median != 1 {
			t.Errorf("%+v: want a learner gain of 1.25x and an env gain of 1x", g)
		}
	}
	if rep.Settings.TotalSteps != 1500 || !slices.Equal(rep.Settings.Agents, []int{1, 2, 4}) || rep.Env != "CartPole-v1" || rep.Host.NumCPU < 1 {
		t.Errorf("settings %+v, env %q, host %+v", rep.Settings, rep.Env, rep.Host)
	}
}

// TestRLReportJSON: the report's keys, as docs/bench.md lists them.
func TestRLReportJSON(t *testing.T) {
	var calls []string
	rep, err := RunRL(context.Background(), fakeRLConfig(&calls))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteRLJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"device", "env", "settings", "points", "graphs_gain", "runs", "host", "started", "wall_seconds"} {
		if _, ok := top[k]; !ok {
			t.Errorf("no %q in the report", k)
		}
	}
	var back struct {
		Points []map[string]json.RawMessage `json:"points"`
		Runs   []map[string]json.RawMessage `json:"runs"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"agents", "graphs", "processes", "sequential", "env_speedup", "learner_speedup"} {
		if _, ok := back.Points[0][k]; !ok {
			t.Errorf("no %q in a point", k)
		}
	}
	for _, k := range []string{"round", "mode", "agents", "graphs", "env_steps", "learner_steps", "window_seconds", "window", "marks",
		"wall_seconds", "env_steps_per_second", "learner_steps_per_second"} {
		if _, ok := back.Runs[0][k]; !ok {
			t.Errorf("no %q in a run", k)
		}
	}
	var again RLReport
	if err := json.Unmarshal(buf.Bytes(), &again); err != nil || len(again.Points) != len(rep.Points) || again.Points[2].EnvSpeedup != rep.Points[2].EnvSpeedup {
		t.Errorf("the report does not read back: %v", err)
	}
}

func TestRLConfigValidate(t *testing.T) {
	var calls []string
	tests := []struct {
		name string
		edit func(*RLConfig)
		want string
	}{
		{"agents out of order", func(c *RLConfig) { c.Agents = []int{2, 1} }, "agents: give the counts once each, in increasing order"},
		{"no agents", func(c *RLConfig) { c.Agents = []int{0} }, "agents: each count must be in 1..64, got 0"},
		{"too many agents", func(c *RLConfig) { c.Agents = []int{65} }, "agents: each count must be in 1..64, got 65"},
		{"graphs twice", func(c *RLConfig) { c.Graphs = []bool{true, true} }, "graphs: give on, off or both"},
		{"repeats", func(c *RLConfig) { c.Repeats = -1 }, "repeats: must be in 1..100, got -1"},
		{"no window", func(c *RLConfig) { c.DQN.TotalSteps = 1050 }, "total-steps: 1050 leaves 50 steps per agent past learning_starts 1000; give at least 1100"},
		{"bad dqn", func(c *RLConfig) { c.DQN.BatchSize = 0 }, "batch_size"},
		{"no runner", func(c *RLConfig) { c.Sequential = nil }, "both modes need a runner"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeRLConfig(&calls)
			tt.edit(&c)
			err := c.WithDefaults().Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	if err := fakeRLConfig(&calls).WithDefaults().Validate(); err != nil {
		t.Fatalf("a good configuration: %v", err)
	}
}

// TestSequentialRunner measures the sequential loop of two small agents
// on the CPU device: the window is the whole run less the run to
// learning_starts, which for RunSequential's fixed schedule is exactly
// the environment steps past learning_starts.
func TestSequentialRunner(t *testing.T) {
	cfg := RLTrainingConfig()
	// Training steps of a batch of 256 through two layers of 64 make the
	// whole run's training far outlast the noise in the two runs' start-up.
	cfg.NumAgents, cfg.Hidden, cfg.BatchSize, cfg.BufferCapacity = 2, []int{64, 64}, 256, 1000
	cfg.TotalSteps, cfg.LearningStarts, cfg.TargetUpdate = 600, 260, 50
	for _, graphs := range []bool{true, false} {
		w, err := SequentialRunner(func() (device.Device, error) { return cpu.Open(cpu.Config{Threads: 1}) })(context.Background(), cfg, graphs)
		if err != nil {
			t.Fatalf("graphs %v: %v", graphs, err)
		}
		if w.Window != RLWindowDifference || w.EnvSteps != 2*(600-260) || w.LearnerSteps <= 0 || w.LearnerSteps > w.EnvSteps+2*cfg.LockstepTrain ||
			!(w.WindowSeconds > 0) || w.WindowSeconds > w.WallSeconds {
			t.Errorf("graphs %v: %+v", graphs, w)
		}
	}
}

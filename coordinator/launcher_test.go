package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/launch"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/worker"
)

// fakeLauncher is a launcher of its own, as a new one would be written
// (see docs/architecture.md, "How to add a launcher"): it lays out slots
// named fake:cpu, records what it is asked, and starts each worker as a
// local process through the local launcher.
type fakeLauncher struct {
	local launch.Launcher
	cfg   launch.Config

	mu       sync.Mutex
	planned  []int
	started  []string // "index/attempt@slot"
	released map[int]int
	holds    int
	running  int
	most     int // workers running at once, at most
}

// fakeKind is the fake launcher's kind; made is told of each launcher it
// makes.
func fakeKind(made func(*fakeLauncher)) launch.Kind {
	return launch.Kind{Name: "fake", New: func(ctx context.Context, cfg launch.Config) (launch.Launcher, error) {
		local, err := launch.Local().New(ctx, cfg)
		if err != nil {
			return nil, err
		}
		f := &fakeLauncher{local: local, cfg: cfg, released: map[int]int{}}
		made(f)
		return f, nil
	}}
}

func (f *fakeLauncher) Slots(context.Context) ([]launch.Slot, error) {
	n := f.cfg.Parallel
	if n == 0 {
		n = f.cfg.Workers
	}
	slots := make([]launch.Slot, n)
	for i := range slots {
		slots[i] = launch.Slot{Device: "cpu", GPU: -1, Where: "fake"}
	}
	return slots, nil
}

func (f *fakeLauncher) Plan(ws []launch.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range ws {
		f.planned = append(f.planned, w.Index)
	}
}

func (f *fakeLauncher) Hold(ctx context.Context) (context.Context, func()) {
	f.mu.Lock()
	f.holds++
	f.mu.Unlock()
	return ctx, func() {}
}

func (f *fakeLauncher) Start(ctx context.Context, w launch.Worker, sl launch.Slot, n int) (*launch.Handle, error) {
	f.mu.Lock()
	f.started = append(f.started, fmt.Sprintf("%d/%d@%s", w.Index, n, sl))
	f.mu.Unlock()
	h, err := f.local.Start(ctx, w, launch.Slot{Device: sl.Device, GPU: -1}, n)
	if err != nil {
		return nil, err
	}
	h.Transport = &countedTransport{Transport: h.Transport, f: f}
	return h, nil
}

func (f *fakeLauncher) Release(_ context.Context, w launch.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released[w.Index]++
}

func (f *fakeLauncher) Describe() (string, []string) { return "", nil }

// countedTransport counts the fake's workers running at once.
type countedTransport struct {
	worker.Transport
	f *fakeLauncher
}

func (c *countedTransport) Call(ctx context.Context, req worker.Request, sink worker.Sink) (worker.Hello, json.RawMessage, error) {
	c.f.mu.Lock()
	c.f.running++
	c.f.most = max(c.f.most, c.f.running)
	c.f.mu.Unlock()
	defer func() {
		c.f.mu.Lock()
		c.f.running--
		c.f.mu.Unlock()
	}()
	return c.Transport.Call(ctx, req, sink)
}

// check fails t unless the fake planned, started and released every one
// of want workers once, each on a fake slot, under one Hold, with at most
// most of them running at once.
func (f *fakeLauncher) check(t *testing.T, what string, want, most int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	slices.Sort(f.planned)
	var starts []string
	for i := range want {
		starts = append(starts, fmt.Sprintf("%d/1@fake:cpu", i))
		if f.released[i] == 0 {
			t.Errorf("%s: worker %d never released (%v)", what, i, f.released)
		}
	}
	slices.Sort(f.started)
	if len(f.planned) != want || f.planned[want-1] != want-1 {
		t.Errorf("%s: planned %v, want %d workers", what, f.planned, want)
	}
	if !slices.Equal(f.started, starts) {
		t.Errorf("%s: started %v, want %v", what, f.started, starts)
	}
	if f.holds != 1 {
		t.Errorf("%s: %d holds, want one", what, f.holds)
	}
	if f.most < 1 || f.most > most {
		t.Errorf("%s: %d workers at once, want 1 to %d", what, f.most, most)
	}
}

// TestFakeLauncherRunsEveryActivity: a launcher the coordinator does not
// know, given as a Kind, places and starts the workers of a sweep, a
// sharded evaluation and a reinforcement-learning run, through the one
// slot allocator; each activity plans its workers, holds its attempts'
// context, starts each worker on a slot the launcher laid out (the
// sweep's results name it), never more at once than the slots, and
// releases every worker.
func TestFakeLauncherRunsEveryActivity(t *testing.T) {
	t.Run("sweep", func(t *testing.T) {
		var f *fakeLauncher
		cfg := sweepConfig(t, testSweep)
		cfg.Parallel, cfg.Launch = 2, fakeKind(func(l *fakeLauncher) { f = l })
		res, s := runSweep(t, context.Background(), cfg)
		if s.Devices() != "fake:cpu" || s.Parallel() != 2 {
			t.Errorf("the sweep runs on %q, %d at once; want fake:cpu, 2", s.Devices(), s.Parallel())
		}
		for _, r := range res.Trials {
			if r.State != sweep.TrialSucceeded || r.Device != "fake:cpu" {
				t.Errorf("trial %s: %s on %s (%s)", r.Name, r.State, r.Device, r.Reason)
			}
		}
		f.check(t, "sweep", len(res.Trials), 2)
	})
	t.Run("eval", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "run")
		trainRun(t, request(t, smallSpec(dir)))
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(serveAsWorkerEnv, "1")
		var f *fakeLauncher
		e, err := eval.Plan(eval.Request{RunDir: dir, Workers: 2, Worker: exe, Launch: fakeKind(func(l *fakeLauncher) { f = l })})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := e.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Samples != e.Samples() || rep.Workers != 2 {
			t.Errorf("report %+v", rep)
		}
		for s := range 2 {
			if _, err := os.Stat(filepath.Join(dir, eval.Dir, fmt.Sprintf("shard-%d.log", s))); err != nil {
				t.Errorf("shard %d's worker log: %v", s, err)
			}
		}
		f.check(t, "eval", 2, 2)
	})
	t.Run("rl", func(t *testing.T) {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(serveAsWorkerEnv, "1")
		cfg := dqn.DefaultConfig()
		cfg.NumAgents, cfg.Hidden, cfg.TotalSteps, cfg.LearningStarts, cfg.BufferCapacity = 1, []int{16}, 1000, 200, 5000
		cfg.EvalInterval = 0
		req := rl.Request{Config: cfg, ConfigYAML: cfg.YAML(), Dir: filepath.Join(t.TempDir(), "run"), Graphs: true, MaxLead: 50, Worker: exe}
		var f *fakeLauncher
		req.Launch = fakeKind(func(l *fakeLauncher) { f = l })
		run, err := rl.Prepare(req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		sum, err := run.Run(context.Background())
		if err := errors.Join(err, run.Close()); err != nil {
			t.Fatal(err)
		}
		if a := sum.Agents[0]; a.State != rl.AgentSucceeded || a.EnvSteps != 1000 {
			t.Errorf("agent %+v", a)
		}
		// The learner is worker 0 and the actor worker 1; both run at once.
		f.check(t, "rl", 2, 2)
		if f.most != 2 {
			t.Errorf("rl: %d workers at once; the actor and the learner run together", f.most)
		}
	})
}

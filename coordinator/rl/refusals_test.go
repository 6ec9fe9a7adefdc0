package rl

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/worker"
)

// TestBusyRunDirNamesItsHolder: a run directory another tolaria holds is
// refused as in use, naming the holder's pid, before anything else is
// said of it: to a new run (not "already holds a run; use --resume",
// which would be refused in turn), to --resume, in Resolve as in
// Prepare; and a tolaria rl run records its pid in the lock, so that
// tolaria train refused its directory names it too.
func TestBusyRunDirNamesItsHolder(t *testing.T) {
	req := rlRequest(t)
	held, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	holder := fmt.Sprintf("(pid %d, tolaria rl)", os.Getpid())
	if raw := readFile(t, filepath.Join(req.Dir, rundir.LockFile)); string(raw) != strings.Trim(holder, "()") {
		t.Errorf("the lock file holds %q, want %q", raw, strings.Trim(holder, "()"))
	}
	wantBusy := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, refusal.ErrConfig) || !errors.Is(err, rundir.ErrBusy) || !field.Is(err, "run_dir") || errors.Is(err, rundir.ErrExists) {
			t.Errorf("%s: %v, want a run_dir refusal as in use", what, err)
			return
		}
		for _, w := range []string{req.Dir + " is in use by another tolaria " + holder, "wait for it or choose another run_dir"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", what, err, w)
			}
		}
	}
	_, err = Prepare(req, time.Now())
	wantBusy("a new run", err)
	resume := req
	resume.Resume = true
	_, err = Prepare(resume, time.Now())
	wantBusy("--resume", err)
	resolved := Request{Dir: req.Dir, Resume: true}
	wantBusy("resolving --resume", resolved.Resolve("", nil))
	_, err = rundir.Plan(req.Dir, false, time.Now())
	wantBusy("tolaria train", err)

	// Once it is given back, a new run there is refused as a run.
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(req, time.Now()); !errors.Is(err, rundir.ErrExists) {
		t.Errorf("a new run in a run's idle directory: %v, want it refused as holding a run", err)
	}
}

// TestDamagedWorldFileRefusedUpFront: --resume of a shared-world run whose
// world.json the shared actor could not restore is refused before any
// worker starts (exit 2, as a damaged replay.buf), naming the file, what
// to do and what removing it loses, with nothing written (the lock file
// says what it said); once it is removed, the run resumes.
func TestDamagedWorldFileRefusedUpFront(t *testing.T) {
	req := sharedRequest(t, 4000)
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Close(); err != nil {
		t.Fatal(err)
	}
	// As an earlier tolaria left it: a refused resume leaves it so.
	writeFile(t, filepath.Join(req.Dir, rundir.LockFile), []byte("pid 1, tolaria rl"))
	world := filepath.Join(req.Dir, WorldFile)
	other := req.Config
	other.Seed++
	req.Resume = true
	for name, raw := range map[string]string{
		"not JSON":                 "garbage\n",
		"cut short":                `{"config":`,
		"of another configuration": fmt.Sprintf(`{"config": %q, "agents": 2}`, other.Digest()),
		"of another agent count":   fmt.Sprintf(`{"config": %q, "agents": 3}`, req.Config.Digest()),
		"with no worlds in it":     fmt.Sprintf(`{"config": %q, "agents": 2, "explore": ["", ""], "returns": [[0, 0], [0, 0]]}`, req.Config.Digest()),
		"with damaged generators":  fmt.Sprintf(`{"config": %q, "agents": 2, "worlds": ["AAAA", "AAAA"], "length": [0, 0], "explore": ["", ""], "returns": [[0, 0], [0, 0]]}`, req.Config.Digest()),
	} {
		writeFile(t, world, []byte(raw))
		before := snapshot(t, req.Dir)
		_, err := Prepare(req, time.Now())
		if !errors.Is(err, refusal.ErrConfig) || !errors.Is(err, dqn.ErrWorldFile) || !field.Is(err, "resume") {
			t.Errorf("%s: %v, want a resume refusal of %s", name, err, WorldFile)
			continue
		}
		for _, w := range []string{world, "remove it to start the worlds afresh", "loses only the worlds as saved", "checkpoint, replay buffer and events are kept"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", name, err, w)
			}
		}
		if after := snapshot(t, req.Dir); !equalMaps(before, after) {
			t.Errorf("%s: the refused resume changed the run directory", name)
		}
	}
	if err := os.Remove(world); err != nil {
		t.Fatal(err)
	}
	run, err = Prepare(req, time.Now())
	if err != nil {
		t.Fatalf("--resume with %s removed: %v", WorldFile, err)
	}
	if err := run.Close(); err != nil {
		t.Fatal(err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRunWithoutLearningRefused: total_steps equal to learning_starts
// leaves the learners no training step, and is refused naming both keys
// and what to give, with nothing written, as one under it is; one step
// more is a run.
func TestRunWithoutLearningRefused(t *testing.T) {
	for _, extra := range []int{0, -100} {
		req := rlRequest(t)
		req.Config.TotalSteps = req.Config.LearningStarts + extra
		_, err := Prepare(req, time.Now())
		if !errors.Is(err, refusal.ErrConfig) || !field.Is(err, "total_steps") {
			t.Errorf("total_steps %d, learning_starts %d: %v, want a total_steps refusal", req.Config.TotalSteps, req.Config.LearningStarts, err)
			continue
		}
		for _, w := range []string{"learning_starts (500)", "no training step", "give a total_steps above 500, or a smaller learning_starts"} {
			if extra == 0 && !strings.Contains(err.Error(), w) { // under it, dqn.Config refuses it in its words
				t.Errorf("total_steps %d: %q lacks %q", req.Config.TotalSteps, err, w)
			}
		}
		if _, err := os.Stat(req.Dir); err == nil {
			t.Errorf("total_steps %d: the refused run made %s", req.Config.TotalSteps, req.Dir)
		}
	}
	req := rlRequest(t)
	req.Config.TotalSteps = req.Config.LearningStarts + 1
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatalf("total_steps one over learning_starts: %v", err)
	}
	if err := run.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCrowding: the worker processes of a run on the CPU device crowd
// the machine past CrowdPerCore threads a core; the warning names the
// load, both timeouts and how many agents fit.
func TestCrowding(t *testing.T) {
	for _, c := range []struct {
		workers, perAgent, threads, cores int
		crowded                           bool
		fit                               int
	}{
		{4, 2, 1, 2, false, 0},                // two agents
		{2 * CrowdPerCore, 2, 1, 2, false, 0}, // the most that fit
		{2*CrowdPerCore + 2, 2, 1, 2, true, CrowdPerCore},
		{2000, 2, 1, 2, true, CrowdPerCore},                     // the audit's 1000 agents
		{2000, 2, 1, 64, false, 0},                              // on a large machine
		{4, 2, CrowdPerCore, 2, true, 1},                        // threads count too
		{2*CrowdPerCore + 1, 1, 1, 2, true, 2*CrowdPerCore - 1}, // a shared world: one actor and a learner each
		{2 * CrowdPerCore, 1, 1, 2, false, 0},
		{8, 2, 4 * CrowdPerCore, 1, true, 0}, // not even one agent
	} {
		got, crowded := crowding(c.workers, c.perAgent, c.threads, c.cores)
		if crowded != c.crowded || got.agents != c.fit {
			t.Errorf("%d workers (%d an agent) of %d threads on %d cores: crowded %v, %d agents fit; want %v, %d",
				c.workers, c.perAgent, c.threads, c.cores, crowded, got.agents, c.crowded, c.fit)
		}
	}
	c, _ := crowding(2000, 2, 1, 2)
	msg := c.warning(0, 45*time.Second)
	for _, w := range []string{"2000 worker processes run at once on 2 CPU cores", "--worker-start-timeout (20s)", "--heartbeat-timeout (45s)",
		fmt.Sprintf("run fewer agents (--agents %d fits), or raise --worker-start-timeout and --heartbeat-timeout", CrowdPerCore)} {
		if !strings.Contains(msg, w) {
			t.Errorf("the warning %q lacks %q", msg, w)
		}
	}
	// What fits is said for what can be lowered: agents, threads, or both.
	for _, r := range []struct {
		workers, threads int
		remedy           string
	}{
		{2000, 1, fmt.Sprintf("run fewer agents (--agents %d fits), or raise", CrowdPerCore)},
		{2, CrowdPerCore*2 + 1, fmt.Sprintf("run fewer --threads (--threads %d fits), or raise", CrowdPerCore)},
		{16, 8, fmt.Sprintf("run fewer agents (--agents %d fits) or fewer --threads (--threads %d fits), or raise", CrowdPerCore/8, CrowdPerCore/8)},
		{2 * CrowdPerCore * 2, 2, fmt.Sprintf("run fewer agents (--agents %d fits), or raise", CrowdPerCore/2)},
		{8 * CrowdPerCore, 4 * CrowdPerCore, "run fewer agents and fewer --threads, or raise"},
	} {
		c, crowded := crowding(r.workers, 2, r.threads, 2)
		if got := c.remedy(); !crowded || !strings.HasPrefix(got, r.remedy) {
			t.Errorf("%d workers of %d threads on 2 cores: crowded %v, %q; want %q", r.workers, r.threads, crowded, got, r.remedy)
		}
	}

	shared := rlRequest(t)
	shared.Config = sharedRequest(t, 4000).Config
	shared.Config.NumAgents = 2 * CrowdPerCore
	for _, r := range []struct {
		name    string
		req     Request
		local   bool
		crowded bool
	}{
		{"a shared world of 64 agents on 1 core", shared, true, true},
		{"the same on cuda", func() Request { r := shared; r.Device = "cuda"; return r }(), true, false},
		{"the same under Slurm", shared, false, false},
	} {
		if _, crowded := runCrowding(r.req, r.local, 1); crowded != r.crowded {
			t.Errorf("%s: crowded %v, want %v", r.name, crowded, r.crowded)
		}
	}
	// A resumed run keeps its agents (--resume refuses --agents): fewer
	// agents is not offered, only what a resume may change.
	resumed := shared
	resumed.Resume = true
	if c, crowded := runCrowding(resumed, true, 1); !crowded || strings.Contains(c.remedy(), "--agents") || !strings.Contains(c.remedy(), "raise --worker-start-timeout") {
		t.Errorf("a resumed crowded run: crowded %v, remedy %q; want no --agents advice", crowded, c.remedy())
	}
	resumed.Threads = 4
	if c, _ := runCrowding(resumed, true, 8); strings.Contains(c.remedy(), "--agents") || !strings.Contains(c.remedy(), "fewer --threads") {
		t.Errorf("a resumed crowded run of 4 threads: remedy %q; want fewer --threads and no --agents", c.remedy())
	}
}

// TestCrowdedRunWarnsAndExplains: a run whose workers crowd this machine
// is warned before it starts; in it a worker's failure to answer or to
// send heartbeats names the crowding, and other failures are left as
// they are. A run that fits is not warned.
func TestCrowdedRunWarnsAndExplains(t *testing.T) {
	var logs bytes.Buffer
	req := rlRequest(t)
	req.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	req.Config.NumAgents = 1
	req.Threads = CrowdPerCore*runtime.NumCPU()/2 + 1 // two workers, over the bound on any machine
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), fmt.Sprintf("2 worker processes of %d threads each run at once", req.Threads)) {
		t.Errorf("the log of a crowded run: %s", logs.String())
	}
	hung := fmt.Errorf("learner (attempt 1): %w", &worker.ProcessError{Reason: worker.ReasonHung, Detail: "no heartbeat for 30s"})
	silent := &worker.NoAnswerError{Path: "tolaria-worker", After: 20 * time.Second}
	other := errors.New("learner (attempt 1): the loss became NaN")
	for _, e := range []error{hung, silent} {
		got := run.crowd.explain(e)
		if !errors.Is(got, e) || !strings.Contains(got.Error(), "which alone makes workers start late or miss heartbeats") {
			t.Errorf("%v explained as %v", e, got)
		}
	}
	if got := run.crowd.explain(other); got != other {
		t.Errorf("a failure crowding does not cause explained as %v", got)
	}

	logs.Reset()
	fits := rlRequest(t)
	fits.Logger = req.Logger
	run2, err := Prepare(fits, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer run2.Close()
	if strings.Contains(logs.String(), "worker processes") || run2.crowd.explain(hung) != hung {
		t.Errorf("a run of two agents was taken for crowded: %s", logs.String())
	}
}

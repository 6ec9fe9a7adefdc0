package rl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/internal/atomicfile"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

// secondInterrupt is a run that a test stops as tolaria does on a first
// and then a second signal: cancel, then kill every worker process
// (worker.Stopper, as coordinator.StopOnSignal does).
type secondInterrupt struct {
	ctx     context.Context
	cancel  context.CancelFunc
	workers *worker.Stopper

	mu          sync.Mutex
	past        map[int]bool
	trained     chan struct{}   // every agent past 1000 environment steps, its learner training
	interrupted []chan struct{} // agent i's is closed once it is reported interrupted
	told        map[int]bool
}

func newSecondInterrupt(t *testing.T, req *Request) *secondInterrupt {
	s := &secondInterrupt{workers: worker.NewStopper(), past: map[int]bool{}, trained: make(chan struct{}), told: map[int]bool{}}
	s.ctx, s.cancel = context.WithCancel(worker.WithStopper(context.Background(), s.workers))
	t.Cleanup(s.cancel)
	n := req.Config.NumAgents
	for range n {
		s.interrupted = append(s.interrupted, make(chan struct{}))
	}
	req.Report = func(st AgentStatus) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if st.EnvSteps > 1000 && st.LearnerSteps > 0 && !s.past[st.Agent] {
			if s.past[st.Agent] = true; len(s.past) == n {
				close(s.trained)
			}
		}
		if st.State == AgentInterrupted && !s.told[st.Agent] {
			s.told[st.Agent] = true
			close(s.interrupted[st.Agent])
		}
	}
	return s
}

// run runs the prepared run in the background; wait gives its end.
func (s *secondInterrupt) run(t *testing.T, req Request) (wait func() Summary) {
	t.Helper()
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	type end struct {
		sum Summary
		err error
	}
	ended := make(chan end, 1)
	go func() {
		sum, err := run.Run(s.ctx)
		ended <- end{sum, errors.Join(err, run.Close())}
	}()
	select {
	case <-s.trained:
	case e := <-ended:
		t.Fatalf("the run ended before every agent trained: %+v, %v", e.sum, e.err)
	}
	return func() Summary {
		e := <-ended
		if e.err != nil {
			t.Fatal(e.err)
		}
		return e.sum
	}
}

// halfPID is the pid of the last worker of role that agent i's events
// name.
func halfPID(t *testing.T, runDir string, i int, role string) int {
	t.Helper()
	pid := 0
	_ = readEvents(runDir, i, func(e trainer.Event) {
		if r, _ := e.Fields["role"].(string); e.Kind == EventWorker && r == role {
			pid = eventFields(e.Fields).int("pid")
		}
	})
	if pid == 0 {
		t.Fatalf("agent %d's events name no %s worker", i, role)
	}
	return pid
}

// freeze stops process pid (SIGSTOP) and waits until every thread of it
// has stopped, so that it can take no message, a cancel included: only
// a kill ends it.
func freeze(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	for deadline := time.Now().Add(time.Minute); !allThreadsStopped(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// allThreadsStopped reads every thread's state of process pid from /proc.
func allThreadsStopped(pid int) bool {
	stats, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, path := range stats {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		s := string(raw)
		// pid (comm) state ...: comm may hold spaces.
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) == 0 || f[0] != "T" {
			return false
		}
	}
	return len(stats) > 0
}

// plantTemp leaves in dir the temporary file a write of name killed
// midway leaves (atomicfile's naming), and returns its path.
func plantTemp(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, "."+name+"8098079131379283811")
	if !atomicfile.IsTemp(filepath.Base(path)) {
		t.Fatalf("%s is not named as atomicfile names its temporary files", path)
	}
	writeFile(t, path, []byte("cut short"))
	return path
}

func readJSON(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// agentStarts are agent i's start events: whether each resumed, and from
// which learner step.
func agentStarts(t *testing.T, runDir string, i int) (resumed []bool, steps []int) {
	t.Helper()
	err := readEvents(runDir, i, func(e trainer.Event) {
		if e.Kind == EventAgentStart {
			r, _ := e.Fields["resume"].(bool)
			resumed = append(resumed, r)
			steps = append(steps, eventFields(e.Fields).int("learner_step"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return resumed, steps
}

// TestRLSecondInterruptSaysWhatWasSaved: after a first interrupt agent
// 0's learner checkpoints and its buffer is saved; agent 1's learner,
// frozen, cannot, and the second interrupt kills it. Each agent's
// summary and the run's last words say what was saved for it and what
// --resume does (agent 1 starts again from step 0, and no buffer is
// saved for it), never that every learner checkpointed; no temporary
// file is left; and --resume takes each agent where that said.
func TestRLSecondInterruptSaysWhatWasSaved(t *testing.T) {
	req := rlRequest(t)
	req.Config.TotalSteps = 8000
	req.ConfigYAML = req.Config.YAML()
	s := newSecondInterrupt(t, &req)
	wait := s.run(t, req)
	freeze(t, halfPID(t, req.Dir, 1, jobserver.RoleLearner))
	temp := plantTemp(t, AgentDir(req.Dir, 1), trainer.CheckpointFile)
	s.cancel()
	<-s.interrupted[0] // its learner checkpointed and its buffer is saved
	s.workers.KillAll()
	sum := wait()

	a0, a1 := sum.Agents[0], sum.Agents[1]
	if a0.State != AgentInterrupted || a0.Saved == nil || !a0.Saved.Checkpointed || !a0.Saved.Buffer || a0.Saved.CheckpointStep <= 0 {
		t.Fatalf("agent 0, stopped by the first interrupt: %+v, saved %+v; want its checkpoint and buffer saved", a0, a0.Saved)
	}
	if a1.State != AgentInterrupted || a1.Saved == nil || a1.Saved.Checkpointed || a1.Saved.Buffer || a1.Saved.CheckpointStep != -1 {
		t.Fatalf("agent 1, killed by the second: %+v, saved %+v; want an interrupted agent with nothing saved", a1, a1.Saved)
	}
	for _, f := range []string{trainer.CheckpointFile, ReplayFile} {
		if !exists(filepath.Join(AgentDir(req.Dir, 0), f)) {
			t.Errorf("agent 0 has no %s", f)
		}
		if exists(filepath.Join(AgentDir(req.Dir, 1), f)) {
			t.Errorf("agent 1 has a %s, though its learner never checkpointed", f)
		}
	}
	if exists(temp) {
		t.Errorf("the temporary file of a cut-short write %s is left", temp)
	}
	note := interruptedNote(sum)
	t.Log(note)
	for _, want := range []string{
		fmt.Sprintf("agent 0: the learner checkpointed at learner step %d and the replay buffer was saved", a0.Saved.CheckpointStep),
		"agent 1: the learner did not checkpoint and has no earlier checkpoint, so no replay buffer was saved: --resume starts the agent again from step 0",
		"continue with tolaria rl --resume --run-dir " + req.Dir,
	} {
		if !strings.Contains(note, want) {
			t.Errorf("the last words %q do not say %q", note, want)
		}
	}
	if strings.Contains(note, "learners checkpointed") {
		t.Errorf("the last words %q say every learner checkpointed", note)
	}
	if !strings.Contains(a1.Reason, "--resume starts the agent again from step 0") {
		t.Errorf("agent 1's reason %q does not say what --resume does", a1.Reason)
	}
	var onDisk Summary
	if err := readJSON(filepath.Join(req.Dir, "summary.json"), &onDisk); err != nil || !onDisk.Interrupted || onDisk.Agents[1].Saved == nil || onDisk.Agents[1].Saved.CheckpointStep != -1 {
		t.Fatalf("summary.json: %+v, %v", onDisk, err)
	}

	req.Report, req.Resume = nil, true
	resumed := runToEnd(t, req)
	for i, a := range resumed.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 8000 {
			t.Errorf("agent %d resumed: %+v", i, a)
		}
	}
	if r, at := agentStarts(t, req.Dir, 0); len(r) != 2 || !r[1] || at[1] != a0.Saved.CheckpointStep {
		t.Errorf("agent 0's starts: resumed %v at learner steps %v; want a second from its checkpoint, step %d", r, at, a0.Saved.CheckpointStep)
	}
	if r, _ := agentStarts(t, req.Dir, 1); len(r) != 1 || r[0] {
		t.Errorf("agent 1's starts since its earlier events were set aside: resumed %v; want one, from step 0", r)
	}
}

// TestSharedSecondInterruptSaysWhatWasSaved: a run of agents in one
// world (Forage) stopped at once, with its shared actor and every learner
// killed before they saved anything, still ends as a run does: every
// agent interrupted with nothing saved, summary.json written, the world
// said not to be saved as it stopped, no temporary file of the world's
// (or a checkpoint's) save left; --resume starts the agents again and
// the world from its last periodic save.
func TestSharedSecondInterruptSaysWhatWasSaved(t *testing.T) {
	req := sharedRequest(t, 6000)
	s := newSecondInterrupt(t, &req)
	wait := s.run(t, req)
	freeze(t, sharedActorPID(req.Dir))
	for i := range 2 {
		freeze(t, halfPID(t, req.Dir, i, jobserver.RoleLearner))
	}
	temps := []string{plantTemp(t, req.Dir, WorldFile), plantTemp(t, AgentDir(req.Dir, 0), trainer.CheckpointFile), plantTemp(t, AgentDir(req.Dir, 1), ReplayFile)}
	s.cancel()
	s.workers.KillAll()
	sum := wait()

	for i, a := range sum.Agents {
		if a.State != AgentInterrupted || a.Saved == nil || a.Saved.Checkpointed || a.Saved.Buffer || a.Saved.CheckpointStep != -1 {
			t.Errorf("agent %d: %+v, saved %+v; want an interrupted agent with nothing saved", i, a, a.Saved)
		}
		for _, f := range []string{trainer.CheckpointFile, ReplayFile} {
			if exists(filepath.Join(AgentDir(req.Dir, i), f)) {
				t.Errorf("agent %d has a %s, though its learner never checkpointed", i, f)
			}
		}
	}
	if sum.WorldSaved == nil || *sum.WorldSaved {
		t.Errorf("world_saved %v; want false: the shared actor was killed", sum.WorldSaved)
	}
	if !exists(filepath.Join(req.Dir, WorldFile)) {
		t.Fatalf("no %s: the shared actor saves the worlds every 50 vector steps", WorldFile)
	}
	for _, temp := range temps {
		if exists(temp) {
			t.Errorf("the temporary file of a cut-short write %s is left", temp)
		}
	}
	note := interruptedNote(sum)
	t.Log(note)
	for _, want := range []string{
		"agents 0, 1: the learner did not checkpoint and has no earlier checkpoint, so no replay buffer was saved: --resume starts the agent again from step 0",
		"the shared world was not saved as it stopped: --resume goes on from its last periodic save (world.json)",
		"continue with tolaria rl --resume --run-dir " + req.Dir,
	} {
		if !strings.Contains(note, want) {
			t.Errorf("the last words %q do not say %q", note, want)
		}
	}
	var onDisk Summary
	if err := readJSON(filepath.Join(req.Dir, "summary.json"), &onDisk); err != nil || !onDisk.Interrupted || onDisk.WorldSaved == nil || *onDisk.WorldSaved {
		t.Fatalf("summary.json: %+v, %v", onDisk, err)
	}

	req.Report, req.Resume = nil, true
	resumed := runToEnd(t, req)
	for i, a := range resumed.Agents {
		if a.State != AgentSucceeded || a.EnvSteps != 6000 {
			t.Errorf("agent %d resumed: %+v", i, a)
		}
	}
	if restored, _ := worldEvents(t, req.Dir, 0); len(restored) == 0 || !restored[len(restored)-1] {
		t.Errorf("agent 0's world events %v: the resumed shared actor did not go on from the saved worlds", restored)
	}
}

// TestInterruptedNoteWhenAllWasSaved: when every learner checkpointed and
// every buffer was saved, the last words say so in one phrase.
func TestInterruptedNoteWhenAllWasSaved(t *testing.T) {
	saved := &AgentSaved{CheckpointStep: 900, Checkpointed: true, Buffer: true}
	world := true
	sum := Summary{Dir: "runs/x", Interrupted: true, WorldSaved: &world, Agents: []AgentStatus{
		{Agent: 0, State: AgentInterrupted, Saved: saved}, {Agent: 1, State: AgentSucceeded}, {Agent: 2, State: AgentInterrupted, Saved: saved}}}
	want := "interrupted: the learners of agents 0, 2 checkpointed and their replay buffers were saved; agent 1 had finished; the shared world was saved; continue with tolaria rl --resume --run-dir runs/x"
	if got := interruptedNote(sum); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	sum.Agents[2].Saved = &AgentSaved{CheckpointStep: 400, Buffer: true}
	sum.Agents = append(sum.Agents, AgentStatus{Agent: 3, State: AgentFailed, Saved: &AgentSaved{CheckpointStep: -1}})
	got := interruptedNote(sum)
	for _, w := range []string{"agent 0: the learner checkpointed at learner step 900", "agent 1 had finished",
		"agent 2: the learner did not checkpoint; its earlier checkpoint (learner step 400) is kept and the replay buffer was saved: --resume goes on from learner step 400",
		"agent 3: failed; the learner did not checkpoint and has no earlier checkpoint"} {
		if !strings.Contains(got, w) {
			t.Errorf("%q does not say %q", got, w)
		}
	}
}

package dqn

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/rl/env"
	"github.com/tolaria-ml/tolaria/rl/shm"
)

// The environment of a half's process (TestLockstepHalfProcess): its role
// (actor or learner), and the job as JSON.
const (
	lockstepRoleEnv = "TOLARIA_TEST_LOCKSTEP_ROLE"
	lockstepJobEnv  = "TOLARIA_TEST_LOCKSTEP_JOB"
)

// lockstepJob is what a half's process is asked to do.
type lockstepJob struct {
	Config Config
	Agent  int
	Memory string // the agent's memory, /proc/<pid>/fd/<n> of the test
	Dir    string // the learner's checkpoint and the actor's episodes go there
}

// lockstepActorLog is the actor's episodes and evaluations, as its
// process writes them into the agent's directory.
type lockstepActorLog struct {
	Steps    int
	Episodes []EpisodeRecord
	Evals    []EvalResult
}

// TestLockstepProcessesEqualSequential: two agents, each an actor process
// and a learner process (this test binary, TestLockstepHalfProcess) that
// meet only in the agent's memory as tolaria-worker's halves do, run in
// lockstep and end with the same bits as RunSequential's loop in this
// process: the learners' checkpoints and the memories byte for byte, and
// the same episodes and evaluations. It runs on lockstepDevice's device:
// the CPU, or, built with -tags cuda, CUDA (the emulated driver where
// LD_LIBRARY_PATH selects it), graphs on.
func TestLockstepProcessesEqualSequential(t *testing.T) {
	dev, name := lockstepDevice(t)
	defer dev.Close()
	cfg := lockstepTestConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seqDir, procDir := t.TempDir(), t.TempDir()
	seq, err := RunSequential(ctx, dev, cfg, SequentialOptions{Graphs: true, Dir: seqDir})
	must(t, err)
	spec, err := cfg.Spec()
	must(t, err)
	type agentProcs struct {
		mem          *shm.Memory
		dir          string
		actor, learn *exec.Cmd
	}
	agents := make([]agentProcs, cfg.NumAgents)
	for i := range agents {
		mem, err := shm.CreateShared(fmt.Sprintf("tolaria-lockstep-procs-%d", i), cfg.Layout(spec))
		must(t, err)
		defer mem.Close()
		dir := filepath.Join(procDir, fmt.Sprintf(SequentialAgentDir, i))
		must(t, os.MkdirAll(dir, 0o755))
		job, err := json.Marshal(lockstepJob{Config: cfg, Agent: i, Memory: mem.Path(), Dir: dir})
		must(t, err)
		start := func(role string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestLockstepHalfProcess$", "-test.count", "1")
			cmd.Env = append(os.Environ(), lockstepRoleEnv+"="+role, lockstepJobEnv+"="+string(job))
			out, err := os.Create(filepath.Join(dir, role+".log"))
			must(t, err)
			defer out.Close()
			cmd.Stdout, cmd.Stderr = out, out
			must(t, cmd.Start())
			return cmd
		}
		agents[i] = agentProcs{mem: mem, dir: dir, learn: start("learner"), actor: start("actor")}
	}
	for i, a := range agents {
		for _, c := range []*exec.Cmd{a.actor, a.learn} {
			if err := c.Wait(); err != nil {
				role := "actor"
				if c == a.learn {
					role = "learner"
				}
				log, _ := os.ReadFile(filepath.Join(a.dir, role+".log"))
				t.Fatalf("agent %d's %s process: %v\n%s", i, role, err, log)
			}
		}
		// Both halves have ended: the memory is saved as the coordinator
		// saves it.
		must(t, a.mem.Save(filepath.Join(a.dir, SavedBufferFile), shm.Owner{Agent: i, Config: cfg.Digest()}))
	}
	for i, a := range agents {
		raw, err := os.ReadFile(filepath.Join(a.dir, "actor.json"))
		must(t, err)
		var got lockstepActorLog
		must(t, json.Unmarshal(raw, &got))
		s := seq[i]
		if got.Steps != s.EnvSteps || s.EnvSteps != cfg.TotalSteps {
			t.Errorf("agent %d on %s: the actor process took %d environment steps, the loop %d; want %d", i, name, got.Steps, s.EnvSteps, cfg.TotalSteps)
		}
		if len(s.Episodes) == 0 || !reflect.DeepEqual(got.Episodes, s.Episodes) {
			t.Errorf("agent %d on %s: the episodes differ: processes %d, loop %d", i, name, len(got.Episodes), len(s.Episodes))
		}
		if !sameEvals(got.Evals, s.EvalResults) || len(s.EvalResults) == 0 {
			t.Errorf("agent %d on %s: evaluations differ: processes %+v, loop %+v", i, name, got.Evals, s.EvalResults)
		}
		if s.Fallbacks != 0 {
			t.Errorf("agent %d on %s: %d of the loop's learner steps ran eagerly", i, name, s.Fallbacks)
		}
		compareAgentFiles(t, i, filepath.Join(seqDir, fmt.Sprintf(SequentialAgentDir, i)), a.dir)
	}
}

// TestLockstepHalfProcess is one half of an agent when the environment
// says so (TestLockstepProcessesEqualSequential starts it), as
// tolaria-worker serves one: the actor acts, sets the stop flag once the
// agent's steps are done and writes its episodes; the learner trains and
// writes its checkpoint.
func TestLockstepHalfProcess(t *testing.T) {
	role := os.Getenv(lockstepRoleEnv)
	if role == "" {
		t.Skip("a half's process of TestLockstepProcessesEqualSequential")
	}
	var job lockstepJob
	must(t, json.Unmarshal([]byte(os.Getenv(lockstepJobEnv)), &job))
	cfg := job.Config
	spec, err := cfg.Spec()
	must(t, err)
	mem, err := shm.Open(job.Memory, cfg.Layout(spec))
	must(t, err)
	defer mem.Close()
	dev, _ := lockstepDevice(t)
	defer dev.Close()
	shared := NewShared()
	defer shared.Pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if role == "learner" {
		l, err := NewLearner(dev, shared, mem, cfg, job.Agent, LearnerOptions{Graphs: true})
		must(t, err)
		defer l.Close()
		must(t, l.Capture())
		must(t, l.Run(ctx))
		must(t, l.Save(job.Dir, job.Agent))
		return
	}
	var log lockstepActorLog
	a, err := NewActor(dev, shared, mem, cfg, job.Agent, ActorOptions{Graphs: true,
		OnEpisode: func(e env.Episode, steps int) {
			log.Episodes = append(log.Episodes, EpisodeRecord{Return: e.Return, Length: e.Length, EnvSteps: steps})
		},
		OnEval: func(r EvalResult) { log.Evals = append(log.Evals, r) }})
	must(t, err)
	defer a.Close()
	must(t, a.Capture())
	err = a.Run(ctx)
	if a.Steps() >= cfg.TotalSteps {
		mem.Stop()
	}
	must(t, err)
	log.Steps = a.Steps()
	raw, err := json.Marshal(log)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(job.Dir, "actor.json"), raw, 0o644))
}

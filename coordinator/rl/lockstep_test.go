package rl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/rl/dqn"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestRLLockstepEqualsSequential: a run of two agents in lockstep, each
// agent's actor and learner in worker processes (this test binary), ends
// with the bits of dqn.RunSequential's loop in this process: each
// learner's checkpoint and each agent's replay.buf (kept at the end of a
// lockstep run) byte for byte, the episodes and the greedy evaluations
// its events record, its environment and learner steps.
func TestRLLockstepEqualsSequential(t *testing.T) {
	req := rlRequest(t)
	cfg := req.Config
	cfg.TotalSteps, cfg.LearningStarts, cfg.BufferCapacity, cfg.TargetUpdate = 1500, 305, 1000, 100
	cfg.EvalInterval, cfg.EvalEpisodes = 500, 10
	cfg.Lockstep, cfg.LockstepCollect, cfg.LockstepTrain = true, 20, 15
	req.Config, req.ConfigYAML, req.MaxLead = cfg, cfg.YAML(), 0
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := Prepare(req, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Run(ctx)
	if err := errors.Join(err, run.Close()); err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.Open(cpu.Config{Threads: 1}) // as each worker opens it (--threads 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	seqDir := t.TempDir()
	seq, err := dqn.RunSequential(ctx, dev, cfg, dqn.SequentialOptions{Graphs: true, Dir: seqDir})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range sum.Agents {
		s := seq[i]
		if a.State != AgentSucceeded || a.EnvSteps != s.EnvSteps || a.LearnerSteps != s.LearnerSteps || s.EnvSteps != cfg.TotalSteps {
			t.Errorf("agent %d: %s (%s) at %d environment and %d learner steps; the loop took %d and %d", i, a.State, a.Reason,
				a.EnvSteps, a.LearnerSteps, s.EnvSteps, s.LearnerSteps)
		}
		eps, err := ReadEpisodes(req.Dir, i)
		if err != nil || len(eps) == 0 || len(eps) != len(s.Episodes) {
			t.Errorf("agent %d: %d episodes in its events (%v), %d in the loop", i, len(eps), err, len(s.Episodes))
		} else {
			for j, e := range eps {
				if e != s.Episodes[j] {
					t.Errorf("agent %d: episode %d is %+v, in the loop %+v", i, j, e, s.Episodes[j])
					break
				}
			}
		}
		evals, err := ReadEvals(req.Dir, i)
		if err != nil || len(evals) != 3 || len(s.EvalResults) != 3 {
			t.Errorf("agent %d: evaluations %+v (%v), in the loop %d; want 3", i, evals, err, len(s.EvalResults))
		} else {
			for j, e := range evals {
				if w := s.EvalResults[j]; e.EnvSteps != w.EnvSteps || e.Version != w.Version || e.MeanReturn != w.MeanReturn {
					t.Errorf("agent %d: evaluation %d is %+v, in the loop %+v", i, j, e, w)
				}
			}
		}
		for _, f := range []string{trainer.CheckpointFile, ReplayFile} {
			got, errRun := os.ReadFile(filepath.Join(AgentDir(req.Dir, i), f))
			want, errSeq := os.ReadFile(filepath.Join(seqDir, fmt.Sprintf(dqn.SequentialAgentDir, i), f))
			if errRun != nil || errSeq != nil || !bytes.Equal(got, want) {
				t.Errorf("agent %d: the run's %s (%d bytes, %v) is not the loop's (%d bytes, %v)", i, f, len(got), errRun, len(want), errSeq)
			}
		}
	}
}

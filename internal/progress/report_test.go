package progress

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator"
	"github.com/tolaria-ml/tolaria/coordinator/eval"
	"github.com/tolaria-ml/tolaria/coordinator/rl"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/coordinator/sweep"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestTrainSummary(t *testing.T) {
	var b bytes.Buffer
	v := NewTrain(Streams{Stdout: &b, Stderr: io.Discard}, true, nil)
	v.Summary(trainer.Summary{Device: "cpu", Steps: 5, TestAccuracy: 0, EpochSeconds: nil}, true, "runs/x")
	if !strings.Contains(b.String(), "no evaluation yet") || strings.Contains(b.String(), "test accuracy 0.0000") {
		t.Errorf("a run stopped in its first epoch: %q", b.String())
	}
	b.Reset()
	v.Summary(trainer.Summary{Device: "cpu", Steps: 5, TestAccuracy: 0.9, TestLoss: 0.3, EpochSeconds: []float64{1}}, true, "runs/x")
	if !strings.Contains(b.String(), "test accuracy 0.9000, test loss 0.3000") || !strings.HasSuffix(b.String(), "run directory runs/x\n") {
		t.Errorf("a finished epoch: %q", b.String())
	}
	b.Reset()
	v.Summary(trainer.Summary{Device: "cpu", Steps: 5, TestLoss: 0.3, EpochSeconds: []float64{1}}, false, "runs/x")
	if strings.Contains(b.String(), "accuracy") {
		t.Errorf("a regression loss: %q", b.String())
	}
}

func TestTrainStopped(t *testing.T) {
	dir := t.TempDir()
	rd, err := rundir.Plan(dir, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	say := func(sum trainer.Summary, maxSteps int) string {
		var b bytes.Buffer
		NewTrain(Streams{Stdout: io.Discard, Stderr: &b}, true, nil).Stopped(rd, sum, false, maxSteps)
		return b.String()
	}
	// The same command is taken again in the same directory (see
	// rundir's TestRunDirOfARunStoppedBeforeItsFirstStepIsTakenAgain):
	// no other directory, nothing to remove.
	if got := say(trainer.Summary{Steps: 0}, 0); !strings.Contains(got, "nothing to resume") || !strings.Contains(got, "run the same command again to start the run over") ||
		strings.Contains(got, "checkpoint saved") || strings.Contains(got, "another --run-dir") || strings.Contains(got, "removing") {
		t.Errorf("stopped before the first step of a fresh run: %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, trainer.CheckpointFile), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sum      trainer.Summary
		maxSteps int
		want     string
	}{
		{trainer.Summary{Steps: 40, ResumedFromStep: 40}, 0, "tolaria: interrupted before any step ran; the checkpoint of step 40 is unchanged; continue with: tolaria train --resume"},
		{trainer.Summary{Steps: 12}, 0, "tolaria: interrupted after 12 steps; checkpoint saved; continue with: tolaria train --resume"},
		{trainer.Summary{Steps: 52, ResumedFromStep: 40}, 0, "tolaria: interrupted after 12 steps, 52 in all; checkpoint saved"},
		{trainer.Summary{Steps: 5}, 5, "tolaria: stopped after 5 steps (--max-steps 5); checkpoint saved; continue with: tolaria train --resume"},
		{trainer.Summary{Steps: 1}, 1, "tolaria: stopped after 1 step (--max-steps 1); checkpoint saved"},
		// --max-steps counts one start's steps, the summary the run's.
		{trainer.Summary{Steps: 8, ResumedFromStep: 5}, 3, "tolaria: stopped after 3 steps (--max-steps 3), 8 in all; checkpoint saved"},
	} {
		if got := say(c.sum, c.maxSteps); !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v, --max-steps %d:\n got %q\nwant %q...", c.sum, c.maxSteps, got, c.want)
		}
	}
}

// TestSweepResults: the trials in their order, ranked ones with their
// figure, the others with the first line of their reason, and where the
// results are.
func TestSweepResults(t *testing.T) {
	v := 0.91234
	var b bytes.Buffer
	NewSweep(Streams{Stdout: &b, Stderr: io.Discard}, nil).Results(sweep.Results{RankBy: "test_accuracy", Trials: []sweep.TrialResult{
		{Rank: 1, Name: "lr-0.1", State: sweep.TrialSucceeded, Value: &v},
		{Name: "a-much-longer-name", State: sweep.TrialFailed, Reason: "worker exited\nlog tail"},
	}}, "sweeps/x")
	want := "rank  trial               state        test_accuracy\n" +
		"1     lr-0.1              succeeded    0.9123\n" +
		"-     a-much-longer-name  failed       worker exited\n" +
		"results sweeps/x/results.json\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestRLSummary: best-100 only after a full window, greedy only after an
// evaluation, solved only when solved, and a reason under its agent.
func TestRLSummary(t *testing.T) {
	var b bytes.Buffer
	s := rl.Summary{Dir: "runs/rl", Env: "CartPole-v1", Agents: []rl.AgentStatus{
		{Agent: 0, State: rl.AgentSucceeded, Episodes: 150, MeanReturn: 480, BestMeanReturn: 490, Evaluations: 2, BestEvalMeanReturn: 500, EnvSteps: 9000, SolvedAt: 8000},
		{Agent: 1, State: rl.AgentFailed, Episodes: 10, MeanReturn: 20, EnvSteps: 300, SolvedAt: -1, Reason: "learner: NaN loss\nmore"},
	}}
	s.Goal.Return, s.Goal.Episodes = 475, 100
	NewRL(Streams{Stdout: &b, Stderr: io.Discard}, 0, 0, "").Summary(s)
	got := b.String()
	for _, want := range []string{
		"env CartPole-v1: the goal is a greedy mean return of at least 475 over 100 episodes\n",
		"0      succeeded         150      480.0      490.0        500.0       9000  8000\n",
		"1      failed             10       20.0          -            -        300  -\n       learner: NaN loss\n",
		"summary runs/rl/summary.json\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary lacks %q:\n%s", want, got)
		}
	}
}

// TestRLSummaryScriptedBaseline: a world with no goal of its own names
// the scripted baseline each agent must beat instead.
func TestRLSummaryScriptedBaseline(t *testing.T) {
	var b bytes.Buffer
	NewRL(Streams{Stdout: &b, Stderr: io.Discard}, 0, 0, "").Summary(rl.Summary{Dir: "runs/rl", Env: "Forage", ScriptedBaseline: []float64{30.48, 28.94},
		Agents: []rl.AgentStatus{{Agent: 0, State: rl.AgentSucceeded, SolvedAt: -1}}})
	want := "env Forage: no goal of its own; the agents must beat the scripted baseline, whose mean return over the greedy evaluation's episodes is 30.48 (agent 0), 28.94 (agent 1)\n"
	if got := b.String(); !strings.HasPrefix(got, want) {
		t.Errorf("the summary starts\n%s\nwant\n%s", got, want)
	}
}

// TestEvalResult: a complete result's figures and files; a partial one's
// figures marked partial; another failure nothing. A token model's
// accuracy is shown at five positions of the context.
func TestEvalResult(t *testing.T) {
	rep := &eval.Report{Accuracy: 0.5, Loss: 1.25, Samples: 100, Split: "test", Step: 7, Workers: 2, Predictions: "predictions.parquet"}
	var b bytes.Buffer
	v := NewEval(Streams{Stdout: &b, Stderr: io.Discard}, "runs/x", nil)
	v.Result(rep, nil, "runs/x")
	if want := "accuracy 0.5000  loss 1.250000  (100 examples, test split, checkpoint step 7, 2 workers)\nresults runs/x/eval.json\npredictions runs/x/predictions.parquet\n"; b.String() != want {
		t.Errorf("complete:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	v.Result(rep, &eval.ShardsFailedError{Missing: []int{1}, Partial: "runs/x/eval.partial.json"}, "runs/x")
	if got := b.String(); !strings.HasPrefix(got, "partial: accuracy 0.5000") || !strings.HasSuffix(got, "partial results runs/x/eval.partial.json\n") {
		t.Errorf("partial:\n%s", got)
	}
	b.Reset()
	v.Result(rep, errors.New("the merge failed"), "runs/x")
	if b.Len() != 0 {
		t.Errorf("a failure printed %q", b.String())
	}
	seq := &eval.Report{Accuracy: 0.5, Loss: 1, Samples: 3, Split: "test", Workers: 1, Sequence: &eval.SequenceFigures{
		Positions: 9, Tokens: 27, BitsPerByte: 1.44, PositionAccuracy: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}}}
	b.Reset()
	report(&b, seq)
	if want := "accuracy by position (of 9): 0: 0.0000  2: 0.2000  4: 0.4000  6: 0.6000  8: 0.8000\n"; !strings.HasSuffix(b.String(), want) || !strings.Contains(b.String(), "(3 windows, 27 tokens, test split, checkpoint step 0, 1 worker)") {
		t.Errorf("a token model's report:\n%s", b.String())
	}
}

// TestGPUs: a table, a sentence when there is none, and JSON whose list
// is never null.
func TestGPUs(t *testing.T) {
	var b bytes.Buffer
	if err := GPUs(&b, nil, false); err != nil || !strings.HasPrefix(b.String(), "no GPU") {
		t.Errorf("none: %q %v", b.String(), err)
	}
	b.Reset()
	if err := GPUs(&b, nil, true); err != nil || b.String() != "{\n  \"gpus\": []\n}\n" {
		t.Errorf("none as JSON: %q %v", b.String(), err)
	}
	b.Reset()
	gpus := []coordinator.GPU{{Ordinal: 0, Name: "H100", PCIBusID: "0000:01:00.0", ComputeCapability: "9.0", TotalBytes: 80 << 30, FreeBytes: 79 << 30, Usable: true},
		{Ordinal: 1, Name: "K80", ComputeCapability: "3.7", Reason: "compute capability below 8.0"}}
	if err := GPUs(&b, gpus, false); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.Contains(got, "cuda:0  H100") || !strings.Contains(got, "80 GiB") || !strings.Contains(got, "no: compute capability below 8.0") {
		t.Errorf("table:\n%s", got)
	}
}

// TestResumeHintPastesIntoAShell: the command a stopped run prints to
// continue it reads back, in sh, as the words it is made of, whatever
// the run directory's name holds.
func TestResumeHintPastesIntoAShell(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my run <1>")
	rd, err := rundir.Plan(dir, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	NewTrain(Streams{Stdout: io.Discard, Stderr: &b}, true, nil).Stopped(rd, trainer.Summary{Steps: 3}, true, 0)
	_, command, ok := strings.Cut(strings.TrimSpace(b.String()), "continue with: ")
	if !ok {
		t.Fatalf("no command to continue with: %q", b.String())
	}
	out, err := exec.Command("sh", "-c", `for w in `+command+`; do printf '%s\n' "$w"; done`).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", command, err)
	}
	if got, want := string(out), "tolaria\ntrain\n--resume\n--run-dir\n"+rd.Path()+"\n"; got != want {
		t.Errorf("sh reads %q as\n%s\nwant\n%s", command, got, want)
	}
}

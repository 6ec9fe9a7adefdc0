package sweep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/coordinator/rundir"
	"github.com/tolaria-ml/tolaria/internal/shellword"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestABusySweepDirectoryIsSaidSoFirst: a sweep records itself in its
// lock file, and a new sweep or a --resume given the directory while it
// runs is told that it is in use and by whom, not that it holds a sweep
// to resume (which would be refused in turn); the refused ones leave the
// lock file as it was.
func TestABusySweepDirectoryIsSaidSoFirst(t *testing.T) {
	ctx := context.Background()
	cfg := sweepConfig(t, testSweep)
	// Prepared, it holds the directory and its results.json: a sweep in
	// its directory, as one that runs.
	held, err := Prepare(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	lock := filepath.Join(cfg.Dir, sweepLock)
	holder := fmt.Sprintf("pid %d, tolaria sweep", os.Getpid())
	if raw, _ := os.ReadFile(lock); string(raw) != holder {
		t.Errorf("the lock file of a running sweep says %q, want %q", raw, holder)
	}
	want := fmt.Sprintf("sweep_dir: %s is in use by another tolaria (%s); wait for it or choose another sweep_dir", cfg.Dir, holder)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, refusal.ErrConfig) || !errors.Is(err, rundir.ErrBusy) || err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "holds a sweep") {
			t.Errorf("%s in a running sweep's directory: got %v, want refusal.ErrConfig and rundir.ErrBusy with %q", what, err, want)
		}
	}
	_, err = Prepare(ctx, cfg)
	refused("a new sweep", err)
	resume := cfg
	resume.Resume, resume.Sweep = true, nil
	refused("reading the sweep to resume", resume.Load("", DefaultMaxTrials, false))
	resume.Sweep = cfg.Sweep
	_, err = Prepare(ctx, resume)
	refused("resuming it", err)
	if raw, _ := os.ReadFile(lock); string(raw) != holder {
		t.Errorf("refused sweeps left the lock file saying %q, want %q", raw, holder)
	}
}

// TestARefusedResumeLeavesTheLockFileAsItWas: a resume refused once it
// holds the directory (every trial succeeded) puts back what the lock
// file said.
func TestARefusedResumeLeavesTheLockFileAsItWas(t *testing.T) {
	cfg := sweepConfig(t, testSweep)
	s, err := Prepare(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	res := readResults(t, cfg.Dir)
	for i := range res.Trials {
		res.Trials[i].State = TrialSucceeded
	}
	if err := res.write(cfg.Dir); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(cfg.Dir, sweepLock)
	const earlier = "pid 1, tolaria sweep"
	if err := os.WriteFile(lock, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(context.Background(), resumeConfig(t, cfg)); !errors.Is(err, ErrNothingToResume) {
		t.Fatalf("resuming a finished sweep: %v", err)
	}
	if raw, _ := os.ReadFile(lock); string(raw) != earlier {
		t.Errorf("a refused resume left the lock file saying %q, want %q", raw, earlier)
	}
}

// oneTrialSweep is smallBase with one trial: 8 steps an epoch, 16 in all.
const oneTrialSweep = smallBase + `trials:
  - {name: a, lr: 0.003}
`

// resumeWithSpoiledCheckpoint runs cfg's one trial until its worker fails
// at step 10, after its first epoch's checkpoint, has spoil change that
// checkpoint, and resumes the sweep with 2 retries: the trial's run
// directory and its result.
func resumeWithSpoiledCheckpoint(t *testing.T, cfg Config, spoil func(ckpt string)) (string, TrialResult) {
	t.Helper()
	ctx := context.Background()
	t.Setenv(jobserver.FaultEnv, "step=10,exit=7,run=a")
	first, _ := runSweep(t, ctx, cfg)
	run := first.Trials[0].RunDir
	if first.Trials[0].State != TrialFailed {
		t.Fatalf("trial a, its worker failing at step 10: %+v", first.Trials[0])
	}
	spoil(filepath.Join(run, trainer.CheckpointFile))
	t.Setenv(jobserver.FaultEnv, "")
	resume := resumeConfig(t, cfg)
	resume.Retries = 2
	res, _ := runSweep(t, ctx, resume)
	return run, res.Trials[0]
}

// TestADamagedTrialCheckpointSaysHowToStartTheTrialOver: a trial whose
// checkpoint is damaged fails on --resume with advice a sweep can follow
// (remove the trial's run directory), not tolaria train's (another
// --run-dir), and spends no retry on a failure that repeats; once its
// run directory is removed, the next --resume warns that the trial starts
// over and runs it from step 0.
func TestADamagedTrialCheckpointSaysHowToStartTheTrialOver(t *testing.T) {
	cfg := sweepConfig(t, oneTrialSweep)
	run, a := resumeWithSpoiledCheckpoint(t, cfg, func(ckpt string) {
		if err := os.WriteFile(ckpt, []byte("not a checkpoint"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if a.State != TrialFailed || a.Attempts != 2 {
		t.Errorf("a trial whose checkpoint is damaged, resumed with 2 retries: %s after %d attempts, want failed after 2 (1 before, 1 now: the failure repeats)", a.State, a.Attempts)
	}
	for _, want := range []string{"checkpoint refused", "mv " + shellword.Quote(run) + " " + shellword.Quote(run+".damaged"),
		"tolaria sweep --resume --sweep-dir " + shellword.Quote(cfg.Dir) + " with the flags it ran with", "starts again from step 0",
		"rm -r " + shellword.Quote(run) + " instead discards its checkpoint, worker.log and events.jsonl"} {
		if !strings.Contains(a.Reason, want) {
			t.Errorf("the failure's reason does not say %q: %s", want, a.Reason)
		}
	}
	if strings.Contains(a.Reason, "--run-dir") {
		t.Errorf("the failure's reason gives tolaria train's advice: %s", a.Reason)
	}

	// Its advice holds: its run directory moved aside, the trial starts
	// again from step 0, and the sweep says so.
	if err := os.Rename(run, run+".damaged"); err != nil {
		t.Fatal(err)
	}
	var (
		logs  bytes.Buffer
		logMu sync.Mutex
	)
	again := resumeConfig(t, cfg)
	again.Logger = slog.New(slog.NewTextHandler(&lockedWriter{mu: &logMu, w: &logs}, nil))
	res, _ := runSweep(t, context.Background(), again)
	a = res.Trials[0]
	if a.State != TrialSucceeded || a.Attempts != 3 || a.Summary == nil || a.Summary.ResumedFromStep != 0 || a.Summary.Steps != 16 {
		t.Fatalf("the trial, its run directory removed: %+v, summary %+v", a, a.Summary)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if want := fmt.Sprintf("trial a's run directory %s is gone; the trial starts over from step 0 (the sweep's journal records 2 earlier attempts at it)", run); !strings.Contains(logs.String(), want) {
		t.Errorf("the log does not warn %q:\n%s", want, logs.String())
	}
}

// TestAnUnreadTrialCheckpointIsRetried: a trial whose checkpoint could
// not be read (a directory in its place stands for EIO or a stale NFS
// handle: the file may be intact) keeps its retries, and its reason gives
// no advice to move or remove its run directory.
func TestAnUnreadTrialCheckpointIsRetried(t *testing.T) {
	cfg := sweepConfig(t, oneTrialSweep)
	run, a := resumeWithSpoiledCheckpoint(t, cfg, func(ckpt string) {
		if err := os.Remove(ckpt); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(ckpt, 0o755); err != nil {
			t.Fatal(err)
		}
	})
	ckpt := filepath.Join(run, trainer.CheckpointFile)
	if a.State != TrialFailed || a.Attempts != 4 {
		t.Errorf("a trial whose checkpoint cannot be read, resumed with 2 retries: %s after %d attempts, want failed after 4 (1 before, 3 now)", a.State, a.Attempts)
	}
	if !strings.Contains(a.Reason, "checkpoint refused: "+ckpt) {
		t.Errorf("the failure's reason does not say the checkpoint was refused: %s", a.Reason)
	}
	for _, not := range []string{"rm -r", "mv ", "starts again from step 0"} {
		if strings.Contains(a.Reason, not) {
			t.Errorf("the failure's reason says %q of a checkpoint that may be intact: %s", not, a.Reason)
		}
	}
}

// TestCheckpointAdvice: each refusal of a damaged checkpoint, as the
// trainer words it, loses tolaria train's advice for the sweep's.
func TestCheckpointAdvice(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, trainer.CheckpointFile)
	for _, c := range []struct {
		name string
		file []byte
	}{
		{"empty", nil},
		{"another file", []byte("not a checkpoint at all")},
		{"cut short", []byte("TLCK")},
		{"another format", []byte("TOLARIA-CKPT\x00v9\nrest")},
	} {
		if err := os.WriteFile(path, c.file, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := trainer.LoadCheckpoint(path)
		if err == nil {
			t.Fatalf("%s: the trainer took the checkpoint", c.name)
		}
		got := checkpointAdvice(err.Error(), dir, "sweeps/s")
		if strings.Contains(got, "--run-dir") || strings.Contains(got, "resume it with") ||
			!strings.Contains(got, "(mv "+dir+" "+dir+".damaged) and resume the sweep as before (tolaria sweep --resume --sweep-dir sweeps/s with the flags it ran with)") {
			t.Errorf("%s: %s\nbecomes\n%s", c.name, err, got)
		}
		if want := "; or resume the sweep with the tolaria that wrote the checkpoint"; c.name == "another format" && !strings.HasSuffix(got, want) {
			t.Errorf("%s: %s\nbecomes\n%s\nwant it to end %q", c.name, err, got, want)
		}
	}
	// Advice it does not know is kept, the sweep's added.
	got := checkpointAdvice("checkpoint refused: x: the checkpoint is of step 20, past the run's 16 steps", "s/a", "s")
	if want := "past the run's 16 steps; in a sweep, move the trial's run directory aside (mv s/a s/a.damaged)"; !strings.Contains(got, want) {
		t.Errorf("got %s, want it to say %q", got, want)
	}
}

// TestWarnStartsOver: a resumed trial that had run and will start over
// from step 0 is warned about; one that never ran, or resumes from its
// checkpoint, or never kept one, is not.
func TestWarnStartsOver(t *testing.T) {
	trained := &trainer.Summary{Steps: 12, Interrupted: true}
	for _, c := range []struct {
		name       string
		row        TrialResult
		dir, ckpt  bool
		want, none string
	}{
		{name: "pending", row: TrialResult{State: TrialPending}},
		{name: "run directory gone", row: TrialResult{State: TrialInterrupted, Attempts: 2, Summary: trained},
			want: "run directory %s is gone; the trial starts over from step 0 (the sweep's journal records 2 earlier attempts at it)"},
		{name: "gone, a failure before", row: TrialResult{State: TrialFailed, Attempts: 1},
			want: "run directory %s is gone; the trial starts over from step 0 (the sweep's journal records 1 earlier attempt at it)"},
		{name: "checkpoint gone", row: TrialResult{State: TrialInterrupted, Attempts: 1, Summary: trained}, dir: true,
			want: "run directory %s has no checkpoint.tlck, though its last attempt trained 12 steps; the trial starts over from step 0"},
		{name: "resumes", row: TrialResult{State: TrialInterrupted, Attempts: 1, Summary: trained}, dir: true, ckpt: true},
		{name: "failed before its first checkpoint", row: TrialResult{State: TrialFailed, Attempts: 1}, dir: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := &Run{dir: t.TempDir(), log: slog.New(slog.NewTextHandler(&logs, nil))}
			run := filepath.Join(s.dir, "a")
			if c.dir {
				if err := os.Mkdir(run, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if c.ckpt {
				if err := os.WriteFile(filepath.Join(run, trainer.CheckpointFile), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s.warnStartsOver(Trial{Name: "a"}, c.row)
			switch {
			case c.want == "" && logs.Len() > 0:
				t.Errorf("warned: %s", logs.String())
			case c.want != "" && !strings.Contains(logs.String(), fmt.Sprintf("trial a's "+c.want, run)):
				t.Errorf("the log does not warn %q:\n%s", fmt.Sprintf(c.want, run), logs.String())
			}
		})
	}
}

// TestWarnStartsOverSaysWhy: a run directory that is a file, or that
// cannot be looked at (here a name too long for the system), is not said
// to be gone: the warning says what was found.
func TestWarnStartsOverSaysWhy(t *testing.T) {
	row := TrialResult{State: TrialInterrupted, Attempts: 1, Summary: &trainer.Summary{Steps: 12}}
	long := strings.Repeat("a", 300)
	for _, c := range []struct {
		name, trial, want string
		file              bool
	}{
		{"a file", "a", "is a file, not a directory; the trial starts over from step 0", true},
		{"not looked at", long, "cannot be looked at (stat ", false},
	} {
		var logs bytes.Buffer
		s := &Run{dir: t.TempDir(), log: slog.New(slog.NewTextHandler(&logs, nil))}
		run := filepath.Join(s.dir, c.trial)
		if c.file {
			if err := os.WriteFile(run, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s.warnStartsOver(Trial{Name: c.trial}, row)
		if !strings.Contains(logs.String(), run+" "+c.want) || strings.Contains(logs.String(), "is gone") {
			t.Errorf("%s: the log does not warn %q:\n%s", c.name, c.want, logs.String())
		}
	}
	var logs bytes.Buffer
	s := &Run{dir: t.TempDir(), log: slog.New(slog.NewTextHandler(&logs, nil))}
	s.warnStartsOver(Trial{Name: long}, row)
	if !strings.Contains(logs.String(), "file name too long") {
		t.Errorf("the warning does not say why: %s", logs.String())
	}
}

// TestAResumedTrialsInterruptionSaysItsStepsAndTheRunsTotal: a resumed
// trial interrupted again says the steps it ran this time and its run's
// total, as tolaria train does.
func TestAResumedTrialsInterruptionSaysItsStepsAndTheRunsTotal(t *testing.T) {
	text := strings.Replace(testSweep, "epochs: 2", "epochs: 150", 1)
	cfg := sweepConfig(t, text)
	first := interruptSweep(t, cfg)
	for _, r := range first.Trials {
		if r.State == TrialInterrupted && r.Reason != fmt.Sprintf("interrupted after %s; checkpoint saved in %s", plural(r.Summary.Steps, "step"), r.RunDir) {
			t.Errorf("trial %s, interrupted on its first run: %s", r.Name, r.Reason)
		}
	}
	again := interruptSweep(t, resumeConfig(t, cfg))
	resumed := 0
	for _, r := range again.Trials {
		if r.State != TrialInterrupted || r.Summary == nil || r.Summary.ResumedFromStep == 0 {
			continue
		}
		resumed++
		s := r.Summary
		if want := fmt.Sprintf("interrupted after %d steps, %d in all; checkpoint saved in %s", s.Steps-s.ResumedFromStep, s.Steps, r.RunDir); r.Reason != want {
			t.Errorf("trial %s, resumed from step %d: reason %q, want %q", r.Name, s.ResumedFromStep, r.Reason, want)
		}
	}
	if resumed != 2 {
		t.Fatalf("%d resumed trials interrupted again, want 2: %+v", resumed, again.Trials)
	}
}

func TestStepsRun(t *testing.T) {
	for _, c := range []struct {
		sum  trainer.Summary
		want string
	}{
		{trainer.Summary{Steps: 12}, "12 steps"},
		{trainer.Summary{Steps: 1}, "1 step"},
		{trainer.Summary{Steps: 52, ResumedFromStep: 40}, "12 steps, 52 in all"},
		{trainer.Summary{Steps: 41, ResumedFromStep: 40}, "1 step, 41 in all"},
	} {
		if got := stepsRun(c.sum); got != c.want {
			t.Errorf("stepsRun(%d steps, resumed from %d) = %q, want %q", c.sum.Steps, c.sum.ResumedFromStep, got, c.want)
		}
	}
}

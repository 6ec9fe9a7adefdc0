package trainer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
	"github.com/tolaria-ml/tolaria/nn"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openCPU(t *testing.T) device.Device {
	t.Helper()
	d, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// newShared is a process's shared state for one test, closed when it ends.
func newShared(t *testing.T) *trainer.Shared {
	t.Helper()
	s := trainer.NewShared()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// synthetic draws one set and splits it, so train and test share classes.
func synthetic(t *testing.T, train, test int) (*data.Dataset, *data.Dataset) {
	t.Helper()
	ds, err := data.Synthetic(data.SyntheticConfig{N: train + test, Features: 16, Classes: 4, Seed: 1, Noise: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, b, err := ds.Split(train)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

// smallConfig is a run that takes well under a second.
func smallConfig(t *testing.T) trainer.Config {
	t.Helper()
	cfg := trainer.Config{
		Spec:      nn.Spec{Inputs: 16, Hidden: []int{32, 16}, Outputs: 4, Act: device.ActGELU, Loss: nn.LossCrossEntropy},
		Optimizer: nn.DefaultOptimizer(),
		Epochs:    3, BatchSize: 16, Seed: 7, Ragged: data.RaggedPad,
		EnableGraphs: true, WarmupBatches: 2, Slots: 4, Loaders: 2, LogEvery: 5, World: 1,
	}
	cfg.Train, cfg.Test = synthetic(t, 250, 70)
	steps, err := trainer.StepsPerEpoch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Optimizer.TotalSteps = cfg.Epochs * steps
	cfg.Optimizer.WarmupSteps = steps / 2
	return cfg
}

func run(t *testing.T, cfg trainer.Config) trainer.Summary {
	t.Helper()
	sum, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestGraphsMatchEager(t *testing.T) {
	cfg := smallConfig(t)
	g := run(t, cfg)
	cfg.EnableGraphs = false
	e := run(t, cfg)
	if !g.GraphEnabled || g.GraphReplays == 0 {
		t.Fatalf("graphs run did not replay: %+v", g)
	}
	if e.GraphEnabled || e.GraphReplays != 0 {
		t.Fatalf("eager run replayed: %+v", e)
	}
	if g.ParamsSHA256 != e.ParamsSHA256 {
		t.Fatalf("params differ: graphs %s eager %s", g.ParamsSHA256, e.ParamsSHA256)
	}
	if g.Steps != e.Steps || g.Steps != 3*16 {
		t.Fatalf("steps: graphs %d eager %d, want %d", g.Steps, e.Steps, 3*16)
	}
	if g.GraphReplays+g.EagerSteps != g.Steps || g.EagerSteps != cfg.WarmupBatches {
		t.Fatalf("replays %d + eager %d != steps %d (warm-up %d)", g.GraphReplays, g.EagerSteps, g.Steps, cfg.WarmupBatches)
	}
	if g.TestAccuracy < 0.5 {
		t.Fatalf("test accuracy %.3f on an easy synthetic set", g.TestAccuracy)
	}
}

func TestResumeMatchesUninterrupted(t *testing.T) {
	cfg := smallConfig(t)
	whole := run(t, cfg)

	cfg.RunDir = t.TempDir()
	cfg.MaxSteps = 21 // mid-epoch 2
	part := run(t, cfg)
	if !part.Interrupted || part.Steps != 21 {
		t.Fatalf("first part: interrupted=%v steps=%d", part.Interrupted, part.Steps)
	}
	cfg.MaxSteps = 0
	cfg.Resume = true
	rest := run(t, cfg)
	if rest.ParamsSHA256 != whole.ParamsSHA256 {
		t.Fatalf("resumed params %s != uninterrupted %s", rest.ParamsSHA256, whole.ParamsSHA256)
	}
	// The summary describes the whole run, not the last invocation: its
	// counters carry on, and the interrupted epoch's training loss covers
	// its steps from before the stop.
	if rest.ResumedFromStep != 21 || rest.Steps != whole.Steps {
		t.Fatalf("resumed from %d: %d steps in all, the uninterrupted run %d", rest.ResumedFromStep, rest.Steps, whole.Steps)
	}
	if rest.GraphReplays+rest.EagerSteps != rest.Steps || rest.GraphReplays <= part.GraphReplays {
		t.Fatalf("resumed run: %d replays + %d eager steps for %d steps (first part %d replays)",
			rest.GraphReplays, rest.EagerSteps, rest.Steps, part.GraphReplays)
	}
	if len(rest.EpochSeconds) != cfg.Epochs || rest.Captures <= part.Captures || rest.StageCopies <= part.StageCopies {
		t.Fatalf("resumed run: %d epoch times, %d captures (part %d), %d stage copies (part %d)",
			len(rest.EpochSeconds), rest.Captures, part.Captures, rest.StageCopies, part.StageCopies)
	}
	if rest.TrainLoss != whole.TrainLoss || rest.TrainAccuracy != whole.TrainAccuracy || rest.TestAccuracy != whole.TestAccuracy {
		t.Fatalf("resumed run: train loss %v acc %v test acc %v; uninterrupted %v %v %v",
			rest.TrainLoss, rest.TrainAccuracy, rest.TestAccuracy, whole.TrainLoss, whole.TrainAccuracy, whole.TestAccuracy)
	}
}

// A stop in the last epoch and a resume: the last epoch's training loss is
// over all its steps, as in a run never stopped.
func TestResumeInTheLastEpochKeepsItsLoss(t *testing.T) {
	cfg := smallConfig(t)
	whole := run(t, cfg)
	cfg.RunDir = t.TempDir()
	cfg.MaxSteps = 2*16 + 7
	run(t, cfg)
	cfg.MaxSteps, cfg.Resume = 0, true
	rest := run(t, cfg)
	if rest.TrainLoss != whole.TrainLoss || rest.ParamsSHA256 != whole.ParamsSHA256 {
		t.Fatalf("resumed in the last epoch: train loss %v, uninterrupted %v", rest.TrainLoss, whole.TrainLoss)
	}
}

func TestCheckpointRefusals(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir = t.TempDir()
	cfg.MaxSteps = 5
	run(t, cfg)
	path := filepath.Join(cfg.RunDir, trainer.CheckpointFile)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxSteps, cfg.Resume = 0, true
	other := cfg
	other.Spec.Hidden = []int{8}
	_, err = trainer.Run(context.Background(), openCPU(t), newShared(t), other)
	if !errors.Is(err, trainer.ErrCheckpoint) {
		t.Fatalf("resume with another model: %v", err)
	}
	damaged := append([]byte(nil), orig...)
	damaged[len(damaged)-3] ^= 0xff
	if err := os.WriteFile(path, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if !errors.Is(err, trainer.ErrCheckpoint) {
		t.Fatalf("resume from a damaged checkpoint: %v", err)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(damaged) {
		t.Fatal("a refused checkpoint was modified")
	}
}

func TestRaggedPolicies(t *testing.T) {
	base := smallConfig(t) // 250 examples, batch 16: 15 full batches and one of 10
	for _, c := range []struct {
		policy          data.Ragged
		steps, fallback int
	}{
		{data.RaggedPad, 16, 0},
		{data.RaggedDrop, 15, 0},
		{data.RaggedEager, 16, 1},
	} {
		t.Run(string(c.policy), func(t *testing.T) {
			cfg := base
			cfg.Ragged = c.policy
			steps, err := trainer.StepsPerEpoch(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if steps != c.steps {
				t.Fatalf("steps per epoch %d, want %d", steps, c.steps)
			}
			cfg.Optimizer.TotalSteps = cfg.Epochs * steps
			s := run(t, cfg)
			if got := s.Fallbacks[graphs.ReasonRaggedBatch]; got != c.fallback*cfg.Epochs {
				t.Fatalf("ragged fallbacks %d, want %d", got, c.fallback*cfg.Epochs)
			}
			if s.GraphReplays+s.EagerSteps != s.Steps {
				t.Fatalf("replays %d + eager %d != steps %d", s.GraphReplays, s.EagerSteps, s.Steps)
			}
		})
	}
}

// TestSecondTrainerUsesThePool: with pool reuse, a second trainer of the
// same model captures by updating the pooled executables.
func TestSecondTrainerUsesThePool(t *testing.T) {
	cfg := smallConfig(t)
	cfg.GraphPoolReuse = true
	dev := openCPU(t)
	shared := newShared(t)
	first, err := trainer.Run(context.Background(), dev, shared, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed = 8
	second, err := trainer.Run(context.Background(), dev, shared, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first.CapturePooled != 0 || second.CapturePooled != second.Captures || second.Captures == 0 {
		t.Fatalf("first pooled %d/%d, second pooled %d/%d", first.CapturePooled, first.Captures, second.CapturePooled, second.Captures)
	}
	if st := shared.Pool().Stats(); st.Instantiations != uint64(first.Captures) {
		t.Fatalf("pool instantiated %d executables for two trainers, want %d", st.Instantiations, first.Captures)
	}
}

// TestWithoutPoolReuseTheSharedPoolIsUntouched: without GraphPoolReuse a
// trainer captures from a private pool, even when handed the shared one,
// so a second trainer of the same model instantiates afresh.
func TestWithoutPoolReuseTheSharedPoolIsUntouched(t *testing.T) {
	cfg := smallConfig(t)
	dev := openCPU(t)
	shared := newShared(t)
	for range 2 {
		sum, err := trainer.Run(context.Background(), dev, shared, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if sum.Captures == 0 || sum.CapturePooled != 0 {
			t.Fatalf("%d captures, %d pooled; want captures, none pooled", sum.Captures, sum.CapturePooled)
		}
	}
	if st := shared.Pool().Stats(); st != (graphs.Stats{}) {
		t.Fatalf("the shared pool was used: %+v", st)
	}
}

// TestResumeFromTheLastStepFinishesTheRun: a run whose checkpoint is of
// its last step (killed before its summary was kept) resumes without
// training and reports what the run did: the same parameters, counters
// and last epoch's figures; the checkpoint stays as it was.
func TestResumeFromTheLastStepFinishesTheRun(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir = t.TempDir()
	whole := run(t, cfg)
	path := filepath.Join(cfg.RunDir, trainer.CheckpointFile)
	before, _ := os.ReadFile(path)
	cfg.Resume = true
	sum, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if err != nil {
		t.Fatalf("resume from the last step: %v", err)
	}
	if sum.ParamsSHA256 != whole.ParamsSHA256 || sum.Steps != whole.Steps || sum.ResumedFromStep != whole.Steps || sum.Interrupted ||
		sum.TrainLoss != whole.TrainLoss || sum.TrainAccuracy != whole.TrainAccuracy || sum.TestAccuracy != whole.TestAccuracy ||
		sum.TestLoss != whole.TestLoss || !slices.Equal(sum.EpochSeconds, whole.EpochSeconds) || sum.GraphReplays != whole.GraphReplays {
		t.Fatalf("finished from the checkpoint:\n%+v\nthe run:\n%+v", sum, whole)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Fatal("finishing from the last step changed the checkpoint")
	}
}

func TestResumeWithOtherOptimizerSettingsIsRefused(t *testing.T) {
	cfg := smallConfig(t)
	cfg.RunDir, cfg.MaxSteps = t.TempDir(), 5
	run(t, cfg)
	cfg.Resume, cfg.MaxSteps = true, 0
	cfg.Optimizer.LR *= 10
	_, err := trainer.Run(context.Background(), openCPU(t), newShared(t), cfg)
	if !errors.Is(err, trainer.ErrCheckpoint) {
		t.Fatalf("resume with another learning rate: %v", err)
	}
}

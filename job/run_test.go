package job

import (
	"context"
	"testing"

	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestPlanTrainsOnTheDataItIsGiven: a plan trains on the data its caller
// loaded and handed over (here the spec names a directory that does not
// exist, so loading it again would fail).
func TestPlanTrainsOnTheDataItIsGiven(t *testing.T) {
	s := Default()
	s.Dataset, s.DataDir, s.Epochs, s.Hidden, s.LogEvery = "fashion-mnist", "/nonexistent/fashion-mnist", 1, []int{8}, 1000
	syn := Default()
	syn.Dataset, syn.SyntheticSize = "synthetic", 256
	train, test, err := syn.LoadData()
	if err != nil {
		t.Fatal(err)
	}
	plan, err := s.Plan(train, test)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Trainer.StepsPerEpoch() != 256/s.BatchSize || plan.Trainer.ResumeStep() != 0 {
		t.Fatalf("planned %d steps per epoch from step %d; want %d from 0", plan.Trainer.StepsPerEpoch(), plan.Trainer.ResumeStep(), 256/s.BatchSize)
	}
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	shared := trainer.NewShared()
	defer shared.Close()
	sum, err := plan.Run(context.Background(), dev, shared, Options{})
	if err != nil {
		t.Fatalf("Run with the data given: %v", err)
	}
	if sum.Steps != 256/s.BatchSize {
		t.Fatalf("%d steps; want %d", sum.Steps, 256/s.BatchSize)
	}
	if _, _, err := s.LoadData(); err == nil {
		t.Fatal("LoadData loaded a directory that does not exist")
	}
}

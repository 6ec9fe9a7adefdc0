package job

import (
	"context"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/device/cpu"
	"github.com/tolaria-ml/tolaria/graphs"
)

// TestRunTrainsOnTheDataItIsGiven: with Options.Data, Run trains on what
// the caller loaded (here the spec names a directory that does not exist,
// so loading it again would fail).
func TestRunTrainsOnTheDataItIsGiven(t *testing.T) {
	s := Default()
	s.Dataset, s.DataDir, s.Epochs, s.Hidden, s.LogEvery = "fashion-mnist", "/nonexistent/fashion-mnist", 1, []int{8}, 1000
	syn := Default()
	syn.Dataset, syn.SyntheticSize = "synthetic", 256
	train, test, err := syn.LoadData()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	opts := Options{Data: func(Spec) (*data.Dataset, *data.Dataset, error) { calls++; return train, test, nil }}
	dev, err := cpu.Open(cpu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pool := graphs.NewPool()
	defer pool.Close()
	sum, err := Run(context.Background(), s, dev, pool, opts)
	if err != nil {
		t.Fatalf("Run with the data given: %v", err)
	}
	if calls != 1 || sum.Steps != 256/s.BatchSize {
		t.Fatalf("data supplied %d times, %d steps; want once and %d steps", calls, sum.Steps, 256/s.BatchSize)
	}
	if _, err := Run(context.Background(), s, dev, pool, Options{}); err == nil {
		t.Fatal("Run without the data given loaded a directory that does not exist")
	}
}

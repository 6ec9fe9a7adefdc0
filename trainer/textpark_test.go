package trainer_test

import (
	"context"
	"testing"

	"github.com/tolaria-ml/tolaria/trainer"
)

// TestParkedTokenModelEndsWithTheSameParameters: a transformer with
// dropout in attention, parked twice mid-epoch (after its capture, and
// in a later epoch), holds no device memory while parked, captures again
// after each unpark, and ends with the parameters and figures of the run
// never parked: the dropout generator's state goes to host memory and
// back with the parameters.
func TestParkedTokenModelEndsWithTheSameParameters(t *testing.T) {
	twin := run(t, tokenConfig(t))
	cfg := tokenConfig(t)
	dev := openCPU(t)
	steps, err := trainer.StepsPerEpoch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &stepParker{dev: dev, at: map[int]bool{5: true, steps + 3: true}}
	cfg.Observer, cfg.Parker = p, p
	sum, err := trainer.Run(context.Background(), dev, newShared(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.inUse) != 2 || p.unparked != 2 {
		t.Fatalf("parked %d times, unparked %d; want two of each", len(p.inUse), p.unparked)
	}
	for i, n := range p.inUse {
		if n != 0 || p.released[i] <= 0 {
			t.Errorf("park %d: %d bytes in use while parked, %d released", i+1, n, p.released[i])
		}
	}
	if sum.ParamsSHA256 != twin.ParamsSHA256 || sum.TestLoss != twin.TestLoss || sum.TrainLoss != twin.TrainLoss {
		t.Fatalf("parked twice: params %s, test loss %v, train loss %v; never parked %s, %v, %v",
			sum.ParamsSHA256, sum.TestLoss, sum.TrainLoss, twin.ParamsSHA256, twin.TestLoss, twin.TrainLoss)
	}
	if sum.Captures <= twin.Captures || sum.Steps != twin.Steps {
		t.Errorf("captures %d (never parked %d), steps %d (%d): want captures again after each unpark", sum.Captures, twin.Captures, sum.Steps, twin.Steps)
	}
}

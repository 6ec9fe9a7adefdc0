package launch

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// A GPU slot's worker sees its GPU alone; the slot numbers GPUs as this
// process's driver does, so under CUDA_VISIBLE_DEVICES the k-th GPU is the
// list's k-th entry, handed on as written.
func TestSlotEnvUnder(t *testing.T) {
	for _, c := range []struct {
		slot    Slot
		visible string
		want    []string
	}{
		{Slot{Device: "cuda", GPU: 2}, "", []string{"CUDA_VISIBLE_DEVICES=2"}},
		{Slot{Device: "cuda", GPU: 1}, "3,1", []string{"CUDA_VISIBLE_DEVICES=1"}},
		{Slot{Device: "cuda", GPU: 0}, "3, 1", []string{"CUDA_VISIBLE_DEVICES=3"}},
		{Slot{Device: "cuda", GPU: 1}, "GPU-aaaa,GPU-bbbb", []string{"CUDA_VISIBLE_DEVICES=GPU-bbbb"}},
		{Slot{Device: "cuda", GPU: -1}, "3,1", nil},
		{Slot{Device: "cpu", GPU: -1}, "", nil},
		{Slot{Device: "cuda", GPU: 0, Where: "slurm"}, "", nil},
	} {
		if got := c.slot.EnvUnder(c.visible); !slices.Equal(got, c.want) {
			t.Errorf("%v under %q: %q, want %q", c.slot, c.visible, got, c.want)
		}
	}
}

// Slots lay out interleaved, so workers spread over the devices first.
func TestLayOutSpreads(t *testing.T) {
	slots, err := LayOut("cuda", []int{0, 1, 2}, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range slots {
		got = append(got, s.String())
	}
	if want := []string{"cuda:0", "cuda:1", "cuda:2", "cuda:0", "cuda:1"}; !slices.Equal(got, want) {
		t.Errorf("slots %v, want %v", got, want)
	}
	if _, err := LayOut("cuda", []int{0, 1}, 1, 3); err == nil {
		t.Error("3 at once on 2 slots accepted")
	}
}

// A worker placed beside another waits for a slot on its GPU, however
// many others are free; any slot serves Take; a slot given back wakes a
// waiter.
func TestSlotsTakeOn(t *testing.T) {
	all, err := LayOut("cuda", []int{0, 1}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSlots(all)
	ctx := context.Background()
	one, err := s.TakeOn(ctx, 1)
	if err != nil || one.GPU != 1 {
		t.Fatalf("TakeOn(1): %v, %v", one, err)
	}
	got := make(chan Slot)
	go func() {
		sl, err := s.TakeOn(ctx, 1)
		if err != nil {
			t.Error(err)
		}
		got <- sl
	}()
	zero, err := s.Take(ctx)
	if err != nil || zero.GPU != 0 {
		t.Fatalf("Take with GPU 1 busy: %v, %v", zero, err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Take(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take with every slot busy: %v", err)
	}
	s.Give(zero) // not GPU 1: the waiter keeps waiting
	select {
	case sl := <-got:
		t.Fatalf("TakeOn(1) took %v", sl)
	case <-time.After(20 * time.Millisecond):
	}
	s.Give(one)
	if sl := <-got; sl.GPU != 1 {
		t.Fatalf("the waiter got %v", sl)
	}
}

// TestCPUThreads: the cores divided between the workers side by side, at
// least one each, unless the job sets its own.
func TestCPUThreads(t *testing.T) {
	for _, c := range []struct{ set, cores, side, want int }{
		{0, 2, 1, 2}, {0, 2, 2, 1}, {0, 2, 4, 1}, {0, 16, 3, 5}, {0, 16, 0, 16}, {3, 2, 2, 3}, {1, 16, 1, 1},
	} {
		if got := CPUThreads(c.set, c.cores, c.side); got != c.want {
			t.Errorf("cpu_threads %d, %d cores, %d side by side: %d threads, want %d", c.set, c.cores, c.side, got, c.want)
		}
	}
}

package data

import (
	"errors"
	"slices"
	"testing"
)

func TestOrder(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		seed    uint64
		epoch   int
		shuffle bool
	}{
		{"identity", 10, 1, 0, false},
		{"empty", 0, 1, 0, true},
		{"negative n", -3, 1, 0, true},
		{"one", 1, 7, 3, true},
		{"shuffled", 1000, 42, 0, true},
		{"later epoch", 1000, 42, 5, true},
		{"negative epoch", 100, 42, -1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Order(tt.n, tt.seed, tt.epoch, tt.shuffle)
			n := max(tt.n, 0)
			if len(got) != n {
				t.Fatalf("len = %d; want %d", len(got), n)
			}
			sorted := slices.Sorted(slices.Values(got))
			for i, v := range sorted {
				if v != i {
					t.Fatalf("not a permutation of [0,%d): sorted[%d] = %d", n, i, v)
				}
			}
			if again := Order(tt.n, tt.seed, tt.epoch, tt.shuffle); !slices.Equal(got, again) {
				t.Errorf("two calls with the same arguments differ")
			}
			if !tt.shuffle && !slices.Equal(got, sorted) {
				t.Errorf("shuffle off but order is %v", got)
			}
			if tt.shuffle && n >= 100 && slices.Equal(got, sorted) {
				t.Errorf("shuffle on but order is the identity")
			}
		})
	}
}

func TestOrderDiffers(t *testing.T) {
	base := Order(1000, 42, 0, true)
	tests := []struct {
		name  string
		seed  uint64
		epoch int
	}{
		{"next epoch", 42, 1},
		{"other seed", 43, 0},
	}
	for _, tt := range tests {
		if got := Order(1000, tt.seed, tt.epoch, true); slices.Equal(got, base) {
			t.Errorf("%s: order equals seed 42 epoch 0", tt.name)
		}
	}
}

// TestOrderGolden pins the permutation itself: saved runs resume by recomputing orders,
// so any change here silently changes what a resumed run trains on.
func TestOrderGolden(t *testing.T) {
	tests := []struct {
		seed  uint64
		epoch int
		want  []int
	}{
		{42, 0, []int{6, 2, 5, 3, 4, 7, 0, 1, 9, 8}},
		{42, 1, []int{2, 3, 9, 6, 0, 8, 7, 4, 5, 1}},
	}
	for _, tt := range tests {
		if got := Order(10, tt.seed, tt.epoch, true); !slices.Equal(got, tt.want) {
			t.Errorf("Order(10, %d, %d) = %#v; want %#v", tt.seed, tt.epoch, got, tt.want)
		}
	}
}

func TestShard(t *testing.T) {
	order := Order(103, 9, 2, true)
	for _, world := range []int{1, 2, 3, 8, 103, 200} {
		seen := make(map[int]int)
		var merged []int
		for rank := range world {
			shard, err := Shard(order, rank, world)
			if err != nil {
				t.Fatalf("world %d rank %d: %v", world, rank, err)
			}
			for i, v := range shard {
				if want := order[rank+i*world]; v != want {
					t.Fatalf("world %d rank %d: shard[%d] = %d; want order[%d] = %d", world, rank, i, v, rank+i*world, want)
				}
				seen[v]++
			}
			merged = append(merged, shard...)
			if lo, hi := len(order)/world, (len(order)+world-1)/world; len(shard) < lo || len(shard) > hi {
				t.Errorf("world %d rank %d: shard of %d; want %d..%d", world, rank, len(shard), lo, hi)
			}
		}
		if len(merged) != len(order) {
			t.Errorf("world %d: shards hold %d examples; want %d", world, len(merged), len(order))
		}
		for _, v := range order {
			if seen[v] != 1 {
				t.Errorf("world %d: example %d appears in %d shards; want 1", world, v, seen[v])
			}
		}
	}
}

func TestShardErrors(t *testing.T) {
	tests := []struct{ rank, world int }{
		{0, 0}, {0, -1}, {-1, 2}, {2, 2}, {5, 3},
	}
	for _, tt := range tests {
		if _, err := Shard([]int{1, 2, 3}, tt.rank, tt.world); !errors.Is(err, ErrInvalid) {
			t.Errorf("Shard(rank %d, world %d) error = %v; want ErrInvalid", tt.rank, tt.world, err)
		}
	}
}

func TestParseRagged(t *testing.T) {
	tests := []struct {
		in      string
		want    Ragged
		wantErr bool
	}{
		{"pad", RaggedPad, false},
		{"drop", RaggedDrop, false},
		{"eager", RaggedEager, false},
		{"Pad", "", true},
		{"", "", true},
	}
	for _, tt := range tests {
		got, err := ParseRagged(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseRagged(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRagged(%q) error %v is not ErrInvalid", tt.in, err)
		}
	}
}

func TestPlan(t *testing.T) {
	seq := func(lo, hi int) []int {
		s := make([]int, 0, hi-lo)
		for i := lo; i < hi; i++ {
			s = append(s, i)
		}
		return s
	}
	tests := []struct {
		name   string
		n      int
		batch  int
		policy Ragged
		want   []Batch
	}{
		{"pad keeps short batch", 10, 4, RaggedPad, []Batch{
			{seq(0, 4), false}, {seq(4, 8), false}, {seq(8, 10), true}}},
		{"eager keeps short batch", 10, 4, RaggedEager, []Batch{
			{seq(0, 4), false}, {seq(4, 8), false}, {seq(8, 10), true}}},
		{"drop removes short batch", 10, 4, RaggedDrop, []Batch{
			{seq(0, 4), false}, {seq(4, 8), false}}},
		{"exact fit", 8, 4, RaggedPad, []Batch{{seq(0, 4), false}, {seq(4, 8), false}}},
		{"exact fit drop", 8, 4, RaggedDrop, []Batch{{seq(0, 4), false}, {seq(4, 8), false}}},
		{"all short pad", 3, 4, RaggedPad, []Batch{{seq(0, 3), true}}},
		{"all short drop", 3, 4, RaggedDrop, []Batch{}},
		{"empty", 0, 4, RaggedPad, []Batch{}},
		{"batch of one", 3, 1, RaggedDrop, []Batch{{seq(0, 1), false}, {seq(1, 2), false}, {seq(2, 3), false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Plan(seq(0, tt.n), tt.batch, tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, func(a, b Batch) bool {
				return a.Ragged == b.Ragged && slices.Equal(a.Indices, b.Indices)
			}) {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestPlanBatchesDoNotAlias(t *testing.T) {
	order := []int{0, 1, 2, 3, 4, 5}
	plan, err := Plan(order, 3, RaggedPad)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(plan[0].Indices, 99)
	if plan[1].Indices[0] != 3 {
		t.Errorf("appending to batch 0 overwrote batch 1: %v", plan[1].Indices)
	}
}

func TestPlanErrors(t *testing.T) {
	tests := []struct {
		name   string
		batch  int
		policy Ragged
	}{
		{"zero batch", 0, RaggedPad},
		{"negative batch", -1, RaggedDrop},
		{"unknown policy", 4, "truncate"},
		{"empty policy", 4, ""},
	}
	for _, tt := range tests {
		if _, err := Plan([]int{1, 2, 3}, tt.batch, tt.policy); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error = %v; want ErrInvalid", tt.name, err)
		}
	}
}

// TestBatchesCountsWhatPlanCuts: Batches agrees with building the order, sharding it and
// planning it, for every policy and small sizes, shards and batch sizes.
func TestBatchesCountsWhatPlanCuts(t *testing.T) {
	for _, policy := range []Ragged{RaggedPad, RaggedDrop, RaggedEager} {
		for n := 0; n <= 40; n++ {
			for world := 1; world <= 5; world++ {
				for rank := range world {
					for batch := 1; batch <= 12; batch++ {
						shard, err := Shard(Order(n, 1, 0, true), rank, world)
						if err != nil {
							t.Fatal(err)
						}
						plan, err := Plan(shard, batch, policy)
						if err != nil {
							t.Fatal(err)
						}
						got, err := Batches(n, rank, world, batch, policy)
						if err != nil || got != len(plan) {
							t.Fatalf("Batches(%d, %d, %d, %d, %s) = %d, %v; Plan cuts %d", n, rank, world, batch, policy, got, err, len(plan))
						}
					}
				}
			}
		}
	}
}

func TestBatchesRefusesWhatPlanRefuses(t *testing.T) {
	for _, c := range []struct {
		rank, world, batch int
		policy             Ragged
	}{{0, 0, 8, RaggedPad}, {2, 2, 8, RaggedPad}, {-1, 2, 8, RaggedPad}, {0, 1, 0, RaggedPad}, {0, 1, 8, "trim"}} {
		if _, err := Batches(100, c.rank, c.world, c.batch, c.policy); !errors.Is(err, ErrInvalid) {
			t.Errorf("Batches(100, %d, %d, %d, %q): %v, want ErrInvalid", c.rank, c.world, c.batch, c.policy, err)
		}
	}
}

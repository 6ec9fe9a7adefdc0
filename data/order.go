package data

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// Order returns the example order for an epoch: a permutation of [0,n) drawn from
// (seed, epoch) when shuffle is set, else the identity. The permutation depends on
// (seed, epoch) alone, so a run resumed at an epoch needs no saved RNG state. n <= 0
// gives an empty order.
func Order(n int, seed uint64, epoch int, shuffle bool) []int {
	order := make([]int, max(n, 0))
	for i := range order {
		order[i] = i
	}
	if shuffle {
		permute(rand.NewPCG(seed, uint64(epoch)), order)
	}
	return order
}

// permute is Fisher-Yates with our own bounded draw on raw PCG output: math/rand/v2's
// Shuffle and IntN are free to change their algorithms between Go releases, and a saved
// run must see the same orders after a toolchain upgrade.
func permute(src *rand.PCG, p []int) {
	for i := len(p) - 1; i > 0; i-- {
		j := boundedDraw(src, uint64(i)+1)
		p[i], p[j] = p[j], p[i]
	}
}

// boundedDraw returns a uniform value in [0,bound) by Lemire's multiply-and-reject method,
// which avoids the modulo bias of src.Uint64() % bound.
func boundedDraw(src *rand.PCG, bound uint64) uint64 {
	hi, lo := bits.Mul64(src.Uint64(), bound)
	if lo < bound {
		threshold := -bound % bound
		for lo < threshold {
			hi, lo = bits.Mul64(src.Uint64(), bound)
		}
	}
	return hi
}

// Shard keeps the stride shard of order for rank out of world ranks: positions rank,
// rank+world, rank+2*world, ... Strides keep every rank's shard spread over the whole
// epoch, and the shards of all ranks partition the order.
func Shard(order []int, rank, world int) ([]int, error) {
	if world < 1 {
		return nil, fmt.Errorf("%w: Shard: world size is %d; want at least 1", ErrInvalid, world)
	}
	if rank < 0 || rank >= world {
		return nil, fmt.Errorf("%w: Shard: rank is %d; want [0,%d) for world size %d", ErrInvalid, rank, world, world)
	}
	shard := make([]int, 0, (len(order)-rank+world-1)/world)
	for i := rank; i < len(order); i += world {
		shard = append(shard, order[i])
	}
	return shard, nil
}

// Ragged names what happens to an epoch's last batch when it is shorter than the batch
// size.
type Ragged string

// Ragged policies. Pad, eager and graph plan the same batches and differ downstream:
// pad fills the short batch up to full size with masked rows so the captured graph
// replays it, eager runs it outside the graph at its true size, and graph captures a
// graph of its own at its true size, once, and replays that.
const (
	RaggedPad   Ragged = "pad"
	RaggedDrop  Ragged = "drop"
	RaggedEager Ragged = "eager"
	RaggedGraph Ragged = "graph"
)

// ParseRagged accepts a policy name as given on the command line.
func ParseRagged(s string) (Ragged, error) {
	switch r := Ragged(s); r {
	case RaggedPad, RaggedDrop, RaggedEager, RaggedGraph:
		return r, nil
	}
	return "", fmt.Errorf("%w: unknown ragged-batch policy %q; use %q, %q, %q or %q",
		ErrInvalid, s, RaggedPad, RaggedDrop, RaggedEager, RaggedGraph)
}

// Batch is one step's worth of example indices.
type Batch struct {
	Indices []int
	Ragged  bool // shorter than the batch size
}

// Plan cuts an epoch's order into batches of batchSize. Under RaggedPad, RaggedEager and RaggedGraph a
// short last batch is kept and marked Ragged; under RaggedDrop it is left out. The
// batches' Indices share order's memory, capped so an append cannot spill into the next
// batch.
func Plan(order []int, batchSize int, policy Ragged) ([]Batch, error) {
	if batchSize < 1 {
		return nil, fmt.Errorf("%w: Plan: batch size is %d; want at least 1", ErrInvalid, batchSize)
	}
	if _, err := ParseRagged(string(policy)); err != nil {
		return nil, fmt.Errorf("Plan: %w", err)
	}
	batches := make([]Batch, 0, (len(order)+batchSize-1)/batchSize)
	for start := 0; start < len(order); start += batchSize {
		end := min(start+batchSize, len(order))
		short := end-start < batchSize
		if short && policy == RaggedDrop {
			break
		}
		batches = append(batches, Batch{Indices: order[start:end:end], Ragged: short})
	}
	return batches, nil
}

// Batches is the number of batches Plan cuts from rank's Shard of an n-example epoch
// order, counted without building the order: a run's steps per epoch, known before any
// epoch is planned.
func Batches(n, rank, world, batchSize int, policy Ragged) (int, error) {
	if world < 1 || rank < 0 || rank >= world {
		_, err := Shard(nil, rank, world)
		return 0, err
	}
	if batchSize < 1 {
		return 0, fmt.Errorf("%w: Batches: batch size is %d; want at least 1", ErrInvalid, batchSize)
	}
	if _, err := ParseRagged(string(policy)); err != nil {
		return 0, fmt.Errorf("Batches: %w", err)
	}
	shard := 0
	if n > rank {
		shard = (n - rank + world - 1) / world // positions rank, rank+world, ... below n
	}
	if policy == RaggedDrop {
		return shard / batchSize, nil
	}
	return (shard + batchSize - 1) / batchSize, nil
}

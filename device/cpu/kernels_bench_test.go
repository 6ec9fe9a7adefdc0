package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// gemmShape is one benchmarked product, m×k times k×n. The first three are
// the layer shapes of the Fashion-MNIST MLP at batch 64 and a tiny one
// where call overhead dominates; the transposed ones are the backward pass
// of the first layer (dW = Xᵀ·dY and dX = dY·Wᵀ).
type gemmShape struct {
	m, k, n        int
	transA, transB bool
}

func (s gemmShape) String() string {
	name := fmt.Sprintf("%dx%dx%d", s.m, s.k, s.n)
	if s.transA {
		name += "_tA"
	}
	if s.transB {
		name += "_tB"
	}
	return name
}

var benchShapes = []gemmShape{
	{m: 64, k: 784, n: 256},
	{m: 64, k: 256, n: 128},
	{m: 8, k: 16, n: 2},
	{m: 784, k: 64, n: 256, transA: true},
	{m: 64, k: 256, n: 784, transB: true},
}

func BenchmarkGemm(b *testing.B) {
	impls := []struct {
		name string
		fn   func(bool, bool, int, int, int, float32, []float32, []float32, float32, []float32)
	}{{"tiles", gemm}, {"naive", gemmLoop}}
	for _, impl := range impls {
		for _, s := range benchShapes {
			b.Run(impl.name+"/"+s.String(), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, y, c := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), make([]float32, s.m*s.n)
				b.SetBytes(int64(4 * (len(x) + len(y) + len(c))))
				for b.Loop() {
					impl.fn(s.transA, s.transB, s.m, s.n, s.k, 1, x, y, 0.5, c)
				}
			})
		}
	}
}

// BenchmarkGemmThreads times the device's GEMM, split across 1 and 2
// threads, on the default MLP's largest products.
func BenchmarkGemmThreads(b *testing.B) {
	for _, s := range []gemmShape{{m: 64, k: 784, n: 256}, {m: 256, k: 784, n: 256}, {m: 784, k: 64, n: 256, transA: true}, {m: 64, k: 128, n: 10}, {m: 128, k: 64, n: 10, transA: true}, {m: 64, k: 10, n: 128, transB: true}} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", s, threads), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, y, c := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), make([]float32, s.m*s.n)
				task := newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, x, y, 0, c)
				withTeam(threads, func(t *team) {
					for b.Loop() {
						task.run(t)
					}
				})
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// splitShapes are products around the size from which a product is split
// between threads (minSplitWork): the MLP's output layer and its
// gradients at batch 32, 64, 128 and 256, square-ish products of similar
// sizes, and the default MLP's middle and first layers.
var splitShapes = []gemmShape{
	{m: 32, k: 128, n: 10}, {m: 64, k: 128, n: 10}, {m: 128, k: 64, n: 10, transA: true}, {m: 64, k: 10, n: 128, transB: true},
	{m: 128, k: 128, n: 10}, {m: 128, k: 128, n: 10, transA: true}, {m: 128, k: 10, n: 128, transB: true},
	{m: 256, k: 128, n: 10}, {m: 128, k: 256, n: 10, transA: true}, {m: 256, k: 10, n: 128, transB: true},
	{m: 32, k: 64, n: 64}, {m: 64, k: 64, n: 64}, {m: 64, k: 128, n: 64}, {m: 64, k: 256, n: 64},
	{m: 64, k: 256, n: 128}, {m: 256, k: 64, n: 128, transA: true}, {m: 64, k: 128, n: 256, transB: true},
	{m: 128, k: 256, n: 128}, {m: 64, k: 784, n: 256},
}

// BenchmarkGemmSplit times the products of splitShapes on one thread and
// on two, with the parts the device's decision gives (the split-parts
// metric; 1 is not split). Run the two thread counts alternately (e.g.
// -bench 'GemmSplit/.*/threads=1' then 'threads=2', in turns), as the
// machine's load moves.
func BenchmarkGemmSplit(b *testing.B) {
	for _, s := range splitShapes {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", s, threads), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, y, c := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), make([]float32, s.m*s.n)
				task := newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, x, y, 0, c)
				parts := 0
				withTeam(threads, func(t *team) {
					parts = task.parts(t)
					for b.Loop() {
						task.run(t)
					}
				})
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(float64(parts), "split-parts")
			})
		}
	}
}

// BenchmarkGemmConv times the device's GEMM on 1 and 2 threads on the products
// of the example CNN's convolutions at batch 64 (examples/cnn.yaml): the
// first conv's forward and weight gradient (k = 9, then a sum over 50,176
// pixels); the second's (32→64 at 14×14) and a residual one's (64→64 at
// 7×7) forward, weight gradient and column gradient; and the linear
// layer's column gradient (3136 inputs).
func BenchmarkGemmConv(b *testing.B) {
	for _, s := range []gemmShape{
		{m: 50176, k: 9, n: 32}, {m: 9, k: 50176, n: 32, transA: true},
		{m: 12544, k: 288, n: 64}, {m: 288, k: 12544, n: 64, transA: true}, {m: 12544, k: 64, n: 288, transB: true},
		{m: 3136, k: 576, n: 64}, {m: 576, k: 3136, n: 64, transA: true}, {m: 3136, k: 64, n: 576, transB: true},
		{m: 64, k: 128, n: 3136, transB: true}, {m: 3136, k: 64, n: 128, transA: true}, {m: 64, k: 3136, n: 128},
	} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", s, threads), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, y, c := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), make([]float32, s.m*s.n)
				task := newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, x, y, 0, c)
				withTeam(threads, func(t *team) {
					for b.Loop() {
						task.run(t)
					}
				})
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

//go:build openblas

package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu/internal/openblas"
)

// mlpGemmShapes are the GEMMs of one training step of the default MLP
// (job.Default: 784-256-128-10) at a batch size, as nn.Step issues them:
// forward X·W, weight gradient Aᵀ·D (transposed A), input gradient D·Wᵀ
// (transposed B; the first layer has none).
func mlpGemmShapes(batch int) []gemmShape {
	widths := []int{784, 256, 128, 10}
	var out []gemmShape
	for i := 0; i+1 < len(widths); i++ {
		in, o := widths[i], widths[i+1]
		out = append(out,
			gemmShape{m: batch, k: in, n: o},
			gemmShape{m: in, k: batch, n: o, transA: true})
		if i > 0 {
			out = append(out, gemmShape{m: batch, k: o, n: in, transB: true})
		}
	}
	return out
}

// TestGemmRatio measures the device's GEMM against OpenBLAS's own
// multi-threaded cblas_sgemm on the default MLP's shapes at batch 64 and
// 256, with the same thread count, and prints a table of GFLOP/s and their
// ratio. It is a measurement, not a check, so it runs only when asked
// (`make gemm-ratio`):
//
//	TOLARIA_GEMM_RATIO=1 go test -tags openblas -run TestGemmRatio -v ./device/cpu/
//
// TOLARIA_GEMM_THREADS sets the thread count (default GOMAXPROCS). Rounds
// alternate the two, each timing enough calls to take about 20 ms after an
// idle pause, and a side's figure is its median round, so a change in the
// machine's load falls on both alike.
func TestGemmRatio(t *testing.T) {
	if os.Getenv("TOLARIA_GEMM_RATIO") == "" {
		t.Skip("a measurement; set TOLARIA_GEMM_RATIO=1 to run it")
	}
	threads := runtime.GOMAXPROCS(0)
	if v := os.Getenv("TOLARIA_GEMM_THREADS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TOLARIA_GEMM_THREADS=%q: want a positive integer", v)
		}
		threads = n
	}
	openblas.SetThreads(threads)
	if got := openblas.Threads(); got != threads {
		t.Fatalf("OpenBLAS runs %d threads after openblas_set_num_threads(%d)", got, threads)
	}
	const rounds = 11
	// idle is the pause before each round. OpenBLAS's threads spin for a
	// while after a call before they sleep (pthreads: about 2^28 cycles;
	// OpenMP: GOMP_SPINCOUNT), and a thread spinning through the device's
	// round takes one of its cores; the device's idle helpers spin too,
	// for microseconds. After the pause both sides start with the cores
	// free.
	const idle = 200 * time.Millisecond
	fmt.Printf("%s; %d threads; %d alternating rounds, medians; device tiles: %s\n", openblas.Config(), threads, rounds, kernelName)
	fmt.Printf("%-8s %-18s %12s %12s %7s\n", "batch", "m x k x n", "OpenBLAS", "device", "ratio")
	withTeam(threads, func(tm *team) {
		for _, batch := range []int{64, 256} {
			for _, s := range mlpGemmShapes(batch) {
				rng := rand.New(rand.NewPCG(1, 2))
				a, b, c := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n), make([]float32, s.m*s.n)
				lda, ldb := s.k, s.n
				if s.transA {
					lda = s.m
				}
				if s.transB {
					ldb = s.k
				}
				ref := func() {
					openblas.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, b, ldb, 0, c, s.n)
				}
				task := newGemmTask(s.transA, s.transB, s.m, s.n, s.k, 1, a, b, 0, c)
				dev := func() { task.run(tm) }
				reps := repsFor(dev)
				var refT, devT []float64
				for range rounds {
					time.Sleep(idle)
					refT = append(refT, timeCalls(ref, reps))
					time.Sleep(idle)
					devT = append(devT, timeCalls(dev, reps))
				}
				flop := 2 * float64(s.m*s.n*s.k)
				refG, devG := flop/median(refT)/1e9, flop/median(devT)/1e9
				fmt.Printf("%-8d %-18s %8.1f GF/s %8.1f GF/s %7.2f\n", batch, s.String(), refG, devG, devG/refG)
			}
		}
	})
}

// repsFor returns how many calls of f take about 20 ms.
func repsFor(f func()) int {
	n := 1
	for {
		if d := time.Duration(timeCalls(f, n) * float64(n) * 1e9); d > 20*time.Millisecond || n >= 1<<20 {
			return n
		}
		n *= 2
	}
}

// timeCalls returns the mean seconds per call of n calls of f.
func timeCalls(f func(), n int) float64 {
	start := time.Now()
	for range n {
		f()
	}
	return time.Since(start).Seconds() / float64(n)
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

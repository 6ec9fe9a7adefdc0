//go:build openblas

package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/device/cpu/internal/openblas"
)

// mlpGemmShapes are the GEMMs of one training step of the MLP
// 784-width-width/2-10 (job.Default has width 256) at a batch size, as
// nn.Step issues them: forward X·W, weight gradient Aᵀ·D (transposed A),
// input gradient D·Wᵀ (transposed B; the first layer has none).
func mlpGemmShapes(batch, width int) []gemmShape {
	widths := []int{784, width, width / 2, 10}
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
// TOLARIA_GEMM_THREADS sets the thread count (default GOMAXPROCS);
// TOLARIA_GEMM_BATCHES (default 64,256) and TOLARIA_GEMM_WIDTHS (hidden
// widths, default 256) choose the models and batches whose shapes run,
// TOLARIA_GEMM_ROUNDS the number of rounds (default 11). Rounds
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
	batches := envInts(t, "TOLARIA_GEMM_BATCHES", []int{64, 256})
	widths := envInts(t, "TOLARIA_GEMM_WIDTHS", []int{256})
	openblas.SetThreads(threads)
	if got := openblas.Threads(); got != threads {
		t.Fatalf("OpenBLAS runs %d threads after openblas_set_num_threads(%d)", got, threads)
	}
	rounds := envInts(t, "TOLARIA_GEMM_ROUNDS", []int{11})[0]
	// idle is the pause before each round. OpenBLAS's threads spin for a
	// while after a call before they sleep (pthreads: about 2^28 cycles;
	// OpenMP: GOMP_SPINCOUNT), and a thread spinning through the device's
	// round takes one of its cores; the device's idle helpers spin too,
	// for microseconds. After the pause both sides start with the cores
	// free.
	const idle = 200 * time.Millisecond
	fmt.Printf("%s; %d threads; %d alternating rounds, medians; device tiles: %s\n", openblas.Config(), threads, rounds, kernelName())
	fmt.Printf("%-8s %-6s %-20s %12s %12s %7s\n", "batch", "width", "m x k x n", "OpenBLAS", "device", "ratio")
	withTeam(threads, func(tm *team) {
		for _, width := range widths {
			for _, batch := range batches {
				gemmRatioShapes(tm, batch, width, rounds, idle)
			}
		}
	})
}

// gemmRatioShapes prints TestGemmRatio's rows for one model and batch.
func gemmRatioShapes(tm *team, batch, width, rounds int, idle time.Duration) {
	for _, s := range mlpGemmShapes(batch, width) {
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
		// After the pause, each side runs one untimed window first: on a
		// virtual machine a core idle for the pause takes milliseconds to
		// come back to speed, which would count against whichever side
		// wakes its threads per call (the device's helpers block between
		// kernels; OpenBLAS's spin).
		for range rounds {
			time.Sleep(idle)
			timeCalls(ref, reps)
			refT = append(refT, timeCalls(ref, reps))
			time.Sleep(idle)
			timeCalls(dev, reps)
			devT = append(devT, timeCalls(dev, reps))
		}
		flop := 2 * float64(s.m*s.n*s.k)
		refG, devG := flop/median(refT)/1e9, flop/median(devT)/1e9
		fmt.Printf("%-8d %-6d %-20s %8.1f GF/s %8.1f GF/s %7.2f\n", batch, width, s.String(), refG, devG, devG/refG)
	}
}

// envInts reads a comma-separated list of positive integers from the
// environment variable name, or returns def when it is unset.
func envInts(t *testing.T, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a comma-separated list of positive integers", name, v)
		}
		out = append(out, n)
	}
	return out
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

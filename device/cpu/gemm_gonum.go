//go:build !cgo || noopenblas

package cpu

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Without cgo (or with -tags noopenblas) the GEMMs run in gonum's float32
// BLAS, pure Go, which blocks the product and splits it across
// GOMAXPROCS goroutines of its own. It is several times slower than
// OpenBLAS (docs/cpu-results.md).

// gemmBackend names the GEMM implementation in the device's description.
const gemmBackend = "gonum (pure Go)"

// gemmSplits is false: gonum splits a product itself, and it is called on
// whole operands only (see sgemmStrided).
const gemmSplits = false

func initBLAS() error { return nil }

// sgemmStrided computes c = alpha*op(a)*op(b) + beta*c through gonum.
//
// gonum's kernel for a transposed b reduces with a SIMD dot product that
// starts at b's 16-byte alignment, so a transposed b is copied into k×n
// order first: the sums then run in l order whatever the buffers'
// addresses. Only whole, packed operands come here (gemmSplits is false).
func sgemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if transB {
		b, ldb = transpose(b[:n*k], n, k), n
	}
	tA := blas.NoTrans
	if transA {
		tA = blas.Trans
	}
	gonum.Implementation{}.Sgemm(tA, blas.NoTrans, m, n, k, alpha, a[:m*k], lda, b[:k*n], ldb, beta, c[:m*n], ldc)
}

// transpose returns the cols×rows transpose of the row-major rows×cols x.
func transpose(x []float32, rows, cols int) []float32 {
	t := make([]float32, len(x))
	for r := 0; r < rows; r++ {
		for j, v := range x[r*cols : (r+1)*cols] {
			t[j*rows+r] = v
		}
	}
	return t
}

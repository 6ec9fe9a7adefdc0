//go:build cgo && !noopenblas

package cpu

// The GEMMs run in OpenBLAS (Debian: libopenblas-dev), called through cgo
// on one thread per call: the device splits a product into parts itself
// (gemmTask) and runs them on its own worker threads, so OpenBLAS's thread
// pool never competes with the device's threads, and each part's bits
// depend only on its shape. Build with -tags noopenblas (or CGO_ENABLED=0)
// for the pure-Go GEMM of gemm_gonum.go; docs/cpu-results.md has both
// measured.

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import "fmt"

// gemmBackend names the GEMM implementation in the device's description.
const gemmBackend = "OpenBLAS"

// gemmSplits says that gemmBLAS takes sub-blocks (leading dimensions) and
// so may be split across the device's threads.
const gemmSplits = true

// initBLAS makes OpenBLAS run each call on the calling thread. It is a
// process-wide setting; every device sets the same value.
func initBLAS() error {
	C.openblas_set_num_threads(1)
	if got := int(C.openblas_get_num_threads()); got != 1 {
		return fmt.Errorf("cpu: OpenBLAS runs %d threads per call after openblas_set_num_threads(1)", got)
	}
	return nil
}

// setBLASThreads sets OpenBLAS's own thread count, for the benchmark that
// compares the device with OpenBLAS's threading.
func setBLASThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// blasConfig is OpenBLAS's build and core description.
func blasConfig() string {
	return C.GoString(C.openblas_get_config()) + " core " + C.GoString(C.openblas_get_corename())
}

// sgemmStrided computes c = alpha*op(a)*op(b) + beta*c on row-major blocks
// with leading dimensions lda, ldb, ldc, in OpenBLAS. a, b and c start at
// the blocks' first elements and must hold them.
func sgemmStrided(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	ta, tb := uint32(C.CblasNoTrans), uint32(C.CblasNoTrans)
	if transA {
		ta = C.CblasTrans
	}
	if transB {
		tb = C.CblasTrans
	}
	C.cblas_sgemm(C.CblasRowMajor, ta, tb, C.blasint(m), C.blasint(n), C.blasint(k),
		C.float(alpha), (*C.float)(&a[0]), C.blasint(lda), (*C.float)(&b[0]), C.blasint(ldb),
		C.float(beta), (*C.float)(&c[0]), C.blasint(ldc))
}

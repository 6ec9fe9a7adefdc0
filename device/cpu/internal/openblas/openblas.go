//go:build openblas && cgo

package openblas

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

// SetThreads sets how many threads OpenBLAS runs each call on, with
// openblas_set_num_threads: explicitly, because the default (the
// OPENBLAS_NUM_THREADS environment variable, else every core) can
// oversubscribe a small machine.
func SetThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// Threads is OpenBLAS's thread count.
func Threads() int { return int(C.openblas_get_num_threads()) }

// Config describes the OpenBLAS build and the core it chose, and whether
// it threads with pthreads or OpenMP.
func Config() string {
	par := map[int]string{0: "sequential", 1: "pthreads", 2: "OpenMP"}[int(C.openblas_get_parallel())]
	return C.GoString(C.openblas_get_config()) + ", core " + C.GoString(C.openblas_get_corename()) + ", " + par
}

// Sgemm computes c = alpha*op(a)*op(b) + beta*c on row-major operands with
// leading dimensions lda, ldb, ldc.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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

//go:build !amd64 || purego

package cpu

// Other architectures (and -tags purego) compute every block in Go, with
// the same bits as the amd64 kernels.
func haveKernel() bool { return false }

func kernelName() string { return "Go" }

func kern4x16(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool) {
	panic("cpu: no GEMM micro-kernel on this architecture")
}

func haveWideKernel() bool { return false }

func kern8x16(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32) {
	panic("cpu: no GEMM micro-kernel on this architecture")
}

func kern8x32(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32) {
	panic("cpu: no GEMM micro-kernel on this architecture")
}

func kern4x32(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32) {
	panic("cpu: no GEMM micro-kernel on this architecture")
}

func kern4x16Masked(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask *int32) {
	panic("cpu: no GEMM micro-kernel on this architecture")
}

func adamW8(p, grad, m, v *float32, n int, k *adamConsts) {
	panic("cpu: no AdamW kernel on this architecture")
}

func haveGELUKernel() bool { return false }

func biasGELU8(z, bias, y *float32, n int) { panic("cpu: no GELU kernel on this architecture") }

func geluGrad8(z, dy, dz *float32, n int) { panic("cpu: no GELU kernel on this architecture") }

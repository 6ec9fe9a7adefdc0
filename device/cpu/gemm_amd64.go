//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// The micro-kernels of gemm_amd64.s need AVX (Sandy Bridge, Bulldozer
// and later); without it the blocks run in Go, with the same bits.
func haveKernel() bool { return cpu.X86.HasAVX }

// kernelName names the tiles this machine runs.
func kernelName() string {
	if haveWideKernel() {
		return "AVX-512"
	}
	return "AVX"
}

//go:noescape
func kern4x16(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool)

// haveWideKernel says whether kern4x32 may run: AVX-512 (Skylake-SP, Ice
// Lake, Zen 4 and later).
func haveWideKernel() bool { return cpu.X86.HasAVX512F }

//go:noescape
func kern8x16(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32)

//go:noescape
func kern8x32(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32)

//go:noescape
func kern4x32(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32)

//go:noescape
func kern4x16Masked(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask *int32)

//go:noescape
func adamW8(p, grad, m, v *float32, n int, k *adamConsts)

// haveGELUKernel says whether gelu_amd64.s may run: it shifts integer
// lanes of YMM registers, which needs AVX2.
func haveGELUKernel() bool { return cpu.X86.HasAVX2 }

//go:noescape
func biasGELU8(z, bias, y *float32, n int)

//go:noescape
func geluGrad8(z, dy, dz *float32, n int)

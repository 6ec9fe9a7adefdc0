//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// haveImageKernel says whether image_amd64.s may run: AVX-512 (Skylake-SP,
// Ice Lake, Zen 4 and later). Without it the same loops run in Go, with
// the same bits.
func haveImageKernel() bool { return cpu.X86.HasAVX512F }

//go:noescape
func colSum16(x *float32, ld uintptr, rows int, sum *float64)

//go:noescape
func colSqDev16(x *float32, ld uintptr, rows int, mean, sq *float64)

//go:noescape
func colDot16(dy, xhat *float32, ld uintptr, rows int, db, dg *float64)

//go:noescape
func bnNormRows(x, xhat, y *float32, rows, cols int, stats, params *float32)

//go:noescape
func bnGradRows(dy, xhat, dx *float32, rows, cols int, k *float32)

//go:noescape
func reluGrad16(z, dy, dz *float32, n int)

//go:noescape
func biasActRows(z, y, bias *float32, rows, cols int, relu bool)

//go:noescape
func maxPool16(x *float32, pix, row uintptr, nh, nw int, at0, kw float32, y, arg *float32, blocks int)

//go:noescape
func add16(dst, src *float32, n int)

//go:noescape
func axpy16(alpha float32, x, y *float32, n int)

//go:noescape
func maxPoolGradRow16(dy, arg, dx *float32, ow, k, at0, blocks int)

//go:build !amd64 || purego

package cpu

// Other architectures (and -tags purego) run the image kernels' loops in
// Go, with the same bits as image_amd64.s.
func haveImageKernel() bool { return false }

func colSum16(x *float32, ld uintptr, rows int, sum *float64) { panic(noImageKernel) }

func colSqDev16(x *float32, ld uintptr, rows int, mean, sq *float64) { panic(noImageKernel) }

func colDot16(dy, xhat *float32, ld uintptr, rows int, db, dg *float64) { panic(noImageKernel) }

func bnNormRows(x, xhat, y *float32, rows, cols int, stats, params *float32) {
	panic(noImageKernel)
}

func bnGradRows(dy, xhat, dx *float32, rows, cols int, k *float32) { panic(noImageKernel) }

func reluGrad16(z, dy, dz *float32, n int) { panic(noImageKernel) }

func biasActRows(z, y, bias *float32, rows, cols int, relu bool) { panic(noImageKernel) }

func maxPool16(x *float32, pix, row uintptr, nh, nw int, at0, kw float32, y, arg *float32, blocks int) {
	panic(noImageKernel)
}

func maxPoolGradRow16(dy, arg, dx *float32, ow, k, at0, blocks int) { panic(noImageKernel) }

func add16(dst, src *float32, n int) { panic(noImageKernel) }

func axpy16(alpha float32, x, y *float32, n int) { panic(noImageKernel) }

const noImageKernel = "cpu: no AVX-512 image kernel on this architecture"

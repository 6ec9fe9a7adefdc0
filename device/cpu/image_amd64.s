//go:build amd64 && !purego

#include "textflag.h"

// The AVX-512 loops of the image kernels (image_amd64.go): batch
// normalisation's column sums and elementwise passes, ReLU's bias and
// gradient. Each does, sixteen lanes at a time, exactly the operations of
// the Go loop it replaces, in the same order and with the same roundings
// (separate multiplies and adds, never fused), so the bits are the Go
// code's. ld is a row's step in bytes; a column block is 16 float32.

// func colSum16(x *float32, ld uintptr, rows int, sum *float64)
// sum[j] += float64(x[r, j]) for r = 0..rows-1 in order, j < 16; rows > 0.
TEXT ·colSum16(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ ld+8(FP), AX
	MOVQ rows+16(FP), CX
	MOVQ sum+24(FP), DI
	VMOVUPD (DI), Z0
	VMOVUPD 64(DI), Z1
colsum_loop:
	VCVTPS2PD (SI), Z2
	VCVTPS2PD 32(SI), Z3
	VADDPD Z2, Z0, Z0
	VADDPD Z3, Z1, Z1
	ADDQ AX, SI
	DECQ CX
	JNZ colsum_loop
	VMOVUPD Z0, (DI)
	VMOVUPD Z1, 64(DI)
	VZEROUPPER
	RET

// func colSqDev16(x *float32, ld uintptr, rows int, mean, sq *float64)
// d = float64(x[r, j]) - mean[j]; sq[j] += d*d, rows in order; rows > 0.
TEXT ·colSqDev16(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ ld+8(FP), AX
	MOVQ rows+16(FP), CX
	MOVQ mean+24(FP), DX
	MOVQ sq+32(FP), DI
	VMOVUPD (DX), Z4
	VMOVUPD 64(DX), Z5
	VMOVUPD (DI), Z0
	VMOVUPD 64(DI), Z1
colsqdev_loop:
	VCVTPS2PD (SI), Z2
	VCVTPS2PD 32(SI), Z3
	VSUBPD Z4, Z2, Z2
	VSUBPD Z5, Z3, Z3
	VMULPD Z2, Z2, Z2
	VMULPD Z3, Z3, Z3
	VADDPD Z2, Z0, Z0
	VADDPD Z3, Z1, Z1
	ADDQ AX, SI
	DECQ CX
	JNZ colsqdev_loop
	VMOVUPD Z0, (DI)
	VMOVUPD Z1, 64(DI)
	VZEROUPPER
	RET

// func colDot16(dy, xhat *float32, ld uintptr, rows int, db, dg *float64)
// db[j] += float64(dy[r, j]); dg[j] += float64(dy[r, j])*float64(xhat[r, j]),
// rows in order; rows > 0.
TEXT ·colDot16(SB), NOSPLIT, $0-48
	MOVQ dy+0(FP), SI
	MOVQ xhat+8(FP), BX
	MOVQ ld+16(FP), AX
	MOVQ rows+24(FP), CX
	MOVQ db+32(FP), DI
	MOVQ dg+40(FP), DX
	VMOVUPD (DI), Z0
	VMOVUPD 64(DI), Z1
	VMOVUPD (DX), Z6
	VMOVUPD 64(DX), Z7
coldot_loop:
	VCVTPS2PD (SI), Z2
	VCVTPS2PD 32(SI), Z3
	VCVTPS2PD (BX), Z4
	VCVTPS2PD 32(BX), Z5
	VADDPD Z2, Z0, Z0
	VADDPD Z3, Z1, Z1
	VMULPD Z4, Z2, Z4
	VMULPD Z5, Z3, Z5
	VADDPD Z4, Z6, Z6
	VADDPD Z5, Z7, Z7
	ADDQ AX, SI
	ADDQ AX, BX
	DECQ CX
	JNZ coldot_loop
	VMOVUPD Z0, (DI)
	VMOVUPD Z1, 64(DI)
	VMOVUPD Z6, (DX)
	VMOVUPD Z7, 64(DX)
	VZEROUPPER
	RET

// func bnNormRows(x, xhat, y *float32, rows, cols int, stats, params *float32)
// For rows×cols (cols a positive multiple of 16, rows > 0):
// h = (x - mean)*inv; xhat = h; y = gamma*h + beta, with mean, inv the
// first and second cols of stats, gamma, beta those of params.
TEXT ·bnNormRows(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ xhat+8(FP), BX
	MOVQ y+16(FP), DI
	MOVQ rows+24(FP), CX
	MOVQ cols+32(FP), R8
	MOVQ stats+40(FP), R9
	MOVQ params+48(FP), R10
	SHLQ $2, R8
bnnorm_row:
	XORQ DX, DX
bnnorm_block:
	MOVQ R9, R11
	ADDQ DX, R11
	MOVQ R10, R12
	ADDQ DX, R12
	VMOVUPS (SI)(DX*1), Z0
	VSUBPS (R11), Z0, Z0
	VMULPS (R11)(R8*1), Z0, Z0
	VMOVUPS Z0, (BX)(DX*1)
	VMULPS (R12), Z0, Z1
	VADDPS (R12)(R8*1), Z1, Z1
	VMOVUPS Z1, (DI)(DX*1)
	ADDQ $64, DX
	CMPQ DX, R8
	JLT bnnorm_block
	ADDQ R8, SI
	ADDQ R8, BX
	ADDQ R8, DI
	DECQ CX
	JNZ bnnorm_row
	VZEROUPPER
	RET

// func bnGradRows(dy, xhat, dx *float32, rows, cols int, k *float32)
// dx = kk*((dy - a) - xhat*b) for rows×cols (cols a positive multiple of
// 16, rows > 0), with kk, a, b the first, second and third cols of k.
TEXT ·bnGradRows(SB), NOSPLIT, $0-48
	MOVQ dy+0(FP), SI
	MOVQ xhat+8(FP), BX
	MOVQ dx+16(FP), DI
	MOVQ rows+24(FP), CX
	MOVQ cols+32(FP), R8
	MOVQ k+40(FP), R9
	SHLQ $2, R8
bngrad_row:
	XORQ DX, DX
bngrad_block:
	MOVQ R9, R11
	ADDQ DX, R11
	VMOVUPS (SI)(DX*1), Z0
	VSUBPS (R11)(R8*1), Z0, Z0
	LEAQ (R11)(R8*2), R12
	VMOVUPS (BX)(DX*1), Z1
	VMULPS (R12), Z1, Z1
	VSUBPS Z1, Z0, Z0
	VMULPS (R11), Z0, Z0
	VMOVUPS Z0, (DI)(DX*1)
	ADDQ $64, DX
	CMPQ DX, R8
	JLT bngrad_block
	ADDQ R8, SI
	ADDQ R8, BX
	ADDQ R8, DI
	DECQ CX
	JNZ bngrad_row
	VZEROUPPER
	RET

// func reluGrad16(z, dy, dz *float32, n int)
// dz[i] = dy[i] where z[i] > 0, else 0 (a NaN z too); n a positive
// multiple of 16. dz may be dy.
TEXT ·reluGrad16(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), SI
	MOVQ dy+8(FP), BX
	MOVQ dz+16(FP), DI
	MOVQ n+24(FP), CX
	VPXORD Z31, Z31, Z31
relugrad_loop:
	VMOVUPS (SI), Z0
	VCMPPS $0x1e, Z31, Z0, K1
	VMOVUPS.Z (BX), K1, Z1
	VMOVUPS Z1, (DI)
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ relugrad_loop
	VZEROUPPER
	RET

// func biasActRows(z, y, bias *float32, rows, cols int, relu bool)
// v = z + bias (per column); z = v; y = v, or with relu max(v, 0) as Go's
// max has it: v where v > 0 or v is NaN, else +0. cols a positive
// multiple of 16, rows > 0; y may be z.
TEXT ·biasActRows(SB), NOSPLIT, $0-41
	MOVQ z+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ bias+16(FP), R9
	MOVQ rows+24(FP), CX
	MOVQ cols+32(FP), R8
	MOVBLZX relu+40(FP), R10
	SHLQ $2, R8
	VPXORD Z31, Z31, Z31
	KXNORW K1, K1, K1
biasact_row:
	XORQ DX, DX
biasact_block:
	VMOVUPS (SI)(DX*1), Z0
	VADDPS (R9)(DX*1), Z0, Z0
	VMOVUPS Z0, (SI)(DX*1)
	TESTQ R10, R10
	JZ biasact_store
	// not (v <= 0), unordered true: v > 0 or NaN
	VCMPPS $0x16, Z31, Z0, K1
biasact_store:
	VMOVUPS.Z Z0, K1, Z1
	VMOVUPS Z1, (DI)(DX*1)
	ADDQ $64, DX
	CMPQ DX, R8
	JLT biasact_block
	ADDQ R8, SI
	ADDQ R8, DI
	DECQ CX
	JNZ biasact_row
	VZEROUPPER
	RET

// func maxPool16(x *float32, pix, row uintptr, nh, nw int, at0, kw float32, y, arg *float32, blocks int)
// One output pixel of max pooling, 16 channels a block for blocks blocks:
// the window's pixels inside the image are nh rows of nw, the first at x,
// pix bytes from one to the next and row bytes from one row to the next;
// the first's window position is at0 and a row of the window adds kw.
// best and its position are taken over, as maxPool's masks do, when a
// pixel is larger or is the first NaN; y gets the maximum and arg its
// position as a float32. nh, nw, blocks > 0.
TEXT ·maxPool16(SB), NOSPLIT, $0-72
	MOVQ x+0(FP), SI
	MOVQ pix+8(FP), R8
	MOVQ row+16(FP), R9
	MOVQ y+48(FP), DI
	MOVQ arg+56(FP), DX
	MOVQ blocks+64(FP), CX
	VBROADCASTSS kw+44(FP), Z7
	MOVL $0x3f800000, AX
	VPBROADCASTD AX, Z5
maxpool_block:
	VMOVUPS (SI), Z0
	VBROADCASTSS at0+40(FP), Z6
	VMOVAPS Z6, Z1
	MOVQ SI, BX
	MOVQ nh+24(FP), R10
maxpool_row:
	MOVQ BX, R12
	VMOVAPS Z6, Z4
	MOVQ nw+32(FP), R11
maxpool_pixel:
	VMOVUPS (R12), Z2
	VCMPPS $0x1e, Z0, Z2, K1
	VCMPPS $0x03, Z2, Z2, K2
	VCMPPS $0x07, Z0, Z0, K3
	KANDW K2, K3, K2
	KORW K1, K2, K1
	VMOVAPS Z2, K1, Z0
	VMOVAPS Z4, K1, Z1
	VADDPS Z5, Z4, Z4
	ADDQ R8, R12
	DECQ R11
	JNZ maxpool_pixel
	VADDPS Z7, Z6, Z6
	ADDQ R9, BX
	DECQ R10
	JNZ maxpool_row
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, (DX)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, DX
	DECQ CX
	JNZ maxpool_block
	VZEROUPPER
	RET

// func add16(dst, src *float32, n int)
// dst[i] += src[i] for i < n, n a positive multiple of 16.
TEXT ·add16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
add_loop:
	VMOVUPS (DI), Z0
	VADDPS (SI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ add_loop
	VZEROUPPER
	RET

// func axpy16(alpha float32, x, y *float32, n int)
// y[i] += alpha*x[i], the product rounded before the addition, for i < n,
// n a positive multiple of 16.
TEXT ·axpy16(SB), NOSPLIT, $0-32
	VBROADCASTSS alpha+0(FP), Z1
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
axpy_loop:
	VMULPS (SI), Z1, Z0
	VADDPS (DI), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ axpy_loop
	VZEROUPPER
	RET

// func maxPoolGradRow16(dy, arg, dx *float32, ow, k, at0, blocks int)
// One input row of the max-pool gradient where the k×k windows tile the
// image (stride k, no padding): for each of the row's ow windows and each
// of its k pixels (positions at0..at0+k-1), 16 channels a block for blocks
// blocks, dx = 0 + dy where arg >= 0 and int(arg) is the pixel's position
// (truncated, as Go converts), else 0: the one term maxPoolGrad adds to
// the cleared pixel, or none. ow, k, blocks > 0.
TEXT ·maxPoolGradRow16(SB), NOSPLIT, $0-56
	MOVQ dy+0(FP), SI
	MOVQ arg+8(FP), R8
	MOVQ dx+16(FP), DI
	MOVQ ow+24(FP), CX
	MOVQ k+32(FP), R9
	MOVQ blocks+48(FP), R11
	MOVQ R11, R12
	SHLQ $6, R12
	VPXORD Z0, Z0, Z0
maxpoolgrad_window:
	XORQ BX, BX
	MOVQ R11, DX
maxpoolgrad_block:
	VMOVUPS (R8)(BX*1), Z1
	VMOVUPS (SI)(BX*1), Z2
	VADDPS Z2, Z0, Z2
	VCMPPS $0x1d, Z0, Z1, K1
	VCVTTPS2DQ Z1, Z3
	MOVQ at0+40(FP), AX
	LEAQ (DI)(BX*1), R13
	MOVQ R9, R14
maxpoolgrad_pixel:
	VPBROADCASTD AX, Z4
	VPCMPEQD Z4, Z3, K1, K2
	VMOVAPS.Z Z2, K2, Z5
	VMOVUPS Z5, (R13)
	INCQ AX
	ADDQ R12, R13
	DECQ R14
	JNZ maxpoolgrad_pixel
	ADDQ $64, BX
	DECQ DX
	JNZ maxpoolgrad_block
	ADDQ R12, SI
	ADDQ R12, R8
	MOVQ R12, AX
	IMULQ R9, AX
	ADDQ AX, DI
	DECQ CX
	JNZ maxpoolgrad_window
	VZEROUPPER
	RET

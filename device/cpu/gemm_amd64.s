//go:build amd64 && !purego

#include "textflag.h"

// The GEMM micro-kernels (gemm_amd64.go): a 4×16 block of C, each row two
// 8-lane AVX vectors, accumulated in registers over the whole k. For every
// l in order, each element gets one float32 product, rounded, then one
// float32 addition, rounded: VMULPS then VADDPS, never a fused
// multiply-add, so each element is the plain loop's (gemmLoop) bit for bit,
// whatever its row or column position and however the product is split.
//
// a points at op(A)[i,0]; rs is the byte step from one row of op(A) to the
// next, cs from one l to the next. b points at B[0,j] of the k×n B, ldb its
// row step in bytes; c at C[i,j], ldc in bytes. load says whether C is the
// starting value (else 0). The masked form loads and stores only the
// columns whose mask lane is all ones.

// func kern4x16(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool)
TEXT ·kern4x16(SB), NOSPLIT, $0-65
	MOVQ a+0(FP), R8
	MOVQ rs+8(FP), AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ cs+16(FP), R12
	MOVQ b+24(FP), SI
	MOVQ ldb+32(FP), R13
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	MOVQ k+56(FP), CX
	MOVBLZX load+64(FP), AX
	TESTQ AX, AX
	JZ kern4x16_zero
	MOVQ DI, BX
	VMOVUPS (BX), Y0
	VMOVUPS 32(BX), Y1
	ADDQ DX, BX
	VMOVUPS (BX), Y2
	VMOVUPS 32(BX), Y3
	ADDQ DX, BX
	VMOVUPS (BX), Y4
	VMOVUPS 32(BX), Y5
	ADDQ DX, BX
	VMOVUPS (BX), Y6
	VMOVUPS 32(BX), Y7
	JMP kern4x16_start
kern4x16_zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
kern4x16_start:
	XORQ BX, BX
	TESTQ CX, CX
	JZ kern4x16_store
kern4x16_loop:
	VMOVUPS (SI), Y8
	VMOVUPS 32(SI), Y9
	VBROADCASTSS (R8)(BX*1), Y10
	VMULPS Y8, Y10, Y11
	VADDPS Y11, Y0, Y0
	VMULPS Y9, Y10, Y11
	VADDPS Y11, Y1, Y1
	VBROADCASTSS (R9)(BX*1), Y14
	VMULPS Y8, Y14, Y15
	VADDPS Y15, Y2, Y2
	VMULPS Y9, Y14, Y15
	VADDPS Y15, Y3, Y3
	VBROADCASTSS (R10)(BX*1), Y10
	VMULPS Y8, Y10, Y11
	VADDPS Y11, Y4, Y4
	VMULPS Y9, Y10, Y11
	VADDPS Y11, Y5, Y5
	VBROADCASTSS (R11)(BX*1), Y14
	VMULPS Y8, Y14, Y15
	VADDPS Y15, Y6, Y6
	VMULPS Y9, Y14, Y15
	VADDPS Y15, Y7, Y7
	ADDQ R12, BX
	ADDQ R13, SI
	DECQ CX
	JNZ kern4x16_loop
kern4x16_store:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ DX, DI
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ DX, DI
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ DX, DI
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	VZEROUPPER
	RET

// func kern4x16Masked(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask *int32)
TEXT ·kern4x16Masked(SB), NOSPLIT, $0-80
	MOVQ a+0(FP), R8
	MOVQ rs+8(FP), AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ cs+16(FP), R12
	MOVQ b+24(FP), SI
	MOVQ ldb+32(FP), R13
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	MOVQ k+56(FP), CX
	MOVQ mask+72(FP), AX
	VMOVDQU (AX), Y12
	VMOVDQU 32(AX), Y13
	MOVBLZX load+64(FP), AX
	TESTQ AX, AX
	JZ kern4x16Masked_zero
	MOVQ DI, BX
	VMASKMOVPS (BX), Y12, Y0
	VMASKMOVPS 32(BX), Y13, Y1
	ADDQ DX, BX
	VMASKMOVPS (BX), Y12, Y2
	VMASKMOVPS 32(BX), Y13, Y3
	ADDQ DX, BX
	VMASKMOVPS (BX), Y12, Y4
	VMASKMOVPS 32(BX), Y13, Y5
	ADDQ DX, BX
	VMASKMOVPS (BX), Y12, Y6
	VMASKMOVPS 32(BX), Y13, Y7
	JMP kern4x16Masked_start
kern4x16Masked_zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
kern4x16Masked_start:
	XORQ BX, BX
	TESTQ CX, CX
	JZ kern4x16Masked_store
kern4x16Masked_loop:
	VMASKMOVPS (SI), Y12, Y8
	VMASKMOVPS 32(SI), Y13, Y9
	VBROADCASTSS (R8)(BX*1), Y10
	VMULPS Y8, Y10, Y11
	VADDPS Y11, Y0, Y0
	VMULPS Y9, Y10, Y11
	VADDPS Y11, Y1, Y1
	VBROADCASTSS (R9)(BX*1), Y14
	VMULPS Y8, Y14, Y15
	VADDPS Y15, Y2, Y2
	VMULPS Y9, Y14, Y15
	VADDPS Y15, Y3, Y3
	VBROADCASTSS (R10)(BX*1), Y10
	VMULPS Y8, Y10, Y11
	VADDPS Y11, Y4, Y4
	VMULPS Y9, Y10, Y11
	VADDPS Y11, Y5, Y5
	VBROADCASTSS (R11)(BX*1), Y14
	VMULPS Y8, Y14, Y15
	VADDPS Y15, Y6, Y6
	VMULPS Y9, Y14, Y15
	VADDPS Y15, Y7, Y7
	ADDQ R12, BX
	ADDQ R13, SI
	DECQ CX
	JNZ kern4x16Masked_loop
kern4x16Masked_store:
	VMASKMOVPS Y0, Y12, (DI)
	VMASKMOVPS Y1, Y13, 32(DI)
	ADDQ DX, DI
	VMASKMOVPS Y2, Y12, (DI)
	VMASKMOVPS Y3, Y13, 32(DI)
	ADDQ DX, DI
	VMASKMOVPS Y4, Y12, (DI)
	VMASKMOVPS Y5, Y13, 32(DI)
	ADDQ DX, DI
	VMASKMOVPS Y6, Y12, (DI)
	VMASKMOVPS Y7, Y13, 32(DI)
	VZEROUPPER
	RET

// func kern4x32(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32)
//
// The AVX-512 form of kern4x16: a 4×32 block of C, each row two 16-lane
// vectors, in the same order of separate multiplies and adds, so the same
// bits. mask's bit j says whether column j of the block is C's: loads of B
// and C and stores of C touch only those (opmask registers K1 and K2).
//
// Each element of op(A) reaches the multiplies as an embedded broadcast
// (VMULPS.BCST m32): on Zen 4 a separate VBROADCASTSS into a 512-bit
// register takes a slot of the vector pipes that the multiplies and adds
// need, and the broadcast in the multiply's load does not. A product is
// the same product, so the bits are unchanged; the AVX-512 tiles ran
// 25-35% faster for it (BenchmarkGemmThreads).
TEXT ·kern4x32(SB), NOSPLIT, $0-72
	MOVQ a+0(FP), R8
	MOVQ rs+8(FP), AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	MOVQ cs+16(FP), R12
	MOVQ b+24(FP), SI
	MOVQ ldb+32(FP), R13
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	MOVQ k+56(FP), CX
	MOVL mask+68(FP), AX
	KMOVW AX, K1
	SHRL $16, AX
	KMOVW AX, K2
	MOVBLZX load+64(FP), AX
	TESTQ AX, AX
	JZ kern4x32_zero
	MOVQ DI, BX
	VMOVUPS.Z (BX), K1, Z0
	VMOVUPS.Z 64(BX), K2, Z1
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z2
	VMOVUPS.Z 64(BX), K2, Z3
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z4
	VMOVUPS.Z 64(BX), K2, Z5
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z6
	VMOVUPS.Z 64(BX), K2, Z7
	JMP kern4x32_start
kern4x32_zero:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
kern4x32_start:
	XORQ BX, BX
	TESTQ CX, CX
	JZ kern4x32_store
kern4x32_loop:
	VMOVUPS.Z (SI), K1, Z8
	VMOVUPS.Z 64(SI), K2, Z9
	VMULPS.BCST (R8)(BX*1), Z8, Z11
	VMULPS.BCST (R8)(BX*1), Z9, Z12
	VADDPS Z11, Z0, Z0
	VADDPS Z12, Z1, Z1
	VMULPS.BCST (R9)(BX*1), Z8, Z14
	VMULPS.BCST (R9)(BX*1), Z9, Z15
	VADDPS Z14, Z2, Z2
	VADDPS Z15, Z3, Z3
	VMULPS.BCST (R10)(BX*1), Z8, Z17
	VMULPS.BCST (R10)(BX*1), Z9, Z18
	VADDPS Z17, Z4, Z4
	VADDPS Z18, Z5, Z5
	VMULPS.BCST (R11)(BX*1), Z8, Z20
	VMULPS.BCST (R11)(BX*1), Z9, Z21
	VADDPS Z20, Z6, Z6
	VADDPS Z21, Z7, Z7
	ADDQ R12, BX
	ADDQ R13, SI
	DECQ CX
	JNZ kern4x32_loop
kern4x32_store:
	VMOVUPS Z0, K1, (DI)
	VMOVUPS Z1, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z2, K1, (DI)
	VMOVUPS Z3, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z4, K1, (DI)
	VMOVUPS Z5, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z6, K1, (DI)
	VMOVUPS Z7, K2, 64(DI)
	VZEROUPPER
	RET

// func kern8x32(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32)
//
// kern4x32 for 8 rows: each column of B loaded serves 8 rows, halving the
// loads per product, the bound of the 4-row tile. The same order of
// separate multiplies and adds, so the same bits. Rows 4..7 of op(A) use
// DI and DX as pointers, so C and its step are read again to store.
TEXT ·kern8x32(SB), NOSPLIT, $0-72
	MOVL mask+68(FP), AX
	KMOVW AX, K1
	SHRL $16, AX
	KMOVW AX, K2
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	MOVBLZX load+64(FP), AX
	TESTQ AX, AX
	JZ kern8x32_zero
	MOVQ DI, BX
	VMOVUPS.Z (BX), K1, Z0
	VMOVUPS.Z 64(BX), K2, Z1
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z2
	VMOVUPS.Z 64(BX), K2, Z3
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z4
	VMOVUPS.Z 64(BX), K2, Z5
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z6
	VMOVUPS.Z 64(BX), K2, Z7
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z8
	VMOVUPS.Z 64(BX), K2, Z9
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z10
	VMOVUPS.Z 64(BX), K2, Z11
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z12
	VMOVUPS.Z 64(BX), K2, Z13
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z14
	VMOVUPS.Z 64(BX), K2, Z15
	JMP kern8x32_rows
kern8x32_zero:
	// C is written, not read: ask for its lines now, so that their
	// misses overlap the products instead of holding up the stores.
	MOVQ DI, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	ADDQ DX, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	ADDQ DX, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	ADDQ DX, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	ADDQ DX, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	ADDQ DX, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	ADDQ DX, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	ADDQ DX, BX
	PREFETCHT0 (BX)
	PREFETCHT0 64(BX)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
kern8x32_rows:
	MOVQ a+0(FP), R8
	MOVQ rs+8(FP), AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	LEAQ (R11)(AX*1), R14
	LEAQ (R14)(AX*1), R15
	LEAQ (R15)(AX*1), DI
	LEAQ (DI)(AX*1), DX
	MOVQ cs+16(FP), R12
	MOVQ b+24(FP), SI
	MOVQ ldb+32(FP), R13
	MOVQ k+56(FP), CX
	XORQ BX, BX
	TESTQ CX, CX
	JZ kern8x32_store
kern8x32_loop:
	VMOVUPS.Z (SI), K1, Z16
	VMOVUPS.Z 64(SI), K2, Z17
	// The next 32 columns of this row of B: the next tile's, which its
	// first rows of tiles would otherwise wait for (B's rows read in
	// place, far apart: a convolution's columns, its weights).
	PREFETCHT0 128(SI)
	PREFETCHT0 192(SI)
	VMULPS.BCST (R8)(BX*1), Z16, Z19
	VMULPS.BCST (R8)(BX*1), Z17, Z20
	VADDPS Z19, Z0, Z0
	VADDPS Z20, Z1, Z1
	VMULPS.BCST (R9)(BX*1), Z16, Z22
	VMULPS.BCST (R9)(BX*1), Z17, Z23
	VADDPS Z22, Z2, Z2
	VADDPS Z23, Z3, Z3
	VMULPS.BCST (R10)(BX*1), Z16, Z25
	VMULPS.BCST (R10)(BX*1), Z17, Z26
	VADDPS Z25, Z4, Z4
	VADDPS Z26, Z5, Z5
	VMULPS.BCST (R11)(BX*1), Z16, Z28
	VMULPS.BCST (R11)(BX*1), Z17, Z29
	VADDPS Z28, Z6, Z6
	VADDPS Z29, Z7, Z7
	VMULPS.BCST (R14)(BX*1), Z16, Z19
	VMULPS.BCST (R14)(BX*1), Z17, Z20
	VADDPS Z19, Z8, Z8
	VADDPS Z20, Z9, Z9
	VMULPS.BCST (R15)(BX*1), Z16, Z22
	VMULPS.BCST (R15)(BX*1), Z17, Z23
	VADDPS Z22, Z10, Z10
	VADDPS Z23, Z11, Z11
	VMULPS.BCST (DI)(BX*1), Z16, Z25
	VMULPS.BCST (DI)(BX*1), Z17, Z26
	VADDPS Z25, Z12, Z12
	VADDPS Z26, Z13, Z13
	VMULPS.BCST (DX)(BX*1), Z16, Z28
	VMULPS.BCST (DX)(BX*1), Z17, Z29
	VADDPS Z28, Z14, Z14
	VADDPS Z29, Z15, Z15
	ADDQ R12, BX
	ADDQ R13, SI
	DECQ CX
	JNZ kern8x32_loop
kern8x32_store:
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	VMOVUPS Z0, K1, (DI)
	VMOVUPS Z1, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z2, K1, (DI)
	VMOVUPS Z3, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z4, K1, (DI)
	VMOVUPS Z5, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z6, K1, (DI)
	VMOVUPS Z7, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z8, K1, (DI)
	VMOVUPS Z9, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z10, K1, (DI)
	VMOVUPS Z11, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z12, K1, (DI)
	VMOVUPS Z13, K2, 64(DI)
	ADDQ DX, DI
	VMOVUPS Z14, K1, (DI)
	VMOVUPS Z15, K2, 64(DI)
	VZEROUPPER
	RET

// func kern8x16(a *float32, rs, cs uintptr, b *float32, ldb uintptr, c *float32, ldc uintptr, k int, load bool, mask uint32)
//
// The AVX-512 tile for narrow products (C under 32 columns wide, the
// output layer's): 8 rows of one 16-lane vector, the columns outside
// mask's low 16 bits neither loaded nor stored (opmask K1, which AVX's
// VMASKMOVPS is slow to emulate on some cores). The same order of separate
// multiplies and adds, so the same bits.
TEXT ·kern8x16(SB), NOSPLIT, $0-72
	MOVL mask+68(FP), AX
	KMOVW AX, K1
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	MOVBLZX load+64(FP), AX
	TESTQ AX, AX
	JZ kern8x16_zero
	MOVQ DI, BX
	VMOVUPS.Z (BX), K1, Z0
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z1
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z2
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z3
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z4
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z5
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z6
	ADDQ DX, BX
	VMOVUPS.Z (BX), K1, Z7
	JMP kern8x16_rows
kern8x16_zero:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
kern8x16_rows:
	MOVQ a+0(FP), R8
	MOVQ rs+8(FP), AX
	LEAQ (R8)(AX*1), R9
	LEAQ (R9)(AX*1), R10
	LEAQ (R10)(AX*1), R11
	LEAQ (R11)(AX*1), R14
	LEAQ (R14)(AX*1), R15
	LEAQ (R15)(AX*1), DI
	LEAQ (DI)(AX*1), DX
	MOVQ cs+16(FP), R12
	MOVQ b+24(FP), SI
	MOVQ ldb+32(FP), R13
	MOVQ k+56(FP), CX
	XORQ BX, BX
	TESTQ CX, CX
	JZ kern8x16_store
kern8x16_loop:
	VMOVUPS.Z (SI), K1, Z16
	VMULPS.BCST (R8)(BX*1), Z16, Z18
	VADDPS Z18, Z0, Z0
	VMULPS.BCST (R9)(BX*1), Z16, Z20
	VADDPS Z20, Z1, Z1
	VMULPS.BCST (R10)(BX*1), Z16, Z22
	VADDPS Z22, Z2, Z2
	VMULPS.BCST (R11)(BX*1), Z16, Z24
	VADDPS Z24, Z3, Z3
	VMULPS.BCST (R14)(BX*1), Z16, Z18
	VADDPS Z18, Z4, Z4
	VMULPS.BCST (R15)(BX*1), Z16, Z20
	VADDPS Z20, Z5, Z5
	VMULPS.BCST (DI)(BX*1), Z16, Z22
	VADDPS Z22, Z6, Z6
	VMULPS.BCST (DX)(BX*1), Z16, Z24
	VADDPS Z24, Z7, Z7
	ADDQ R12, BX
	ADDQ R13, SI
	DECQ CX
	JNZ kern8x16_loop
kern8x16_store:
	MOVQ c+40(FP), DI
	MOVQ ldc+48(FP), DX
	VMOVUPS Z0, K1, (DI)
	ADDQ DX, DI
	VMOVUPS Z1, K1, (DI)
	ADDQ DX, DI
	VMOVUPS Z2, K1, (DI)
	ADDQ DX, DI
	VMOVUPS Z3, K1, (DI)
	ADDQ DX, DI
	VMOVUPS Z4, K1, (DI)
	ADDQ DX, DI
	VMOVUPS Z5, K1, (DI)
	ADDQ DX, DI
	VMOVUPS Z6, K1, (DI)
	ADDQ DX, DI
	VMOVUPS Z7, K1, (DI)
	VZEROUPPER
	RET

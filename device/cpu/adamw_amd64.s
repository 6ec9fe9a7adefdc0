//go:build amd64 && !purego

#include "textflag.h"

// adamW8 is adamW's loop (kernels.go) eight elements at a time in AVX,
// with the same operations in the same order, each rounded to float32 as
// Go rounds them: no fused multiply-add, and a correctly rounded division
// and square root, as Go's are. So it gives adamW's bits.
//
// func adamW8(p, grad, m, v *float32, n int, k *adamConsts)
// n is a positive multiple of 8; k holds beta1, 1-beta1, beta2, 1-beta2,
// bias1, bias2, eps, lr and the weight decay.
TEXT ·adamW8(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Y8
	VBROADCASTSS 4(AX), Y9
	VBROADCASTSS 8(AX), Y10
	VBROADCASTSS 12(AX), Y11
	VBROADCASTSS 16(AX), Y12
	VBROADCASTSS 20(AX), Y13
	VBROADCASTSS 24(AX), Y14
	VBROADCASTSS 28(AX), Y15
	VBROADCASTSS 32(AX), Y7
adamw_loop:
	VMOVUPS (DI), Y0
	VMOVUPS (SI), Y1
	VMOVUPS (DX), Y2
	VMULPS Y2, Y8, Y2
	VMULPS Y1, Y9, Y4
	VADDPS Y4, Y2, Y2
	VMOVUPS Y2, (DX)
	VMOVUPS (BX), Y3
	VMULPS Y3, Y10, Y3
	VMULPS Y1, Y11, Y4
	VMULPS Y1, Y4, Y4
	VADDPS Y4, Y3, Y3
	VMOVUPS Y3, (BX)
	VDIVPS Y13, Y3, Y4
	VSQRTPS Y4, Y4
	VADDPS Y14, Y4, Y4
	VDIVPS Y12, Y2, Y5
	VDIVPS Y4, Y5, Y5
	VMULPS Y0, Y7, Y4
	VADDPS Y5, Y4, Y4
	VMULPS Y4, Y15, Y4
	VSUBPS Y4, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	SUBQ $8, CX
	JNZ adamw_loop
	VZEROUPPER
	RET

//go:build amd64 && !purego

#include "textflag.h"

// GELU and its derivative eight lanes at a time in AVX2, with the bits of
// gelu, geluGrad and exp32 (kernels.go): the same float32 operations in the
// same order, each rounded, no fused multiply-add, the same special cases.
// TestGELUVectorMatchesScalar compares them over a dense sweep.

DATA gelu_log2e<>+0(SB)/4, $0x3fb8aa3b
DATA gelu_log2e<>+4(SB)/4, $0x3fb8aa3b
DATA gelu_log2e<>+8(SB)/4, $0x3fb8aa3b
DATA gelu_log2e<>+12(SB)/4, $0x3fb8aa3b
DATA gelu_log2e<>+16(SB)/4, $0x3fb8aa3b
DATA gelu_log2e<>+20(SB)/4, $0x3fb8aa3b
DATA gelu_log2e<>+24(SB)/4, $0x3fb8aa3b
DATA gelu_log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL gelu_log2e<>(SB), RODATA|NOPTR, $32
DATA gelu_half<>+0(SB)/4, $0x3f000000
DATA gelu_half<>+4(SB)/4, $0x3f000000
DATA gelu_half<>+8(SB)/4, $0x3f000000
DATA gelu_half<>+12(SB)/4, $0x3f000000
DATA gelu_half<>+16(SB)/4, $0x3f000000
DATA gelu_half<>+20(SB)/4, $0x3f000000
DATA gelu_half<>+24(SB)/4, $0x3f000000
DATA gelu_half<>+28(SB)/4, $0x3f000000
GLOBL gelu_half<>(SB), RODATA|NOPTR, $32
DATA gelu_nhalf<>+0(SB)/4, $0xbf000000
DATA gelu_nhalf<>+4(SB)/4, $0xbf000000
DATA gelu_nhalf<>+8(SB)/4, $0xbf000000
DATA gelu_nhalf<>+12(SB)/4, $0xbf000000
DATA gelu_nhalf<>+16(SB)/4, $0xbf000000
DATA gelu_nhalf<>+20(SB)/4, $0xbf000000
DATA gelu_nhalf<>+24(SB)/4, $0xbf000000
DATA gelu_nhalf<>+28(SB)/4, $0xbf000000
GLOBL gelu_nhalf<>(SB), RODATA|NOPTR, $32
DATA gelu_ln2hi<>+0(SB)/4, $0x3f317200
DATA gelu_ln2hi<>+4(SB)/4, $0x3f317200
DATA gelu_ln2hi<>+8(SB)/4, $0x3f317200
DATA gelu_ln2hi<>+12(SB)/4, $0x3f317200
DATA gelu_ln2hi<>+16(SB)/4, $0x3f317200
DATA gelu_ln2hi<>+20(SB)/4, $0x3f317200
DATA gelu_ln2hi<>+24(SB)/4, $0x3f317200
DATA gelu_ln2hi<>+28(SB)/4, $0x3f317200
GLOBL gelu_ln2hi<>(SB), RODATA|NOPTR, $32
DATA gelu_ln2lo<>+0(SB)/4, $0x35bfbe8e
DATA gelu_ln2lo<>+4(SB)/4, $0x35bfbe8e
DATA gelu_ln2lo<>+8(SB)/4, $0x35bfbe8e
DATA gelu_ln2lo<>+12(SB)/4, $0x35bfbe8e
DATA gelu_ln2lo<>+16(SB)/4, $0x35bfbe8e
DATA gelu_ln2lo<>+20(SB)/4, $0x35bfbe8e
DATA gelu_ln2lo<>+24(SB)/4, $0x35bfbe8e
DATA gelu_ln2lo<>+28(SB)/4, $0x35bfbe8e
GLOBL gelu_ln2lo<>(SB), RODATA|NOPTR, $32
DATA gelu_one<>+0(SB)/4, $0x3f800000
DATA gelu_one<>+4(SB)/4, $0x3f800000
DATA gelu_one<>+8(SB)/4, $0x3f800000
DATA gelu_one<>+12(SB)/4, $0x3f800000
DATA gelu_one<>+16(SB)/4, $0x3f800000
DATA gelu_one<>+20(SB)/4, $0x3f800000
DATA gelu_one<>+24(SB)/4, $0x3f800000
DATA gelu_one<>+28(SB)/4, $0x3f800000
GLOBL gelu_one<>(SB), RODATA|NOPTR, $32
DATA gelu_c2<>+0(SB)/4, $0x3f000000
DATA gelu_c2<>+4(SB)/4, $0x3f000000
DATA gelu_c2<>+8(SB)/4, $0x3f000000
DATA gelu_c2<>+12(SB)/4, $0x3f000000
DATA gelu_c2<>+16(SB)/4, $0x3f000000
DATA gelu_c2<>+20(SB)/4, $0x3f000000
DATA gelu_c2<>+24(SB)/4, $0x3f000000
DATA gelu_c2<>+28(SB)/4, $0x3f000000
GLOBL gelu_c2<>(SB), RODATA|NOPTR, $32
DATA gelu_c6<>+0(SB)/4, $0x3e2aaaab
DATA gelu_c6<>+4(SB)/4, $0x3e2aaaab
DATA gelu_c6<>+8(SB)/4, $0x3e2aaaab
DATA gelu_c6<>+12(SB)/4, $0x3e2aaaab
DATA gelu_c6<>+16(SB)/4, $0x3e2aaaab
DATA gelu_c6<>+20(SB)/4, $0x3e2aaaab
DATA gelu_c6<>+24(SB)/4, $0x3e2aaaab
DATA gelu_c6<>+28(SB)/4, $0x3e2aaaab
GLOBL gelu_c6<>(SB), RODATA|NOPTR, $32
DATA gelu_c24<>+0(SB)/4, $0x3d2aaaab
DATA gelu_c24<>+4(SB)/4, $0x3d2aaaab
DATA gelu_c24<>+8(SB)/4, $0x3d2aaaab
DATA gelu_c24<>+12(SB)/4, $0x3d2aaaab
DATA gelu_c24<>+16(SB)/4, $0x3d2aaaab
DATA gelu_c24<>+20(SB)/4, $0x3d2aaaab
DATA gelu_c24<>+24(SB)/4, $0x3d2aaaab
DATA gelu_c24<>+28(SB)/4, $0x3d2aaaab
GLOBL gelu_c24<>(SB), RODATA|NOPTR, $32
DATA gelu_c120<>+0(SB)/4, $0x3c088889
DATA gelu_c120<>+4(SB)/4, $0x3c088889
DATA gelu_c120<>+8(SB)/4, $0x3c088889
DATA gelu_c120<>+12(SB)/4, $0x3c088889
DATA gelu_c120<>+16(SB)/4, $0x3c088889
DATA gelu_c120<>+20(SB)/4, $0x3c088889
DATA gelu_c120<>+24(SB)/4, $0x3c088889
DATA gelu_c120<>+28(SB)/4, $0x3c088889
GLOBL gelu_c120<>(SB), RODATA|NOPTR, $32
DATA gelu_c720<>+0(SB)/4, $0x3ab60b61
DATA gelu_c720<>+4(SB)/4, $0x3ab60b61
DATA gelu_c720<>+8(SB)/4, $0x3ab60b61
DATA gelu_c720<>+12(SB)/4, $0x3ab60b61
DATA gelu_c720<>+16(SB)/4, $0x3ab60b61
DATA gelu_c720<>+20(SB)/4, $0x3ab60b61
DATA gelu_c720<>+24(SB)/4, $0x3ab60b61
DATA gelu_c720<>+28(SB)/4, $0x3ab60b61
GLOBL gelu_c720<>(SB), RODATA|NOPTR, $32
DATA gelu_c5040<>+0(SB)/4, $0x39500d01
DATA gelu_c5040<>+4(SB)/4, $0x39500d01
DATA gelu_c5040<>+8(SB)/4, $0x39500d01
DATA gelu_c5040<>+12(SB)/4, $0x39500d01
DATA gelu_c5040<>+16(SB)/4, $0x39500d01
DATA gelu_c5040<>+20(SB)/4, $0x39500d01
DATA gelu_c5040<>+24(SB)/4, $0x39500d01
DATA gelu_c5040<>+28(SB)/4, $0x39500d01
GLOBL gelu_c5040<>(SB), RODATA|NOPTR, $32
DATA gelu_upper<>+0(SB)/4, $0x42b17218
DATA gelu_upper<>+4(SB)/4, $0x42b17218
DATA gelu_upper<>+8(SB)/4, $0x42b17218
DATA gelu_upper<>+12(SB)/4, $0x42b17218
DATA gelu_upper<>+16(SB)/4, $0x42b17218
DATA gelu_upper<>+20(SB)/4, $0x42b17218
DATA gelu_upper<>+24(SB)/4, $0x42b17218
DATA gelu_upper<>+28(SB)/4, $0x42b17218
GLOBL gelu_upper<>(SB), RODATA|NOPTR, $32
DATA gelu_lower<>+0(SB)/4, $0xc2aeac4f
DATA gelu_lower<>+4(SB)/4, $0xc2aeac4f
DATA gelu_lower<>+8(SB)/4, $0xc2aeac4f
DATA gelu_lower<>+12(SB)/4, $0xc2aeac4f
DATA gelu_lower<>+16(SB)/4, $0xc2aeac4f
DATA gelu_lower<>+20(SB)/4, $0xc2aeac4f
DATA gelu_lower<>+24(SB)/4, $0xc2aeac4f
DATA gelu_lower<>+28(SB)/4, $0xc2aeac4f
GLOBL gelu_lower<>(SB), RODATA|NOPTR, $32
DATA gelu_inf<>+0(SB)/4, $0x7f800000
DATA gelu_inf<>+4(SB)/4, $0x7f800000
DATA gelu_inf<>+8(SB)/4, $0x7f800000
DATA gelu_inf<>+12(SB)/4, $0x7f800000
DATA gelu_inf<>+16(SB)/4, $0x7f800000
DATA gelu_inf<>+20(SB)/4, $0x7f800000
DATA gelu_inf<>+24(SB)/4, $0x7f800000
DATA gelu_inf<>+28(SB)/4, $0x7f800000
GLOBL gelu_inf<>(SB), RODATA|NOPTR, $32
DATA gelu_i127<>+0(SB)/4, $0x7f
DATA gelu_i127<>+4(SB)/4, $0x7f
DATA gelu_i127<>+8(SB)/4, $0x7f
DATA gelu_i127<>+12(SB)/4, $0x7f
DATA gelu_i127<>+16(SB)/4, $0x7f
DATA gelu_i127<>+20(SB)/4, $0x7f
DATA gelu_i127<>+24(SB)/4, $0x7f
DATA gelu_i127<>+28(SB)/4, $0x7f
GLOBL gelu_i127<>(SB), RODATA|NOPTR, $32
DATA gelu_maxf<>+0(SB)/4, $0x7f7fffff
DATA gelu_maxf<>+4(SB)/4, $0x7f7fffff
DATA gelu_maxf<>+8(SB)/4, $0x7f7fffff
DATA gelu_maxf<>+12(SB)/4, $0x7f7fffff
DATA gelu_maxf<>+16(SB)/4, $0x7f7fffff
DATA gelu_maxf<>+20(SB)/4, $0x7f7fffff
DATA gelu_maxf<>+24(SB)/4, $0x7f7fffff
DATA gelu_maxf<>+28(SB)/4, $0x7f7fffff
GLOBL gelu_maxf<>(SB), RODATA|NOPTR, $32
DATA gelu_gscale<>+0(SB)/4, $0x3f4c422a
DATA gelu_gscale<>+4(SB)/4, $0x3f4c422a
DATA gelu_gscale<>+8(SB)/4, $0x3f4c422a
DATA gelu_gscale<>+12(SB)/4, $0x3f4c422a
DATA gelu_gscale<>+16(SB)/4, $0x3f4c422a
DATA gelu_gscale<>+20(SB)/4, $0x3f4c422a
DATA gelu_gscale<>+24(SB)/4, $0x3f4c422a
DATA gelu_gscale<>+28(SB)/4, $0x3f4c422a
GLOBL gelu_gscale<>(SB), RODATA|NOPTR, $32
DATA gelu_gcubic<>+0(SB)/4, $0x3d372713
DATA gelu_gcubic<>+4(SB)/4, $0x3d372713
DATA gelu_gcubic<>+8(SB)/4, $0x3d372713
DATA gelu_gcubic<>+12(SB)/4, $0x3d372713
DATA gelu_gcubic<>+16(SB)/4, $0x3d372713
DATA gelu_gcubic<>+20(SB)/4, $0x3d372713
DATA gelu_gcubic<>+24(SB)/4, $0x3d372713
DATA gelu_gcubic<>+28(SB)/4, $0x3d372713
GLOBL gelu_gcubic<>(SB), RODATA|NOPTR, $32
DATA gelu_neg2<>+0(SB)/4, $0xc0000000
DATA gelu_neg2<>+4(SB)/4, $0xc0000000
DATA gelu_neg2<>+8(SB)/4, $0xc0000000
DATA gelu_neg2<>+12(SB)/4, $0xc0000000
DATA gelu_neg2<>+16(SB)/4, $0xc0000000
DATA gelu_neg2<>+20(SB)/4, $0xc0000000
DATA gelu_neg2<>+24(SB)/4, $0xc0000000
DATA gelu_neg2<>+28(SB)/4, $0xc0000000
GLOBL gelu_neg2<>(SB), RODATA|NOPTR, $32
DATA gelu_neg2scale<>+0(SB)/4, $0xbfcc422a
DATA gelu_neg2scale<>+4(SB)/4, $0xbfcc422a
DATA gelu_neg2scale<>+8(SB)/4, $0xbfcc422a
DATA gelu_neg2scale<>+12(SB)/4, $0xbfcc422a
DATA gelu_neg2scale<>+16(SB)/4, $0xbfcc422a
DATA gelu_neg2scale<>+20(SB)/4, $0xbfcc422a
DATA gelu_neg2scale<>+24(SB)/4, $0xbfcc422a
DATA gelu_neg2scale<>+28(SB)/4, $0xbfcc422a
GLOBL gelu_neg2scale<>(SB), RODATA|NOPTR, $32
DATA gelu_c3cubic<>+0(SB)/4, $0x3e095d4f
DATA gelu_c3cubic<>+4(SB)/4, $0x3e095d4f
DATA gelu_c3cubic<>+8(SB)/4, $0x3e095d4f
DATA gelu_c3cubic<>+12(SB)/4, $0x3e095d4f
DATA gelu_c3cubic<>+16(SB)/4, $0x3e095d4f
DATA gelu_c3cubic<>+20(SB)/4, $0x3e095d4f
DATA gelu_c3cubic<>+24(SB)/4, $0x3e095d4f
DATA gelu_c3cubic<>+28(SB)/4, $0x3e095d4f
GLOBL gelu_c3cubic<>(SB), RODATA|NOPTR, $32

// EXP32 sets Y0 to exp32(Y0) in every lane, as exp32 in kernels.go
// computes it, operation for operation; it uses Y1-Y6.
#define EXP32 \
	VMULPS gelu_log2e<>(SB), Y0, Y1 \
	VXORPS Y2, Y2, Y2 \
	VCMPPS $1, Y2, Y1, Y3 \
	VMOVUPS gelu_half<>(SB), Y4 \
	VBLENDVPS Y3, gelu_nhalf<>(SB), Y4, Y4 \
	VADDPS Y4, Y1, Y1 \
	VCVTTPS2DQ Y1, Y1 \
	VCVTDQ2PS Y1, Y2 \
	VMULPS gelu_ln2hi<>(SB), Y2, Y3 \
	VSUBPS Y3, Y0, Y3 \
	VMULPS gelu_ln2lo<>(SB), Y2, Y4 \
	VSUBPS Y4, Y3, Y3 \
	VMULPS gelu_c5040<>(SB), Y3, Y4 \
	VADDPS gelu_c720<>(SB), Y4, Y4 \
	VMULPS Y3, Y4, Y4 \
	VADDPS gelu_c120<>(SB), Y4, Y4 \
	VMULPS Y3, Y4, Y4 \
	VADDPS gelu_c24<>(SB), Y4, Y4 \
	VMULPS Y3, Y4, Y4 \
	VADDPS gelu_c6<>(SB), Y4, Y4 \
	VMULPS Y3, Y4, Y4 \
	VADDPS gelu_c2<>(SB), Y4, Y4 \
	VMULPS Y3, Y4, Y4 \
	VADDPS gelu_one<>(SB), Y4, Y4 \
	VMULPS Y3, Y4, Y4 \
	VADDPS gelu_one<>(SB), Y4, Y4 \
	VPCMPGTD gelu_i127<>(SB), Y1, Y5 \
	VPADDD Y5, Y1, Y1 \
	VADDPS Y4, Y4, Y6 \
	VBLENDVPS Y5, Y6, Y4, Y4 \
	VPADDD gelu_i127<>(SB), Y1, Y1 \
	VPSLLD $23, Y1, Y1 \
	VMULPS Y1, Y4, Y4 \
	VCMPPS $14, gelu_upper<>(SB), Y0, Y5 \
	VBLENDVPS Y5, gelu_inf<>(SB), Y4, Y4 \
	VCMPPS $1, gelu_lower<>(SB), Y0, Y5 \
	VXORPS Y6, Y6, Y6 \
	VBLENDVPS Y5, Y6, Y4, Y4 \
	VCMPPS $3, Y0, Y0, Y5 \
	VBLENDVPS Y5, Y0, Y4, Y0

// func biasGELU8(z, bias, y *float32, n int)
// z[j] += bias[j]; y[j] = gelu(z[j]) for j < n, n a positive multiple of 8.
TEXT ·biasGELU8(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), DI
	MOVQ bias+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
biasgelu_loop:
	VMOVUPS (DI), Y0
	VADDPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	VMOVAPS Y0, Y7
	VMULPS gelu_gcubic<>(SB), Y0, Y1
	VMULPS Y0, Y1, Y1
	VMULPS Y0, Y1, Y1
	VADDPS Y1, Y0, Y1
	VMULPS gelu_gscale<>(SB), Y1, Y1
	VMULPS gelu_neg2<>(SB), Y1, Y0
	EXP32
	VADDPS gelu_one<>(SB), Y0, Y0
	VDIVPS Y0, Y7, Y0
	VMOVUPS Y0, (DX)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JNZ biasgelu_loop
	VZEROUPPER
	RET

// func geluGrad8(z, dy, dz *float32, n int)
// dz[i] = dy[i] * geluGrad(z[i]) for i < n, n a positive multiple of 8.
TEXT ·geluGrad8(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ dz+16(FP), DX
	MOVQ n+24(FP), CX
gelugrad_loop:
	VMOVUPS (DI), Y7
	VMULPS Y7, Y7, Y8
	VMULPS gelu_gcubic<>(SB), Y8, Y1
	VMULPS Y7, Y1, Y1
	VADDPS Y1, Y7, Y1
	VMULPS gelu_neg2scale<>(SB), Y1, Y0
	EXP32
	VADDPS gelu_one<>(SB), Y0, Y9
	VMOVUPS gelu_one<>(SB), Y10
	VDIVPS Y9, Y10, Y9
	VMULPS Y9, Y0, Y10
	VMULPS Y9, Y10, Y10
	VADDPS Y7, Y7, Y11
	VMULPS Y10, Y11, Y11
	VMULPS gelu_gscale<>(SB), Y11, Y11
	VMULPS gelu_c3cubic<>(SB), Y8, Y12
	VADDPS gelu_one<>(SB), Y12, Y12
	VMULPS Y12, Y11, Y11
	VADDPS Y11, Y9, Y11
	VXORPS Y12, Y12, Y12
	VCMPPS $0, Y12, Y10, Y13
	VCMPPS $14, gelu_maxf<>(SB), Y0, Y14
	VORPS Y14, Y13, Y13
	VBLENDVPS Y13, Y9, Y11, Y11
	VMULPS (SI), Y11, Y11
	VMOVUPS Y11, (DX)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JNZ gelugrad_loop
	VZEROUPPER
	RET

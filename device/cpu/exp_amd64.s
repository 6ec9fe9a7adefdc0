//go:build amd64 && !purego

#include "textflag.h"

// expShifted8 (exp_amd64.go): exp64 (exp.go) eight float64 lanes at a time
// in AVX-512, the same operations in the same order, each rounded on its
// own (no fused multiply-add), so the bits are exp64's.

DATA exp_log2e<>+0(SB)/8, $0x3ff71547652b82fe
GLOBL exp_log2e<>(SB), RODATA|NOPTR, $8
DATA exp_ln2hi<>+0(SB)/8, $0x3fe62e42fee00000
GLOBL exp_ln2hi<>(SB), RODATA|NOPTR, $8
DATA exp_ln2lo<>+0(SB)/8, $0x3dea39ef35793c76
GLOBL exp_ln2lo<>(SB), RODATA|NOPTR, $8
DATA exp_p1<>+0(SB)/8, $0x3fc5555555555555
GLOBL exp_p1<>(SB), RODATA|NOPTR, $8
DATA exp_p2<>+0(SB)/8, $0xbf66c16c16bebd93
GLOBL exp_p2<>(SB), RODATA|NOPTR, $8
DATA exp_p3<>+0(SB)/8, $0x3f11566aaf25de2c
GLOBL exp_p3<>(SB), RODATA|NOPTR, $8
DATA exp_p4<>+0(SB)/8, $0xbebbbd41c5d26bf1
GLOBL exp_p4<>(SB), RODATA|NOPTR, $8
DATA exp_p5<>+0(SB)/8, $0x3e66376972bea4d0
GLOBL exp_p5<>(SB), RODATA|NOPTR, $8
DATA exp_half<>+0(SB)/8, $0x3fe0000000000000
GLOBL exp_half<>(SB), RODATA|NOPTR, $8
DATA exp_one<>+0(SB)/8, $0x3ff0000000000000
GLOBL exp_one<>(SB), RODATA|NOPTR, $8
DATA exp_two<>+0(SB)/8, $0x4000000000000000
GLOBL exp_two<>(SB), RODATA|NOPTR, $8
DATA exp_low<>+0(SB)/8, $0xc086200000000000
GLOBL exp_low<>(SB), RODATA|NOPTR, $8
DATA exp_high<>+0(SB)/8, $0x4086280000000000
GLOBL exp_high<>(SB), RODATA|NOPTR, $8
DATA exp_sign<>+0(SB)/8, $0x8000000000000000
GLOBL exp_sign<>(SB), RODATA|NOPTR, $8
DATA exp_bias<>+0(SB)/8, $0x00000000000003ff
GLOBL exp_bias<>(SB), RODATA|NOPTR, $8

// func expShifted8(x *float32, top, scale, off float64, out *float64, n int) int
TEXT ·expShifted8(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ out+32(FP), DI
	MOVQ n+40(FP), CX
	XORQ DX, DX
	VBROADCASTSD top+8(FP), Z31
	VBROADCASTSD scale+16(FP), Z30
	VBROADCASTSD off+24(FP), Z29
	VBROADCASTSD exp_log2e<>(SB), Z28
	VBROADCASTSD exp_ln2hi<>(SB), Z27
	VBROADCASTSD exp_ln2lo<>(SB), Z26
	VBROADCASTSD exp_p1<>(SB), Z25
	VBROADCASTSD exp_p2<>(SB), Z24
	VBROADCASTSD exp_p3<>(SB), Z23
	VBROADCASTSD exp_p4<>(SB), Z22
	VBROADCASTSD exp_p5<>(SB), Z21
	VBROADCASTSD exp_half<>(SB), Z20
	VBROADCASTSD exp_one<>(SB), Z19
	VBROADCASTSD exp_two<>(SB), Z18
	VBROADCASTSD exp_low<>(SB), Z17
	VBROADCASTSD exp_high<>(SB), Z16
	VPBROADCASTQ exp_sign<>(SB), Z15
	VPBROADCASTQ exp_bias<>(SB), Z14
exp_loop:
	// x = scale*(v - top) - off
	VCVTPS2PD (SI)(DX*4), Z0
	VSUBPD Z31, Z0, Z0
	VMULPD Z30, Z0, Z0
	VSUBPD Z29, Z0, Z0
	// every lane in [low, high] (ordered: NaN fails)
	VCMPPD $0x1d, Z17, Z0, K1
	VCMPPD $0x12, Z16, Z0, K2
	KANDB K1, K2, K1
	KMOVB K1, AX
	CMPB AL, $0xff
	JNE exp_done
	// k = trunc(log2e*x + copysign(0.5, x))
	VMULPD Z28, Z0, Z1
	VPANDQ Z15, Z0, Z2
	VPORQ Z20, Z2, Z2
	VADDPD Z2, Z1, Z1
	VCVTTPD2DQ Z1, Y3
	VCVTDQ2PD Y3, Z4
	// hi = x - k*ln2hi, lo = k*ln2lo, r = hi - lo, rr = r*r
	VMULPD Z27, Z4, Z5
	VSUBPD Z5, Z0, Z5
	VMULPD Z26, Z4, Z6
	VSUBPD Z6, Z5, Z7
	VMULPD Z7, Z7, Z8
	// q = rr*(p1 + rr*(p2 + rr*(p3 + rr*(p4 + rr*p5))))
	VMULPD Z21, Z8, Z9
	VADDPD Z22, Z9, Z9
	VMULPD Z9, Z8, Z9
	VADDPD Z23, Z9, Z9
	VMULPD Z9, Z8, Z9
	VADDPD Z24, Z9, Z9
	VMULPD Z9, Z8, Z9
	VADDPD Z25, Z9, Z9
	VMULPD Z9, Z8, Z9
	// c = r - q; y = 1 - ((lo - r*c/(2-c)) - hi)
	VSUBPD Z9, Z7, Z9
	VMULPD Z9, Z7, Z10
	VSUBPD Z9, Z18, Z11
	VDIVPD Z11, Z10, Z10
	VSUBPD Z10, Z6, Z10
	VSUBPD Z5, Z10, Z10
	VSUBPD Z10, Z19, Z10
	// times 2^k
	VPMOVSXDQ Y3, Z12
	VPADDQ Z14, Z12, Z12
	VPSLLQ $52, Z12, Z12
	VMULPD Z12, Z10, Z10
	VMOVUPD Z10, (DI)(DX*8)
	ADDQ $8, DX
	CMPQ DX, CX
	JLT exp_loop
exp_done:
	MOVQ DX, ret+48(FP)
	VZEROUPPER
	RET

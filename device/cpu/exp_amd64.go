//go:build amd64 && !purego

package cpu

import "golang.org/x/sys/cpu"

// haveExpKernel says whether exp_amd64.s may run: AVX-512. Without it the
// same exponentials run in Go, with the same bits.
func haveExpKernel() bool { return cpu.X86.HasAVX512F }

// expShifted8 does expShifted's work for the elements 0..n-1 (n a
// positive multiple of 8), eight at a time, and returns how many it did:
// n, or the start of the first group of eight holding an argument outside
// [expLow, expHigh] (or NaN), which it leaves for exp64.
//
//go:noescape
func expShifted8(x *float32, top, scale, off float64, out *float64, n int) int

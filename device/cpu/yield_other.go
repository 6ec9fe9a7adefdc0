//go:build !linux

package cpu

// osYield is sched_yield where tolaria knows it (Linux); elsewhere the
// spinning worker only yields to goroutines.
func osYield() {}

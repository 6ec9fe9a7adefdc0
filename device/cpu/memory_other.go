//go:build !linux

package cpu

// physicalMemory is 0 (no limit) where the machine's RAM is not read.
func physicalMemory() int64 { return 0 }

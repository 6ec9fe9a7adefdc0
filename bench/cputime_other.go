//go:build !linux

package bench

import "time"

// threadCPU is unavailable off Linux in this build.
func threadCPU() (time.Duration, bool) { return 0, false }

// processCPU is unavailable off Linux in this build.
func processCPU() (time.Duration, bool) { return 0, false }

//go:build linux

package bench

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the user+system CPU time of the calling OS thread. The
// caller must have locked its goroutine to the thread. It reads
// CLOCK_THREAD_CPUTIME_ID rather than getrusage(RUSAGE_THREAD): the same
// quantity, but getrusage's is only as fresh as the scheduler's last
// accounting tick, milliseconds, longer than what the bench times.
func threadCPU() (time.Duration, bool) { return cpuClock(unix.CLOCK_THREAD_CPUTIME_ID) }

// processCPU is the user+system CPU time of the whole process, every
// thread (including a CPU device's stream goroutines):
// CLOCK_PROCESS_CPUTIME_ID, getrusage(RUSAGE_SELF) to the nanosecond.
func processCPU() (time.Duration, bool) { return cpuClock(unix.CLOCK_PROCESS_CPUTIME_ID) }

func cpuClock(id int32) (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}

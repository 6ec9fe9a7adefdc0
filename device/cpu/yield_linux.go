package cpu

import "syscall"

// osYield gives this thread's core to another thread, of this process or
// another, that is ready to run, and returns at once when none is
// (sched_yield). A worker spinning between kernels calls it so that it
// takes no core that other work is waiting for: on a machine with more
// running threads than cores (trials sharing a CPU, a test suite's
// packages), a spin that only yielded to goroutines would.
func osYield() { _, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

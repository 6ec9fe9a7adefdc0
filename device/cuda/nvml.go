package cuda

import (
	"encoding/binary"
	"fmt"
)

// How a process's context is measured (Device.ContextMemory): the source
// of the figure, as a log line names it.
const (
	// ContextFromNVML: NVML's used memory of this process on the GPU
	// (nvmlDeviceGetComputeRunningProcesses), less what the device's pool
	// holds. Exact whatever else runs on the GPU.
	ContextFromNVML = "nvml"
	// ContextFromDriverLocked: the driver's used memory (cuMemGetInfo,
	// total less free) read right after the context was made and the
	// modules loaded, while a per-GPU lock file kept every other tolaria
	// process on the machine from making its context at the same time.
	// What other processes already hold on the GPU is counted too: the
	// figure errs high, never low.
	ContextFromDriverLocked = "driver (total-free under the per-GPU lock)"
	// ContextFromDriverUnlocked: as ContextFromDriverLocked, but the lock
	// file could not be taken (the reason follows in the source): another
	// process's context being made at the same time may be counted too.
	ContextFromDriverUnlocked = "driver (total-free, without the per-GPU lock)"
)

// nvmlProcessInfoSize is the size of nvmlProcessInfo_t as nvml.h (12.x and
// 13.x) declares it for nvmlDeviceGetComputeRunningProcesses_v3, and of
// nvmlProcessInfo_v2_t for _v2 (the same four fields):
//
//	unsigned int       pid;                offset 0 (4 bytes of padding follow)
//	unsigned long long usedGpuMemory;      offset 8
//	unsigned int       gpuInstanceId;      offset 16
//	unsigned int       computeInstanceId;  offset 20
//
// The unversioned (_v1) entry point takes a 16-byte struct of the first two
// fields; it is never called, so a buffer is never read with the wrong
// stride.
const nvmlProcessInfoSize = 24

// nvmlValueNotAvailable is NVML_VALUE_NOT_AVAILABLE as usedGpuMemory
// reports it (an unsigned long long of all ones): the driver does not
// know, as under WDDM or where the process is not visible.
const nvmlValueNotAvailable = ^uint64(0)

// nvmlProcess is one entry of nvmlDeviceGetComputeRunningProcesses.
type nvmlProcess struct {
	pid  uint32
	used uint64 // nvmlValueNotAvailable when NVML does not know
}

// decodeNVMLProcesses reads n nvmlProcessInfo_t entries from buf, in the
// machine's byte order (NVML fills them natively).
func decodeNVMLProcesses(buf []byte, n int) ([]nvmlProcess, error) {
	if n < 0 || n*nvmlProcessInfoSize > len(buf) {
		return nil, fmt.Errorf("NVML reported %d processes but the buffer holds %d bytes (%d entries of %d bytes)",
			n, len(buf), len(buf)/nvmlProcessInfoSize, nvmlProcessInfoSize)
	}
	out := make([]nvmlProcess, n)
	for i := range out {
		e := buf[i*nvmlProcessInfoSize:]
		out[i] = nvmlProcess{pid: binary.NativeEndian.Uint32(e[0:4]), used: binary.NativeEndian.Uint64(e[8:16])}
	}
	return out, nil
}

// nvmlUsedBy is pid's used memory among procs, or an error saying why NVML
// cannot tell: the process is not listed (a driver that lists the host's
// pids to a process in a PID namespace of its own; driver 580 listed a
// worker under its own pid there) or its figure is not available.
func nvmlUsedBy(procs []nvmlProcess, pid int) (int64, error) {
	for _, p := range procs {
		if int(p.pid) != pid {
			continue
		}
		if p.used == nvmlValueNotAvailable {
			return 0, fmt.Errorf("NVML lists process %d but its used memory is not available (NVML_VALUE_NOT_AVAILABLE)", pid)
		}
		return int64(p.used), nil
	}
	return 0, fmt.Errorf("NVML does not list process %d among the GPU's %d compute processes (a driver that lists the host's pids hides a process in a PID namespace of its own, as in a container)", pid, len(procs))
}

// pciBusID formats a GPU's PCI location as cuDeviceGetPCIBusId does
// (domain:bus:device.function, in hexadecimal), which
// nvmlDeviceGetHandleByPciBusId_v2 accepts and which names the GPU
// whatever CUDA_VISIBLE_DEVICES calls it.
func pciBusID(domain, bus, dev int) string {
	return fmt.Sprintf("%08x:%02x:%02x.0", domain, bus, dev)
}
